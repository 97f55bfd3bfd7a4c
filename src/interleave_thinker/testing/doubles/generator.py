"""A scripted generator speaking the authors' "/edit" protocol on 127.0.0.1, for client tests.

``POST /edit`` takes ``{"prompt", "image"?, "seed", "width", "height", ...}`` and answers
``{"success": true, "edited_image": <base64 PNG>}``; here each reply comes from a script, so a test can
serve failures, odd bodies, ``Retry-After`` headers or a server that never answers, in order.
"""

from __future__ import annotations

import base64
import io
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request


def png_b64(image: Image.Image) -> str:
    """``image`` as base64 PNG, written here rather than shared with the clients, so a double cannot
    hide an encoding bug of the code it tests."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


RED = Image.new("RGB", (8, 8), (255, 0, 0))
OK = (200, {"success": True, "edited_image": png_b64(RED)})
"""The default step: a small red image."""


@dataclass
class Received:
    body: dict[str, Any]
    headers: dict[str, str]
    at: float


@dataclass
class ScriptedEditServer:
    """Answers ``POST /edit`` from ``script`` in order (then ``then``); records what it received.

    A step is ``(status, body)`` (a dict is sent as JSON, bytes as they are), optionally with headers
    as a third item, or ``"hang"`` to never answer. Starts at once; :meth:`close` stops it.
    """

    script: list[Any] = field(default_factory=list)
    then: Any = OK
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._server = LocalServer(self._handle).start()
        self.url = self._server.url

    def _handle(self, request: Request) -> Reply | None:
        with self._lock:
            self.received.append(Received(request.json(), request.headers, time.monotonic()))
            step = self.script.pop(0) if self.script else self.then
        if step == "hang":
            self.release.wait(10)
            return None
        status, body, *extra = step
        return Reply(status, body, extra[0] if extra else {})

    def close(self) -> None:
        self.release.set()
        self._server.close()
