"""The scripted chat (planner, critic) and "/edit" (generator) models on one asyncio server.

Why another server: :mod:`~interleave_thinker.testing.doubles.scripted_models` runs on the standard
library's threading server, one thread per connection, so a test that counts the threads of its own
process while hundreds of requests are in flight would count the server's. Here every reply waits
``delay`` seconds on uvicorn's event loop (one thread however many calls are in flight) and the most
calls held at once is recorded. The replies are the scripted ones (same request, same reply).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from interleave_thinker.testing.doubles.scripted_models import State, chat_reply, edit_reply

Scope = dict[str, Any]


class AsyncModels:
    """An ASGI app: ``POST .../chat/completions`` and ``POST /edit`` after ``delay`` s, ``GET .../models``."""

    def __init__(self, delay: float = 0.05) -> None:
        self.delay = delay
        self.state = State()
        self.in_flight = 0
        self.peak = 0
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "GET":
            reply: Any = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
        else:
            await self._hold()
            answer = chat_reply if scope["path"].endswith("/chat/completions") else edit_reply
            reply = answer(json.loads(body), self.state)
        data = json.dumps(reply).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _hold(self) -> None:
        """Wait ``delay`` s, counting this call among those in flight meanwhile."""
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
