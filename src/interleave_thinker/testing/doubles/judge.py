"""A scripted judge behind a real OpenAI-compatible HTTP server on 127.0.0.1, for the scoring tests.

``script(body) -> str | int`` answers each ``POST /v1/chat/completions`` (an int is an HTTP error
status); every request body is recorded so tests can compare it byte for byte with the official one.
``latency`` and ``capacity`` make it behave like a server with that many slots (for the benchmark).
:data:`HOSTILE` holds the reply shapes a broken judge sends (each crossed the scorer once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request

Script = Callable[[dict[str, Any]], "str | int"]

HOSTILE: dict[str, str | int] = {
    "surrogate": "Score: 1 \ud83d",  # cut inside an escaped emoji: the wire holds "\\ud83d", a lone half
    "nul": "Score: 1\x00\x00",
    "down": 503,
    "refusing": 400,
}
"""Hostile replies by name; huge and dripping replies are the transport's (``remote.*``) to bound."""


class JudgeServer:
    def __init__(self, script: Script, *, latency: float = 0.0, capacity: int | None = None) -> None:
        self.script = script
        self.latency = latency
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(capacity) if capacity else None
        self.server = LocalServer(self._handle)

    @property
    def url(self) -> str:
        return f"{self.server.url}/v1"

    @property
    def calls(self) -> int:
        with self.lock:
            return len(self.bodies)

    def _handle(self, request: Request) -> Reply:
        if request.method == "GET":
            return Reply(body={"object": "list", "data": [{"id": "scripted-judge", "object": "model"}]})
        return Reply(*self._answer(request.json()))

    def _answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            self.bodies.append(body)
        if self.slots is not None:
            with self.slots:
                time.sleep(self.latency)
        elif self.latency:
            time.sleep(self.latency)
        reply = self.script(body)
        if isinstance(reply, int):
            return reply, {"error": {"message": f"scripted status {reply}"}}
        message = {"role": "assistant", "content": reply}
        return 200, {"id": "j", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}

    def __enter__(self) -> JudgeServer:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()


@contextmanager
def judge_server(script: Script, **kwargs: Any) -> Iterator[JudgeServer]:
    with JudgeServer(script, **kwargs) as server:
        yield server


def user_text(body: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for message in body["messages"]
        if message["role"] == "user"
        for part in message["content"]
        if part.get("type") == "text"
    )


def image_urls(body: dict[str, Any]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in body["messages"]
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def main() -> None:
    """``python -m interleave_thinker.testing.doubles.judge LATENCY CAPACITY``: a judge answering
    "Score: 1" in its own process; prints its URL when it listens."""
    import sys

    server = JudgeServer(lambda body: "Score: 1", latency=float(sys.argv[1]), capacity=int(sys.argv[2]))
    print(server.url, flush=True)
    server.server.serve_forever()


if __name__ == "__main__":
    main()
