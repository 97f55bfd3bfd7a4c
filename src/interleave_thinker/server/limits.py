"""Limits both services share: a read timeout for slow clients and a request body bound.

Why our own HTTP protocol class: uvicorn's keep-alive timer is cancelled by any byte received and is
not armed before a connection's first request, so a client that sends a header byte now and then (or
nothing at all) holds a connection, and its memory, forever; hundreds of them exhaust the server.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from interleave_thinker.server.asgi import HTTPMiddleware


def read_timeout_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request headers are not complete within
    ``seconds`` of the request's start, or whose body stalls for ``seconds`` between two chunks."""

    class ReadTimeoutProtocol(H11Protocol):
        read_timeout = seconds

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_read_timer()

        def data_received(self, data: bytes) -> None:
            self._last_data = self.loop.time()
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_read_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            timer = getattr(self, "_read_timer", None)
            if timer is not None:
                timer.cancel()
            super().connection_lost(exc)

        def _arm_read_timer(self) -> None:
            timer = getattr(self, "_read_timer", None)
            if timer is not None:
                timer.cancel()
            self._cycle_start = self._last_data = self.loop.time()
            self._read_timer: asyncio.TimerHandle | None = self.loop.call_later(
                self.read_timeout, self._check_read
            )

        def _check_read(self) -> None:
            self._read_timer = None
            if self.transport.is_closing():
                return
            state = self.conn.their_state
            if state is h11.IDLE:  # the headers must be complete within the timeout
                since = self._cycle_start
            elif state is h11.SEND_BODY:  # the body must keep coming
                since = self._last_data
            else:  # read completely: the app's own limits apply until the next request
                return
            waited = self.loop.time() - since
            if waited >= self.read_timeout:
                self.transport.close()
                return
            self._read_timer = self.loop.call_later(self.read_timeout - waited, self._check_read)

    return ReadTimeoutProtocol


class BodyTooLarge(Exception):
    """Raised from ``receive`` inside the app when the body passes the limit."""


@dataclass
class BodyLimit(HTTPMiddleware):
    """ASGI middleware: 413 when a request body is declared or turns out larger than ``limit`` bytes."""

    limit: int
    reply: Any

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await self.reply(int(declared))(scope, receive, send)
            return
        size = 0
        state = {"started": False, "over": False}

        async def counted_receive() -> dict[str, Any]:
            nonlocal size
            message: dict[str, Any] = await receive()
            size += len(message.get("body", b""))
            if size > self.limit:
                state["over"] = True
                raise BodyTooLarge
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            # Frameworks turn a failing body read into their own 400; over the limit, ours goes out.
            if state["over"]:
                if not state["started"]:
                    state["started"] = True
                    await self.reply(size)(scope, receive, send)
                return
            state["started"] = state["started"] or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(BodyTooLarge):
            await self.app(scope, counted_receive, guarded_send)
        if state["over"] and not state["started"]:
            await self.reply(size)(scope, receive, send)


@dataclass
class Admission(HTTPMiddleware):
    """ASGI middleware: at most ``capacity`` requests to ``path`` in the app at once (running or waiting
    for the one-at-a-time model); one more gets ``reply()`` (a 429) before its body is read, so the
    requests held, and the memory they hold, stay bounded however many clients send at once."""

    path: str
    capacity: int
    reply: Any
    inside: int = 0

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        if self.inside >= self.capacity:
            await self.reply()(scope, receive, send)
            return
        self.inside += 1  # one event loop: no lock needed between the check and the count
        try:
            await self.app(scope, receive, send)
        finally:
            self.inside -= 1
