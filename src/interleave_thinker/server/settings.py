"""What the services take when not told otherwise: the defaults both share and ``serve vlm``'s limits.

Why a module of its own: the `serve` flags take their defaults from these fields (one source for flag,
help and service), and the CLI reads them at start, so this module imports no FastAPI, uvicorn or model
library. The generator service's own settings are ``server/generator/settings.py: ServiceSettings``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from interleave_thinker.core.images import MAX_IMAGE_PIXELS

HOST = "127.0.0.1"
"""The interface a service binds unless told otherwise: this machine only."""
READ_TIMEOUT = 30.0
"""Seconds a client may take to send its request headers, and at most between two chunks of its body."""
LOG_LEVEL = "info"
VLM_PORT = 8000
"""``serve vlm``'s port: vLLM's."""
DEFAULT_MAX_IMAGES = 8
"""What docs/serving.md has vLLM take for long guidance sequences (``--limit-mm-per-prompt``)."""
DEFAULT_MAX_WAITING = 8
"""Waiting requests hold their bodies (64 MB each at most), never their decoded pixels."""


@dataclass(frozen=True)
class VLMLimits:
    """Bounds on what one request may ask of the server (``serve vlm`` flags; a field's ``help`` is its flag's)."""

    max_tokens: int = field(
        default=8192, metadata={"help": "Largest max_tokens a request may ask for; more: 400."}
    )
    max_body_bytes: int = 64 * 1024 * 1024
    """Largest request body; more is a 413."""
    max_pixels: int = MAX_IMAGE_PIXELS
    """Largest image (width x height, read from its header before decoding); more is a 400."""
    max_images: int = field(
        default=DEFAULT_MAX_IMAGES,
        metadata={
            "help": "Images one request may carry, as vLLM's --limit-mm-per-prompt '{\"image\": N}'; more: 400."
        },
    )
    max_waiting: int = field(
        default=DEFAULT_MAX_WAITING,
        metadata={
            "help": "Requests that may wait while one runs (they hold their bodies, not decoded images); more: 429 "
            "with Retry-After."
        },
    )
