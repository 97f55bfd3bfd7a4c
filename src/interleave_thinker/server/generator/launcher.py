"""Start ``interleave-thinker serve generator`` in a subprocess and wait until it serves.

Why: tests, benchmarks and notebooks need a real service (real processes, real sockets, real
signals), started and always ended the same careful way; a context manager does both.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

from interleave_thinker.core.errors import BackendError


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out (free at the time of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class GeneratorProcess:
    """``with GeneratorProcess("tiny:generator", workers=2) as service: service.url ...``"""

    def __init__(
        self,
        generator: str,
        *,
        workers: int = 1,
        device: str = "auto",
        host: str = "127.0.0.1",
        port: int | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 600.0,  # a large checkpoint, or a busy machine, takes minutes to load
    ) -> None:
        self.generator = generator
        self.workers = workers
        self.host = host
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.command = [
            sys.executable, "-m", "interleave_thinker", "serve", "generator",
            "--generator", generator, "--host", host, "--port", str(self.port),
            "--workers", str(workers), "--device", device, *args,
        ]  # fmt: skip
        self.env = {**os.environ, **(env or {})}
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> GeneratorProcess:
        """Start the process (its output goes to a temporary log file, never to a pipe that could fill)."""
        self._log = tempfile.NamedTemporaryFile(prefix="generator-service-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, env=self.env
        )
        return self

    def log_text(self) -> str:
        if self._log is None:
            return ""
        return Path(self._log.name).read_text(encoding="utf-8", errors="replace")

    def wait_ready(self) -> None:
        """Until ``/health`` says every worker is loaded; the log's end is in the error otherwise."""
        assert self.process is not None, "start() first"
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise BackendError(
                        f"The generator service exited with code {self.process.returncode} while starting:\n"
                        f"{self.log_text()[-3000:]}"
                    )
                try:
                    health = client.get(f"{self.url}/health")
                    if health.status_code == 200 and health.json().get("workers_ready") == self.workers:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        raise BackendError(
            f"The generator service was not ready within {self.startup_timeout:g}s:\n{self.log_text()[-3000:]}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        """Signal the service and wait; SIGKILL when it does not exit in ``timeout``. Returns its exit code."""
        code = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(sig)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            code = self.process.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def kill(self) -> int | None:
        return self.stop(signal.SIGKILL)

    def __enter__(self) -> GeneratorProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
