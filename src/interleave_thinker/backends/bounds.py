"""The bounds a served backend holds a server to: a whole call's deadline and the size of a reply.

Why here, under the transport: a server is outside input. One that sends a byte every second keeps
httpx's and aiohttp's read timeouts alive forever (each byte resets them), so ``remote.deadline`` is
enforced on every socket read and write of the call (:class:`DeadlineBackend` on the thread path; the
transport awaits the event-loop path within the same deadline). One that answers 200 MB, or a small
gzip that inflates to 200 MB, is cut while the body streams in (:class:`BoundedBody`), before it is held
whole, decoded or parsed. A reply image is bounded in pixels from its header, before its pixels are
decoded (``encoding.decode_image``).
"""

from __future__ import annotations

import contextvars
import ssl
import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore

from interleave_thinker.core.errors import BackendError
from interleave_thinker.core.images import MAX_IMAGE_PIXELS as MAX_IMAGE_PIXELS  # remote.max_image_pixels

MAX_REPLY_BYTES = 64 * 1024 * 1024
"""Default ``remote.max_reply_mb`` (64): a 4096² generated image in base64 JSON is far below it."""


class ReplyRefused(BackendError):
    """A reply over a bound (size, encoding): not retried, the next try would get the same."""


_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("remote_deadline", default=None)


@contextmanager
def deadline_at(when: float) -> Iterator[None]:
    """Reads and writes in this context (this thread or greenlet) end by ``when`` (``time.monotonic``);
    an enclosing deadline that comes first still holds."""
    outer = _DEADLINE.get()
    token = _DEADLINE.set(when if outer is None else min(outer, when))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds until the current call's deadline (may be <= 0); None outside a call."""
    when = _DEADLINE.get()
    return None if when is None else when - time.monotonic()


def _clamped(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the call; ``expired`` raised when nothing is left."""
    left = time_left()
    if left is None:
        return timeout
    if left <= 0:
        raise expired("the call's deadline (remote.deadline) has passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write waits at most until the call's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _clamped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _clamped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        timeout = _clamped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with :class:`DeadlineStream` sockets: httpx's read timeout restarts
    with every byte, this deadline does not."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self.inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _clamped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self.inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _clamped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self.inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class BoundedBody:
    """A reply body taken in chunk by chunk, decoded (gzip, deflate) as it comes, and refused as soon as
    its decoded size passes ``limit``; :meth:`result` is the whole decoded body."""

    def __init__(self, where: str, encoding: str, limit: int, declared: str | int | None = None) -> None:
        self.where, self.limit = where, limit
        self.parts: list[bytes] = []
        self.size = 0
        self.received = 0
        coding = encoding.strip().lower()
        if coding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise ReplyRefused(
                f"the reply from {where} is {encoding[:40]!r}-encoded, which was not asked for "
                "(Accept-Encoding: gzip, deflate); check the server or the proxy in front of it"
            )
        self._inflate: Any = None
        self._raw_deflate = False
        if coding in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self._raw_deflate = True  # zlib-wrapped or raw: decided on the first byte
        length = int(str(declared)) if str(declared or "").isdigit() else None
        if length is not None and length > limit:
            self._refuse(f"declares {length} bytes")

    def _refuse(self, what: str) -> None:
        raise ReplyRefused(
            f"the reply from {self.where} {what}, over the limit of {self.limit} bytes "
            f"(remote.max_reply_mb = {self.limit / 2**20:g}); raise remote.max_reply_mb or check the server"
        )

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.received += len(chunk)  # as sent: also bounds what follows the end of a gzip stream
        if self.received > self.limit:
            self._refuse(f"is over {self.received} bytes so far")
        if self._raw_deflate:
            zlib_header = (chunk[0] & 0x0F) == 8
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
            self._raw_deflate = False
        if self._inflate is not None:
            try:
                out = self._inflate.decompress(chunk, self.limit - self.size + 1)
            except zlib.error as exc:
                raise ReplyRefused(
                    f"the compressed reply from {self.where} cannot be decoded: {exc}"
                ) from None
            if self._inflate.unconsumed_tail:
                self._refuse("inflates past its limit")
            chunk = out
        self.size += len(chunk)
        if self.size > self.limit:
            self._refuse(f"is over {self.size} bytes so far")
        self.parts.append(chunk)

    def result(self) -> bytes:
        if self._inflate is not None:
            tail = self._inflate.flush()
            self.size += len(tail)
            if self.size > self.limit:
                self._refuse("inflates past its limit")
            self.parts.append(tail)
        return b"".join(self.parts)


DECODED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
"""Reply headers that no longer describe the body once :class:`BoundedBody` has decoded it."""


def decoded_headers(raw: Iterable[tuple[bytes, bytes]], length: int) -> list[tuple[bytes, bytes]]:
    """A reply's headers for its decoded body of ``length`` bytes."""
    kept = [(k, v) for k, v in raw if k.decode("latin-1").lower() not in DECODED_HEADERS]
    return [*kept, (b"Content-Length", str(length).encode("ascii"))]
