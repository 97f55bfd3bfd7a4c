"""A scripted OpenAI-compatible chat server on 127.0.0.1: the n-th call's reply comes from a script.

Every call (method, path, headers, JSON body) is recorded, so a test can check exactly what a client
sent; a reply may be delayed (until the server closes) to test client timeouts and deadlines.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from interleave_thinker.testing.doubles.server import LocalServer, Request
from interleave_thinker.testing.doubles.server import Reply as Answer


@dataclass
class Call:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    delay: float = 0.0


def ok(text: str) -> Reply:
    return Reply(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]})


Script = Callable[[int, Call], Reply]


class ScriptedServer:
    """A threaded server whose reply to the n-th call (0-based) comes from ``script``; records calls."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls: list[Call] = []
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server = LocalServer(self._handle)
        self.url = f"{self._server.url}/v1"

    def _handle(self, request: Request) -> Answer:
        call = Call(request.method, request.path, request.headers, request.json())
        with self._lock:
            index = len(self.calls)
            self.calls.append(call)
        reply = self.script(index, call)
        if reply.delay:
            self._release.wait(reply.delay)
        return Answer(reply.status, reply.body)

    def posts(self) -> list[Call]:
        return [c for c in self.calls if c.method == "POST"]

    def __enter__(self) -> ScriptedServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.close()
