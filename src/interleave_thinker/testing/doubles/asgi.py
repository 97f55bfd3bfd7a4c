"""An ASGI app (FastAPI) served by uvicorn from a thread on 127.0.0.1, for doubles and in-process services.

The socket is bound here to port 0 before uvicorn starts, so there is no race for a free port.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Self


class AppServer:
    """``with AppServer(app) as server: server.url``; extra keywords go to ``uvicorn.Config``."""

    def __init__(self, app: Any, **config: Any) -> None:
        import uvicorn

        # proto=IPPROTO_TCP, or asyncio leaves Nagle on for accepted connections (it checks sock.proto)
        # and a reply written in two parts waits ~40 ms for the client's delayed ACK.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        settings: dict[str, Any] = {"log_level": "warning", "ws": "none", "lifespan": "off", **config}
        self.server = uvicorn.Server(uvicorn.Config(app, **settings))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
