"""One small HTTP server for every test double: a function from request to reply, served on 127.0.0.1.

Why: each double used to hand-write its ``BaseHTTPRequestHandler``, body reading, JSON encoding, thread
and shutdown. Here a double is only ``handle(request) -> Reply``; the server does the rest. Standard
library only, so a double starts in milliseconds and needs nothing a product install lacks.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    """What a client sent; ``headers`` keep the names as sent."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class Reply:
    """What to answer: a dict or list is sent as JSON, bytes as they are. Hostile servers: ``drip``
    sends the whole reply (status line and headers too) one byte every ``drip`` seconds; ``chunks``
    streams a body of any length with chunked transfer encoding instead of ``body``."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    drip: float = 0.0
    chunks: Iterable[bytes] | None = None

    def encoded(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()


Handle = Callable[[Request], "Reply | None"]
"""Answers one request; ``None`` sends nothing (a server that hangs, or one whose client gave up)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # read by listen() in the constructor: the default 5 drops bursts of connects

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (timeout and retry tests do) is normal here, not a traceback on stderr."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _handler_class(handle: Handle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # else delayed ACKs add ~40 ms to every reply

        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            reply = handle(Request(self.command, self.path, dict(self.headers), body))
            if reply is None:
                self.close_connection = True
                return
            if reply.drip or reply.chunks is not None:
                self._hostile(reply)
                return
            data = reply.encoded()
            try:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout tests)
                self.close_connection = True

        def _hostile(self, reply: Reply) -> None:
            """A dripped or chunk-streamed reply, written by hand; the connection closes after it."""
            self.close_connection = True
            head = [f"HTTP/1.1 {reply.status} X", f"Content-Type: {reply.content_type}", "Connection: close"]
            head += [f"{name}: {value}" for name, value in reply.headers.items()]
            try:
                if reply.chunks is not None:
                    self.wfile.write(
                        ("\r\n".join([*head, "Transfer-Encoding: chunked"]) + "\r\n\r\n").encode()
                    )
                    for chunk in reply.chunks:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                data = reply.encoded()
                raw = ("\r\n".join([*head, f"Content-Length: {len(data)}"]) + "\r\n\r\n").encode() + data
                for at in range(len(raw)):
                    self.wfile.write(raw[at : at + 1])
                    self.wfile.flush()
                    time.sleep(reply.drip)
            except OSError:  # the client gave up: what a hostile server is for
                pass

        do_GET = do_POST = do_PUT = do_DELETE = _serve

    return Handler


class LocalServer:
    """``with LocalServer(handle) as server: server.url`` serves ``handle`` from a thread on 127.0.0.1.

    ``port=0`` lets the kernel pick a free port (no race); :meth:`serve_forever` runs it in the caller's
    thread instead, for a double started as its own process.
    """

    def __init__(self, handle: Handle, *, port: int = 0) -> None:
        self.httpd = _Server(("127.0.0.1", port), _handler_class(handle))
        self.port = int(self.httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def start(self) -> LocalServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self.httpd.shutdown()
            self._thread.join(5)
        self.httpd.server_close()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
