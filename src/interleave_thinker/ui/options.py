"""The demo's own settings (server side) and the per-run settings a visitor may change in the page."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.images import MAX_IMAGE_PIXELS
from interleave_thinker.core.paths import cache_home

SIZE_CHOICES = (256, 512, 768, 1024)
"""Square image sizes offered in the page besides the configured one."""
MAX_ATTEMPTS_LIMIT = 6
"""Upper bound of the attempts slider: more only lengthens a public demo's queue."""


def default_out_root() -> Path:
    """``<cache home>/demo``: the user's own folder (made 0700), never a shared temp folder where
    another account could plant the root or a link inside it (``ui/files.private_root``)."""
    return cache_home() / "demo"


@dataclass(frozen=True)
class DemoOptions:
    """How the demo serves visitors: where runs go, how long they live, how many run at once."""

    out_root: Path = field(default_factory=default_out_root)
    ttl_s: float = 3600.0
    concurrency: int = 1
    queue_size: int = 16
    max_upload_mb: float = 10.0
    max_images: int = 8
    max_upload_pixels: int = MAX_IMAGE_PIXELS
    """Pixels per uploaded image, read from its header before anything is decoded."""
    max_prompt_chars: int = 4000
    """Characters of the request (at most 4 bytes each); longer requests are refused before the queue."""

    def __post_init__(self) -> None:
        checks = {
            "concurrency": self.concurrency >= 1,
            "queue_size": self.queue_size >= 1,
            "ttl_s": self.ttl_s > 0,
            "max_upload_mb": self.max_upload_mb > 0,
            "max_images": self.max_images >= 0,
            "max_upload_pixels": self.max_upload_pixels >= 1,
            "max_prompt_chars": self.max_prompt_chars >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ConfigError(f"Demo option(s) {', '.join(bad)} must be positive; got {self}.")

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)


@dataclass(frozen=True)
class RunSettings:
    """The advanced settings of one run, as the page sends them."""

    max_attempts: int
    seed: int
    text_steps: str
    critic_on_last_attempt: bool
    size: str

    def apply(self, base: PipelineConfig) -> PipelineConfig:
        """A copy of ``base`` with these settings; values out of range are :class:`ConfigError`."""
        width, height = parse_size(self.size)
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise ConfigError(f"Max attempts must be 1 to {MAX_ATTEMPTS_LIMIT}; got {self.max_attempts}.")
        cfg = base.model_copy(deep=True)
        try:
            cfg.loop.max_attempts = int(self.max_attempts)
            cfg.loop.seed_base = int(self.seed)
            cfg.loop.text_steps = self.text_steps  # type: ignore[assignment]  # validated on assignment
            cfg.loop.critic_on_last_attempt = bool(self.critic_on_last_attempt)
            cfg.generation.width, cfg.generation.height = width, height
        except ValidationError as exc:
            problem = exc.errors()[0]
            field_name = ".".join(str(p) for p in problem["loc"]) or "setting"
            raise ConfigError(f"Advanced setting {field_name}: {problem['msg']}.") from None
        return cfg


def size_label(width: int, height: int) -> str:
    return f"{width}x{height}"


def size_choices(width: int, height: int) -> list[str]:
    """The configured size first, then the usual squares."""
    labels = [size_label(width, height)]
    labels += [size_label(s, s) for s in SIZE_CHOICES if size_label(s, s) not in labels]
    return labels


def parse_size(label: str) -> tuple[int, int]:
    """``"512x512"`` -> (512, 512), sides 16 to 2048 and multiples of 16."""
    parts = str(label).lower().split("x")
    try:
        width, height = (int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"Image size {label!r} is not WIDTHxHEIGHT, e.g. 512x512.") from None
    for side in (width, height):
        if not 16 <= side <= 2048 or side % 16:
            raise ConfigError(f"Image size {label!r}: each side must be 16 to 2048 and a multiple of 16.")
    return width, height
