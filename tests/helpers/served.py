"""Served test set-ups: the VLM service in process, server processes on free ports, and the generator
service's environment and sizes."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from interleave_thinker.server.generator import free_port
from interleave_thinker.server.vlm_service import create_app
from interleave_thinker.testing.doubles.asgi import AppServer
from interleave_thinker.testing.doubles.stoppable import CountingModel
from tests.helpers.common import tiny_dir


class InProcessServer(AppServer):
    """The service over ``backend``, under uvicorn in a thread (``testing.doubles.asgi``)."""

    def __init__(self, backend: Any, served_name: str = "rec") -> None:
        super().__init__(create_app(backend, served_name))


TOKEN_ENV = "IT_TEST_GENERATOR_TOKEN"
TOKEN = "test-token-7f3a"
SMALL = {"width": 64, "height": 64, "num_inference_step": 2}


def offline_env() -> dict[str, str]:
    """What a served child process needs on top of its environment: the shared tiny-model cache, offline."""
    return {
        "INTERLEAVE_THINKER_TINY_DIR": tiny_dir(),
        "HF_HUB_OFFLINE": "1",
        "INTERLEAVE_THINKER_OFFLINE": "1",
    }


def service_env() -> dict[str, str]:
    """What the generator service's subprocess needs: the tiny-model cache, offline, and the test token."""
    return {**offline_env(), TOKEN_ENV: TOKEN}


class Engine:
    """One server process on a free port, started at once and waited for later, so several load side by side."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.log = name, log
        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [*argv, "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ) if env is None else env,
            )

    def wait_ready(self, *, skip_if_it_exits: bool = False, within: float = 120.0) -> None:
        """Poll ``/health``; a server that exits first is a skip (the engine cannot start here) or a failure."""
        deadline = time.monotonic() + within
        while True:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-1500:]
                message = f"{self.name} exited with code {self.process.returncode} before serving: {tail}"
                if skip_if_it_exits:
                    pytest.skip(message)
                pytest.fail(message)
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (
                f"{self.name} not ready in {within:.0f}s: {self.log.read_text()}"
            )
            time.sleep(0.2)

    def reap(self) -> None:
        """Wait for the process told to stop (killed after 20 s)."""
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def stop_all(servers: list[Engine]) -> None:
    """Every server still running told first, then each waited for: they shut down side by side."""
    for server in servers:
        if server.process.poll() is None:
            server.process.terminate()
    for server in servers:
        server.reap()


def post_by_hand(raw: socket.socket, body: bytes) -> None:
    """A chat completion request written on a bare socket, so the test can leave before the reply ends."""
    raw.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def wait_until_generating(model: CountingModel, within: float = 30) -> None:
    """Until ``model`` has made 5 steps: the generation is under way (fails after ``within`` seconds)."""
    deadline = time.monotonic() + within
    while model.steps < 5:
        assert time.monotonic() < deadline, "generation did not start"
        time.sleep(0.01)
