"""The one place a served backend's HTTP request blocks: sync outside the batch, awaited inside it.

Why a transport: every backend sends through the caller's ``httpx.Client`` (``client.post``,
``client.send``), so swapping what sits under that client changes the blocking point for all of them at
once, and the client keeps doing what it does (headers, timeouts, building multipart bodies, decoding
replies). Outside a greenlet this is httpx's own ``HTTPTransport``. Inside one (a batch request, see
:mod:`interleave_thinker.core.green`) the request is awaited on an ``aiohttp`` connection pool made lazily
for the running loop, shared by every served backend there, and closed when that loop's owner finishes
it, or when its last transport closes. Its failures are
raised as httpx's exceptions (:func:`_translated`), so the caller translates errors in the one place it
always has.

Why aiohttp under the batch: with hundreds of calls in flight, httpx's async pool (httpcore over anyio)
cost about 3 ms of CPU per request on this machine, mostly in scanning its pool and anyio's cancel
scopes; aiohttp, whose HTTP parser is compiled, 0.24 ms for the same requests (4,096 POSTs at 512 in
flight; ``benchmarks/bench_scheduler.py`` shows the batch-level figures, docs/notes/scale.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from interleave_thinker.backends.bounds import (
    MAX_REPLY_BYTES,
    BoundedBody,
    DeadlineBackend,
    decoded_headers,
    time_left,
)
from interleave_thinker.core.green import at_loop_end, await_only, in_green

if TYPE_CHECKING:
    import aiohttp

DROPPED_HEADERS = frozenset({"transfer-encoding"})
"""Headers the buffered body makes wrong (aiohttp frames the body itself, with a Content-Length)."""


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for every pool: building one loads the CA bundle (27 ms of CPU)."""
    return httpx.create_ssl_context()


def _timeouts(request: httpx.Request) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts (``connect``, ``read``, ``pool``) as aiohttp's: no total, so a slow
    but steady reply is bounded per read as it is with httpx."""
    import aiohttp

    given: dict[str, float | None] = request.extensions.get("timeout", {})
    connect = given.get("connect")
    pool = given.get("pool")
    return aiohttp.ClientTimeout(
        total=None,
        connect=None if connect is None or pool is None else connect + pool,
        sock_connect=connect,
        sock_read=given.get("read"),
    )


@contextmanager
def _translated(request: httpx.Request) -> Iterator[None]:
    """aiohttp's and asyncio's failures as the httpx exceptions the caller already classifies."""
    import aiohttp

    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
    except (aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError, TimeoutError) as exc:
        raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc), request=request) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError) as exc:
        raise httpx.RemoteProtocolError(str(exc), request=request) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request) from exc


def _where(request: httpx.Request) -> str:
    """The request's URL as errors show it: without user-info or query."""
    return str(request.url.copy_with(query=None, userinfo=b""))


class _Shared:
    """One event loop's ``aiohttp`` session for every transport with the same connection settings, and
    the transports using it (each keeps the session in its own cache, emptied when the session closes)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.users: weakref.WeakSet[GreenTransport] = weakref.WeakSet()


_SharedKey = tuple[asyncio.AbstractEventLoop, int, float]
_shared: dict[_SharedKey, _Shared] = {}
_shared_lock = threading.Lock()


async def _close_shared(key: _SharedKey) -> None:
    """Close one loop's shared session (the loop's owner ends it: ``finish_loop``)."""
    with _shared_lock:
        entry = _shared.pop(key, None)
        if entry is not None:
            for user in entry.users:
                user._by_loop.pop(key[0], None)
    if entry is not None:
        await entry.session.close()


class GreenTransport(httpx.BaseTransport):
    """``httpx.HTTPTransport`` for threads; an awaited ``aiohttp`` pool per event loop inside greenlets.
    ``limits.max_connections`` bounds both (None: unbounded, the caller's slots are the bound).

    On both paths a reply body is read here, whole, through :class:`~.bounds.BoundedBody` (cut past
    ``max_reply_bytes``, gzip and deflate decoded within the same bound), and within the call's deadline
    (:func:`~.bounds.time_left`): on the thread path every socket read and write is clamped to it
    (:class:`~.bounds.DeadlineBackend`), on the loop path the whole exchange is awaited within it.

    Every transport with the same limits shares its loop's pool, so a batch request whose planner,
    generator and critic live on one server (or whose planner and critic share a vLLM) keeps one
    connection from call to call: with a pool per backend, the 1,024-request scale row opened 2,600-2,900
    connections instead of 1,024, each costing the client and the server a connect, and an idle one
    expired while the request waited on another backend (``benchmarks/bench_scheduler.py``)."""

    def __init__(self, limits: httpx.Limits, *, max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        self._limits = limits
        self.max_reply_bytes = max_reply_bytes
        self._sync = httpx.HTTPTransport(limits=limits, verify=_tls())
        # The same pool httpx builds, with sockets that keep the call's deadline (httpx takes no
        # network backend; httpcore's ConnectionPool does).
        self._sync._pool = httpcore.ConnectionPool(
            ssl_context=_tls(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=DeadlineBackend(),
        )
        self._by_loop: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not in_green():
            return self._bounded(request, self._sync.handle_request(request))
        return await_only(self._send(request, time_left()))

    def _bounded(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        """The thread path's reply with its body read through :class:`BoundedBody`."""
        try:
            body = BoundedBody(
                _where(request),
                response.headers.get("content-encoding", ""),
                self.max_reply_bytes,
                response.headers.get("content-length"),
            )
            for chunk in response.iter_raw():  # as sent: BoundedBody decodes within its bound
                body.feed(chunk)
            data = body.result()
        finally:
            response.close()
        return httpx.Response(
            response.status_code,
            headers=decoded_headers(response.headers.raw, len(data)),
            stream=httpx.ByteStream(data),
            extensions=response.extensions,
        )

    async def _send(self, request: httpx.Request, left: float | None) -> httpx.Response:
        """The reply with its body read and decoded within the bounds, all within ``left`` seconds."""
        import yarl

        body = request.read()  # one buffer: a multipart body streamed part by part cost a write per part
        headers = [  # as written (``raw``: the original case), as httpx's own transports send them
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.lower().decode("latin-1") not in DROPPED_HEADERS
        ]
        session = self._for_running_loop()
        within = asyncio.timeout(max(left, 0.0)) if left is not None else contextlib.nullcontext()
        with _translated(request):
            async with (
                within,
                session.request(
                    request.method,
                    yarl.URL(str(request.url), encoded=True),
                    data=body or None,
                    headers=headers,
                    timeout=_timeouts(request),
                    allow_redirects=False,
                ) as reply,
            ):
                bounded = BoundedBody(
                    _where(request),
                    reply.headers.get("Content-Encoding", ""),
                    self.max_reply_bytes,
                    reply.headers.get("Content-Length"),
                )
                async for chunk in reply.content.iter_any():
                    bounded.feed(chunk)
                raw = bounded.result()
                status, reason, reply_headers = reply.status, reply.reason or "", reply.raw_headers
        return httpx.Response(
            status,
            headers=decoded_headers(reply_headers, len(raw)),
            stream=httpx.ByteStream(raw),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason.encode("ascii", "replace")},
        )

    def _key(self, loop: asyncio.AbstractEventLoop) -> _SharedKey:
        return (loop, self._limits.max_connections or 0, self._limits.keepalive_expiry or 5.0)

    def _for_running_loop(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._by_loop.get(loop)
        if session is not None:
            return session
        key = self._key(loop)
        with _shared_lock:
            entry = _shared.get(key)
            if entry is None:
                entry = _shared[key] = _Shared(self._new_session(key[1], key[2]))
                at_loop_end(functools.partial(_close_shared, key))
            entry.users.add(self)
            self._by_loop[loop] = entry.session
        return entry.session

    @staticmethod
    def _new_session(limit: int, keepalive: float) -> aiohttp.ClientSession:
        """A session that sends what httpx built and nothing else: no added headers, no cookies, no
        decompression (httpx decodes the body, as it does for its own transports). ``limit`` 0 is
        aiohttp's unbounded."""
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=limit, limit_per_host=0, ssl=_tls(), keepalive_timeout=keepalive
        )
        return aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            raise_for_status=False,
        )

    def close(self) -> None:
        """Close the sync pool, and leave every shared async one this transport used. The last user of a
        shared pool closes it when it can from here: on this greenlet's loop (awaited), or on a loop at
        rest (run to close it). One running elsewhere stays for ``finish_loop`` (its owner calls it, as
        the scheduler does, before the loop closes; a closed loop can no longer close its sockets)."""
        self._sync.close()
        here = asyncio.get_running_loop() if in_green() else None
        closing: list[tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession]] = []
        with _shared_lock:
            for loop in list(self._by_loop):
                key = self._key(loop)
                del self._by_loop[loop]
                entry = _shared.get(key)
                if entry is None:
                    continue
                entry.users.discard(self)
                if not entry.users and (loop is here or not loop.is_running()):
                    del _shared[key]
                    closing.append((loop, entry.session))
        for loop, session in closing:
            if loop.is_closed():
                continue
            if loop is here:
                await_only(session.close())
            else:
                loop.run_until_complete(session.close())


class GreenClient(httpx.Client):
    """``httpx.Client`` whose ``send`` goes straight to the transport inside a batch request's greenlet.

    Why: under the batch the client's own send machinery (the auth flow, the redirect loop, a cookie
    extraction per reply that builds urllib and email objects, the timing wrapper, an INFO log line)
    cost 0.06-0.12 ms of the loop thread's CPU per backend call, a sixth to a quarter of the whole HTTP
    path (``benchmarks/bench_http_layers.py``), and the served backends use none of it: they send no auth
    flow, follow no redirects, set no cookies. Outside a greenlet, and for any call that asks for one
    of those (a stream, an auth, redirects), this is httpx's own ``send``.

    ``endpoint_auth`` maps base URLs to the ``Authorization`` value every request under them carries
    (the credentials a user wrote in an endpoint URL, taken out of it by the endpoint pool)."""

    def __init__(self, *, endpoint_auth: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.endpoint_auth = dict(endpoint_auth or {})

    def _authorize(self, request: httpx.Request) -> None:
        url = str(request.url)
        for base, value in self.endpoint_auth.items():
            if url == base or url.startswith((base + "/", base + "?")):
                request.headers["Authorization"] = value
                return

    def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        if self.endpoint_auth:
            self._authorize(request)
        redirects = (
            self.follow_redirects if follow_redirects is httpx.USE_CLIENT_DEFAULT else follow_redirects
        )
        hooks = self.event_hooks["request"] or self.event_hooks["response"]
        uses_auth = auth is not httpx.USE_CLIENT_DEFAULT or self.auth is not None
        if stream or uses_auth or redirects or hooks or not in_green():
            return super().send(request, stream=stream, auth=auth, follow_redirects=follow_redirects)
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        response = self._transport_for_url(request.url).handle_request(request)
        response.request = request
        response.read()
        return response
