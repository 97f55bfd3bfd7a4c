"""Run the service under uvicorn until SIGTERM or SIGINT, then drain and exit 0."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
from collections.abc import Iterator
from types import FrameType

from interleave_thinker.core.errors import ConfigError
from interleave_thinker.server.generator.app import create_app
from interleave_thinker.server.generator.pool import WorkerPool
from interleave_thinker.server.generator.settings import ServiceSettings
from interleave_thinker.server.limits import read_timeout_protocol
from interleave_thinker.server.logs import redact_logs

logger = logging.getLogger(__name__)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before the (slow) model load, so a busy port fails in a second, not after minutes."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r} does not resolve: {exc}.") from exc
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port."
        ) from exc
    return sock


@contextlib.contextmanager
def signals_end_cleanly() -> Iterator[list[int]]:
    """SIGINT/SIGTERM are noted, not fatal: during loading we stop the workers and return, and uvicorn
    (which re-raises the signal that stopped it once it has drained) then exits cleanly.

    Without this, SIGTERM would end the process with status -15 after an otherwise graceful
    shutdown, and supervisors would report a crash.
    """
    received: list[int] = []

    def note(signum: int, _: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(settings: ServiceSettings) -> None:
    """Bind, load the workers, serve; on SIGTERM/SIGINT stop accepting, finish in-flight requests,
    stop the workers and return. A worker that cannot load raises :class:`BackendError` before serving."""
    import uvicorn

    # 1. Fail fast on a busy port, then load every worker (minutes for real checkpoints).
    sock = bind_socket(settings.host, settings.port)
    pool = WorkerPool(settings)
    with signals_end_cleanly() as received:
        try:
            if not pool.start(abort=lambda: bool(received)):
                logger.info("stopped by signal %d while loading", received[-1])
                return
            # 2. Serve until a signal; uvicorn drains in-flight requests, the app's lifespan stops the pool.
            config = uvicorn.Config(
                create_app(settings, pool),
                log_level=settings.log_level,
                access_log=settings.log_level == "debug",
                timeout_graceful_shutdown=int(settings.timeout) + 10,
                ws="none",
                http=read_timeout_protocol(settings.read_timeout),
            )
            redact_logs(settings.api_key)  # after uvicorn.Config, which sets up the log handlers
            logger.info(
                "generator service on http://%s:%d (%d workers)",
                settings.host,
                settings.port,
                settings.workers,
            )
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            sock.close()
            if not pool.stopping.is_set():
                pool.stop()
    if received:
        logger.info("stopped by signal %d after draining", received[-1])
