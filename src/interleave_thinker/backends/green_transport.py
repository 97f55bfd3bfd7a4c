"""The one place a served backend's HTTP request blocks: sync outside the batch, awaited inside it.

Why a transport: every backend sends through the caller's ``httpx.Client`` (``client.post``,
``client.send``), so swapping what sits under that client changes the blocking point for all of them at
once, and the client keeps doing what it does (headers, timeouts, building multipart bodies). Outside a
greenlet this is httpx's own ``HTTPTransport``. Inside one (a batch request, see
:mod:`interleave_thinker.core.green`) the request is awaited on an ``AsyncHTTPTransport`` (the
connection pool of an ``httpx.AsyncClient``) made lazily for the running loop and closed when that loop's
owner finishes it, or at :meth:`close`. Both raise httpx's exceptions, so the caller translates errors in
the one place it always has.

Each loop gets several pools (shards), used in turn: httpcore checks every connection of a pool for
each request it assigns, so one pool of 1,024 connections cost 24 ms of CPU per call, 32 pools 2.4 ms.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import ssl
import threading

import httpx

from interleave_thinker.core.green import at_loop_end, await_only, in_green

SHARDS = 32


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for every pool: building one loads the CA bundle (27 ms of CPU)."""
    return httpx.create_ssl_context()


class GreenTransport(httpx.BaseTransport):
    """``httpx.HTTPTransport`` for threads; an awaited ``httpx.AsyncHTTPTransport`` per event loop
    inside greenlets. ``limits`` apply to the sync pool and, split across the shards, to each loop's."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._sync = httpx.HTTPTransport(limits=limits, verify=_tls())
        self._by_loop: dict[asyncio.AbstractEventLoop, list[httpx.AsyncHTTPTransport]] = {}
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not in_green():
            return self._sync.handle_request(request)
        return await_only(self._send(request))

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """The reply with its raw (still encoded) body read, as the sync client expects to decode it."""
        request.read()  # one buffer: a multipart body streamed part by part cost a socket write per part
        response = await self._for_running_loop().handle_async_request(request)
        try:
            body = b"".join([chunk async for chunk in response.aiter_raw()])
        finally:
            await response.aclose()
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(body),
            extensions=response.extensions,
        )

    def _for_running_loop(self) -> httpx.AsyncHTTPTransport:
        loop = asyncio.get_running_loop()
        with self._lock:
            shards = self._by_loop.get(loop)
            if shards is None:
                shards = self._by_loop[loop] = self._new_shards()
                at_loop_end(lambda: self._close_loop(loop))
        return shards[next(self._turn) % len(shards)]

    def _new_shards(self) -> list[httpx.AsyncHTTPTransport]:
        """Up to :data:`SHARDS` pools sharing the connection limits (a small limit keeps one pool)."""
        total = self._limits.max_connections
        count = SHARDS if total is None else max(1, min(SHARDS, total // 8))
        per = httpx.Limits(
            max_connections=None if total is None else math.ceil(total / count),
            max_keepalive_connections=None
            if self._limits.max_keepalive_connections is None
            else math.ceil(self._limits.max_keepalive_connections / count),
            keepalive_expiry=self._limits.keepalive_expiry,
        )
        return [httpx.AsyncHTTPTransport(limits=per, verify=_tls()) for _ in range(count)]

    async def _close_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            shards = self._by_loop.pop(loop, [])
        for transport in shards:
            await transport.aclose()

    def close(self) -> None:
        """Close the sync pool and every async one that can be closed from here: this greenlet's loop
        (awaited), a loop at rest (run to close it). One running elsewhere is left to ``finish_loop``;
        a closed loop can no longer close its sockets (its owner calls ``finish_loop`` first, as the
        scheduler does)."""
        self._sync.close()
        here = asyncio.get_running_loop() if in_green() else None
        with self._lock:
            mine = {loop: t for loop, t in self._by_loop.items() if loop is here or not loop.is_running()}
            self._by_loop = {loop: t for loop, t in self._by_loop.items() if loop not in mine}
        for loop, shards in mine.items():
            if loop.is_closed():
                continue
            for transport in shards:
                if loop is here:
                    await_only(transport.aclose())
                else:
                    loop.run_until_complete(transport.aclose())
