"""The one place a served backend's HTTP request blocks: sync outside the batch, awaited inside it.

Why a transport: every backend sends through the caller's ``httpx.Client`` (``client.post``,
``client.send``), so swapping what sits under that client changes the blocking point for all of them at
once, and the client keeps doing what it does (headers, timeouts, building multipart bodies, decoding
replies). Outside a greenlet this is httpx's own ``HTTPTransport``. Inside one (a batch request, see
:mod:`interleave_thinker.core.green`) the request is awaited on an ``aiohttp`` connection pool made lazily
for the running loop and closed when that loop's owner finishes it, or at :meth:`close`. Its failures are
raised as httpx's exceptions (:func:`_translated`), so the caller translates errors in the one place it
always has.

Why aiohttp under the batch: with hundreds of calls in flight, httpx's async pool (httpcore over anyio)
cost about 3 ms of CPU per request on this machine, mostly in scanning its pool and anyio's cancel
scopes; aiohttp, whose HTTP parser is compiled, 0.24 ms for the same requests (4,096 POSTs at 512 in
flight; ``benchmarks/bench_scheduler.py`` shows the batch-level figures, docs/serving.md).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpx

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


class GreenTransport(httpx.BaseTransport):
    """``httpx.HTTPTransport`` for threads; an awaited ``aiohttp`` pool per event loop inside greenlets.
    ``limits.max_connections`` bounds both (None: unbounded, the caller's slots are the bound)."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._sync = httpx.HTTPTransport(limits=limits, verify=_tls())
        self._by_loop: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not in_green():
            return self._sync.handle_request(request)
        return await_only(self._send(request))

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """The reply with its raw (still encoded) body read, as the sync client expects to decode it."""
        import yarl

        body = request.read()  # one buffer: a multipart body streamed part by part cost a write per part
        headers = [  # as written (``raw``: the original case), as httpx's own transports send them
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.lower().decode("latin-1") not in DROPPED_HEADERS
        ]
        session = self._for_running_loop()
        with _translated(request):
            async with session.request(
                request.method,
                yarl.URL(str(request.url), encoded=True),
                data=body or None,
                headers=headers,
                timeout=_timeouts(request),
                allow_redirects=False,
            ) as reply:
                raw = await reply.read()
                status, reason, reply_headers = reply.status, reply.reason or "", reply.raw_headers
        return httpx.Response(
            status,
            headers=list(reply_headers),
            stream=httpx.ByteStream(raw),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason.encode("ascii", "replace")},
        )

    def _for_running_loop(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        with self._lock:
            session = self._by_loop.get(loop)
            if session is None:
                session = self._by_loop[loop] = self._new_session()
                at_loop_end(lambda: self._close_loop(loop))
        return session

    def _new_session(self) -> aiohttp.ClientSession:
        """A session that sends what httpx built and nothing else: no added headers, no cookies, no
        decompression (httpx decodes the body, as it does for its own transports)."""
        import aiohttp

        limit = self._limits.max_connections or 0  # aiohttp: 0 = unbounded
        connector = aiohttp.TCPConnector(
            limit=limit,
            limit_per_host=0,
            ssl=_tls(),
            keepalive_timeout=self._limits.keepalive_expiry or 5.0,
        )
        return aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            raise_for_status=False,
        )

    async def _close_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            session = self._by_loop.pop(loop, None)
        if session is not None:
            await session.close()

    def close(self) -> None:
        """Close the sync pool and every async one that can be closed from here: this greenlet's loop
        (awaited), a loop at rest (run to close it). One running elsewhere is left to ``finish_loop``;
        a closed loop can no longer close its sockets (its owner calls ``finish_loop`` first, as the
        scheduler does)."""
        self._sync.close()
        here = asyncio.get_running_loop() if in_green() else None
        with self._lock:
            mine = {loop: s for loop, s in self._by_loop.items() if loop is here or not loop.is_running()}
            self._by_loop = {loop: s for loop, s in self._by_loop.items() if loop not in mine}
        for loop, session in mine.items():
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
    of those (a stream, an auth, redirects), this is httpx's own ``send``."""

    def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
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
