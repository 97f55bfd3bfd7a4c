"""A scripted judge behind a real OpenAI-compatible HTTP server on 127.0.0.1, for the scoring tests.

``script(body) -> str | int`` answers each ``POST /v1/chat/completions`` (an int is an HTTP error
status); every request body is recorded so tests can compare it byte for byte with the official one.
``latency`` and ``capacity`` make it behave like a server with that many slots (for the benchmark).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Script = Callable[[dict[str, Any]], "str | int"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # read by listen() in the constructor: the default 5 drops bursts of connects


class JudgeServer:
    def __init__(self, script: Script, *, latency: float = 0.0, capacity: int | None = None) -> None:
        self.script = script
        self.latency = latency
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(capacity) if capacity else None
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def calls(self) -> int:
        with self.lock:
            return len(self.bodies)

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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else delayed ACKs add ~40 ms to every reply

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "scripted-judge", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._send(*outer._answer(body))

        return Handler

    def __enter__(self) -> JudgeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


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
    """``python -m tests.eval_judge LATENCY CAPACITY``: a judge answering "Score: 1" in its own process."""
    import sys

    server = JudgeServer(lambda body: "Score: 1", latency=float(sys.argv[1]), capacity=int(sys.argv[2]))
    print(server.url, flush=True)
    server.server.serve_forever()


if __name__ == "__main__":
    main()
