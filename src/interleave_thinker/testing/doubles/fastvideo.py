"""A stand-in ``fastvideo`` package for tests: FastVideo needs a CUDA GPU, so its typed API is played here.

What it speaks, as read in ``hao-ai-lab/FastVideo`` 0.2.0 (our own code, written from that surface):

- ``fastvideo.VideoGenerator.from_pretrained(model_path, **kwargs)`` with the "convenience" kwargs of
  ``fastvideo/entrypoints/video_generator.py`` (``num_gpus``, the ``*_cpu_offload`` flags...); the real
  one warns on any other kwarg, the stand-in refuses it so a typo fails the test;
- ``fastvideo.api.GenerationRequest`` and its parts ``InputConfig``, ``SamplingConfig``, ``OutputConfig``
  (``fastvideo/api/schema.py``: the fields the backend may set, with the real defaults), and
  ``fastvideo.api.parse_config(GenerationRequest, raw)``, which builds one from a nested mapping, refuses
  an unknown field with ``ValueError("path: unknown field")`` as the real parser does, and remembers
  which leaves were given (the real one tracks them so that unset fields keep the model's preset);
- ``generator.generate(request)`` taking a ``GenerationRequest`` (never the deprecated ``generate_video``,
  which the stand-in does not have) and returning a ``GenerationResult`` whose ``frames`` holds one
  ``H x W x 3`` uint8 array per frame; it creates ``output.output_path`` as the real one does even when
  nothing is saved; ``shutdown()``.

The pictures are deterministic: a text-to-image call is one flat colour from the seed and step count, an
edit is the negative of the input image; ``prompt="explode"`` raises CUDA's out-of-memory error.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, get_type_hints

import numpy as np
import pytest
from PIL import Image

CONVENIENCE_KWARGS = frozenset(
    {
        "num_gpus",
        "revision",
        "trust_remote_code",
        "tp_size",
        "sp_size",
        "dit_cpu_offload",
        "dit_layerwise_offload",
        "text_encoder_cpu_offload",
        "image_encoder_cpu_offload",
        "vae_cpu_offload",
        "pin_cpu_memory",
    }
)
"""The subset of ``_FROM_PRETRAINED_CONVENIENCE_KWARGS`` a test may pass."""


@dataclass
class InputConfig:
    prompt_path: str | None = None
    image_path: str | None = None
    pil_image: Any | None = None


@dataclass
class SamplingConfig:
    num_videos_per_prompt: int = 1
    seed: int = 1024
    num_frames: int = 125
    height: int = 720
    width: int = 1280
    fps: int = 24
    num_inference_steps: int = 50
    guidance_scale: float = 1.0
    guidance_rescale: float = 0.0
    true_cfg_scale: float | None = None


@dataclass
class OutputConfig:
    output_path: str = "outputs/"
    output_video_name: str | None = None
    save_video: bool = True
    return_frames: bool = True


@dataclass
class GenerationRequest:
    prompt: str | list[str] | None = None
    negative_prompt: str | None = None
    inputs: InputConfig = field(default_factory=InputConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    explicit: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """Dotted paths of the leaves the caller gave (the real request keeps them in a private attribute)."""


@dataclass
class GenerationResult:
    prompt: str | None = None
    frames: Any | None = None
    size: tuple[int, int, int] | None = None
    generation_time: float | None = None
    video_path: str | None = None
    peak_memory_mb: float | None = None


T = TypeVar("T")


def _parse(cls: type[T], raw: Any, path: str, explicit: set[str]) -> T:
    if not isinstance(raw, dict):
        raise ValueError(f"{path or '(request)'}: expected mapping for {cls.__name__}")
    names = {f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
             if f.name != "explicit"}  # fmt: skip
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"{path}.{key}" if path else key
        if key not in names:
            raise ValueError(f"{where}: unknown field")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = _parse(hint, value, where, explicit)  # type: ignore[arg-type]
            continue
        if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{where}: expected int")
        if hint in (float, float | None) and value is not None and not isinstance(value, int | float):
            raise ValueError(f"{where}: expected float")
        if hint is bool and not isinstance(value, bool):
            raise ValueError(f"{where}: expected bool")
        values[key] = value
        explicit.add(where)
    return cls(**values)


def parse_config(config_type: type[T], raw: Any) -> T:
    """A typed request from a nested mapping; unknown fields are refused with their dotted path."""
    explicit: set[str] = set()
    parsed = _parse(config_type, raw, "", explicit)
    if isinstance(parsed, GenerationRequest):
        parsed.explicit = frozenset(explicit)
    return parsed


class FakeVideoGenerator:
    """Stands in for ``fastvideo.VideoGenerator``; records loads, requests and shutdowns."""

    loaded: ClassVar[list[FakeVideoGenerator]] = []

    def __init__(self, model_path: str, load_kwargs: dict[str, Any]) -> None:
        self.model_path, self.load_kwargs = model_path, load_kwargs
        self.requests: list[GenerationRequest] = []
        self.input_pixels: list[
            tuple[int, ...] | None
        ] = []  # pixel (0, 0) of inputs.image_path, read in the call
        self.input_sizes: list[tuple[int, int] | None] = []
        self.shutdowns = 0
        self.align = 1
        FakeVideoGenerator.loaded.append(self)

    @classmethod
    def from_pretrained(cls, model_path: str | None = None, **kwargs: Any) -> FakeVideoGenerator:
        if model_path == "missing/model":
            raise ValueError("Model path does not exist: missing/model")
        unknown = sorted(set(kwargs) - CONVENIENCE_KWARGS)
        if unknown:
            raise TypeError(f"from_pretrained: not a convenience kwarg: {', '.join(unknown)}")
        assert model_path is not None
        return cls(model_path, kwargs)

    def generate(self, request: GenerationRequest, *, log_queue: Any = None) -> GenerationResult:
        if not isinstance(request, GenerationRequest):
            raise TypeError(f"generate() takes a GenerationRequest, got {type(request).__name__}")
        if request.prompt == "explode":
            raise RuntimeError("CUDA out of memory")
        Path(request.output.output_path).mkdir(parents=True, exist_ok=True)
        source = None
        if request.inputs.image_path:
            with Image.open(request.inputs.image_path) as opened:
                source = opened.convert("RGB")
        pixel = source.getpixel((0, 0)) if source is not None else None
        self.requests.append(request)
        self.input_pixels.append(pixel if isinstance(pixel, tuple) else None)
        self.input_sizes.append(source.size if source is not None else None)
        sampling = request.sampling
        height = -(-sampling.height // self.align) * self.align
        width = -(-sampling.width // self.align) * self.align
        if source is not None:
            frame = 255 - np.asarray(source.resize((width, height)), dtype=np.uint8)
        else:
            frame = np.empty((height, width, 3), dtype=np.uint8)
            frame[...] = (sampling.seed % 256, sampling.num_inference_steps * 10 % 256, 77)
        return GenerationResult(
            prompt=request.prompt if isinstance(request.prompt, str) else None,
            frames=[frame] if request.output.return_frames else None,
            size=(height, width, sampling.num_frames),
            generation_time=0.01,
        )

    def shutdown(self) -> None:
        self.shutdowns += 1


def install_fastvideo(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Make ``import fastvideo`` and ``import fastvideo.api`` give the stand-in (until the test ends)."""
    package = types.ModuleType("fastvideo")
    api = types.ModuleType("fastvideo.api")
    for part in (
        GenerationRequest,
        InputConfig,
        SamplingConfig,
        OutputConfig,
        GenerationResult,
        parse_config,
    ):
        setattr(api, part.__name__, part)
    package.VideoGenerator = FakeVideoGenerator  # type: ignore[attr-defined]
    package.api = api  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fastvideo", package)
    monkeypatch.setitem(sys.modules, "fastvideo.api", api)
    FakeVideoGenerator.loaded = []
    return package
