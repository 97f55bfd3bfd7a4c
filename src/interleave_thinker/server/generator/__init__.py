"""The generator service: any image backend behind the authors' "/edit" protocol.

``interleave-thinker serve generator --generator SPEC`` runs :func:`serve`: a FastAPI app in the
web process (validation, a bounded queue, timeouts, metrics) and one worker process per device,
each loading the backend with :func:`~interleave_thinker.backends.specs.load_image_backend`.

::

    client ──POST /edit──► app (check token, size, JSON, image header)
                             │ WorkerPool.submit: admit (workers + queue_size at most) or 503
                             ▼
                           queue ──► feeder thread i ──pipe──► worker process i (device i)
                             ▲                                   decode → generate → encode
                             └──────── reply or 500 (worker died: restarted) ◄──┘
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interleave_thinker.core.errors import RequestError
    from interleave_thinker.server.auth import api_key_from_env
    from interleave_thinker.server.generator.app import create_app
    from interleave_thinker.server.generator.launcher import GeneratorProcess, free_port
    from interleave_thinker.server.generator.pool import WorkerPool
    from interleave_thinker.server.generator.protocol import EditJob, parse_edit_request
    from interleave_thinker.server.generator.run import serve
    from interleave_thinker.server.generator.settings import ServiceSettings, worker_devices

_HOMES = {
    "RequestError": "interleave_thinker.core.errors",
    "api_key_from_env": "interleave_thinker.server.auth",
    "create_app": "interleave_thinker.server.generator.app",
    "GeneratorProcess": "interleave_thinker.server.generator.launcher",
    "free_port": "interleave_thinker.server.generator.launcher",
    "WorkerPool": "interleave_thinker.server.generator.pool",
    "EditJob": "interleave_thinker.server.generator.protocol",
    "parse_edit_request": "interleave_thinker.server.generator.protocol",
    "serve": "interleave_thinker.server.generator.run",
    "ServiceSettings": "interleave_thinker.server.generator.settings",
    "worker_devices": "interleave_thinker.server.generator.settings",
}
"""Where each name of the package lives. Why imported on first use: ``serve generator``'s flags take their
defaults from :class:`ServiceSettings` when the CLI starts, and that must not load FastAPI (the app)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "EditJob",
    "GeneratorProcess",
    "RequestError",
    "ServiceSettings",
    "WorkerPool",
    "api_key_from_env",
    "create_app",
    "free_port",
    "parse_edit_request",
    "serve",
    "worker_devices",
]
