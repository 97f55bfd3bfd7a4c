"""Settings of the generator service, checked once before any process starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from interleave_thinker.backends.specs import IMAGE_BACKENDS, parse_spec
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.images import MAX_IMAGE_PIXELS
from interleave_thinker.server.generator.protocol import DEFAULT_MAX_PROMPT_CHARS
from interleave_thinker.server.settings import HOST, LOG_LEVEL, READ_TIMEOUT

DEFAULT_PORT = 8011
DEFAULT_MAX_PIXELS = MAX_IMAGE_PIXELS


@dataclass(frozen=True)
class ServiceSettings:
    """Everything ``serve generator`` takes; ``devices`` holds one entry per worker process."""

    generator: str
    devices: tuple[str, ...] = ("cpu",)
    dtype: str = "auto"
    """Weights dtype of every worker's backend (``model.dtype``)."""
    host: str = HOST
    port: int = DEFAULT_PORT
    queue_size: int = 64
    """Requests that may wait for a worker beyond the ones being generated; more get 503."""
    timeout: float = 300.0
    """Seconds from arrival to reply, queueing included; later replies are 504."""
    api_key: str | None = field(default=None, repr=False)
    max_body_bytes: int = 20 * 1024 * 1024
    max_pixels: int = DEFAULT_MAX_PIXELS
    """Bound of input images (decompression bombs) and of the requested output size."""
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
    """Longest prompt; longer ones get 400."""
    read_timeout: float = READ_TIMEOUT
    """Seconds a client may take to send its request headers, and between two chunks of its body."""
    torch_threads: int | None = None
    """Intra-op threads per CPU worker; default: the cores shared evenly between workers."""
    log_level: str = LOG_LEVEL

    def __post_init__(self) -> None:
        parse_spec(self.generator, IMAGE_BACKENDS)
        if self.generator.startswith("http:"):
            raise ConfigError(
                "serve generator cannot serve an http: backend; give a local one (tiny:, diffusers:)."
            )
        checks = [
            (len(self.devices) >= 1, "--workers must be at least 1"),
            (self.queue_size >= 0, f"--queue-size must be >= 0, got {self.queue_size}"),
            (self.timeout > 0, f"--timeout must be > 0 seconds, got {self.timeout}"),
            (self.max_body_bytes > 0, f"--max-body-mb must be > 0, got {self.max_body_bytes} bytes"),
            (self.max_pixels > 0, f"--max-pixels must be > 0, got {self.max_pixels}"),
            (self.max_prompt_chars > 0, f"--max-prompt-chars must be > 0, got {self.max_prompt_chars}"),
            (self.read_timeout > 0, f"--read-timeout must be > 0, got {self.read_timeout}"),
            (0 < self.port < 65536, f"--port must be in 1..65535, got {self.port}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message + ".")

    @property
    def workers(self) -> int:
        return len(self.devices)

    def threads_for(self, device: str) -> int | None:
        """CPU workers split the cores so that N workers do not fight over every core."""
        if not device.startswith("cpu"):
            return None
        if self.torch_threads is not None:
            return self.torch_threads
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, cores // max(1, sum(d.startswith("cpu") for d in self.devices)))


def worker_devices(device: str, workers: int | None) -> tuple[str, ...]:
    """One device per worker: ``cuda:0..N-1`` (round-robin when more workers than GPUs) or N CPU workers.

    ``auto`` means CUDA when torch sees a GPU; torch is imported only for ``auto`` and ``cuda`` so that a
    CPU service's web process stays light.
    """
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}.")
    if device == "cpu":
        return ("cpu",) * (workers or 1)
    if device not in ("auto", "cuda"):
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}.")
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        if device == "cuda":
            raise ConfigError("--device cuda, but torch sees no CUDA device; use --device cpu.")
        return ("cpu",) * (workers or 1)
    return tuple(f"cuda:{i % gpus}" for i in range(workers or gpus))
