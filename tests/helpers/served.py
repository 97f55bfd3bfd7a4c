"""Served test set-ups: the VLM service in process, and the generator service's environment and sizes."""

from __future__ import annotations

from typing import Any

from interleave_thinker.server.vlm_service import create_app
from interleave_thinker.testing.doubles.asgi import AppServer
from tests.helpers.common import tiny_dir


class InProcessServer(AppServer):
    """The service over ``backend``, under uvicorn in a thread (``testing.doubles.asgi``)."""

    def __init__(self, backend: Any, served_name: str = "rec") -> None:
        super().__init__(create_app(backend, served_name))


TOKEN_ENV = "IT_TEST_GENERATOR_TOKEN"
TOKEN = "test-token-7f3a"
SMALL = {"width": 64, "height": 64, "num_inference_step": 2}


def service_env() -> dict[str, str]:
    """What the subprocess needs: the shared tiny-model cache, offline, and the test token."""
    tiny = tiny_dir()
    return {
        "INTERLEAVE_THINKER_TINY_DIR": tiny,
        "HF_HUB_OFFLINE": "1",
        "INTERLEAVE_THINKER_OFFLINE": "1",
        TOKEN_ENV: TOKEN,
    }
