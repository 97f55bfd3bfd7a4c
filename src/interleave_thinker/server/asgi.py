"""The plain ASGI middleware every server and double here builds on: it sees HTTP requests only.

Why plain and not Starlette's ``BaseHTTPMiddleware``: that spawns a task group and memory streams per
request, which was most of a test double's CPU under a wave of 1,024 calls; a plain wrapper costs a call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class HTTPMiddleware:
    """Wraps ``app``: an HTTP request goes to :meth:`handle`; other scopes (lifespan, websocket) pass
    through untouched."""

    app: Any

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self.handle(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """One HTTP request: reply, or pass it on to ``self.app``."""
        await self.app(scope, receive, send)
