"""Backend specs: one URL-like string picks a backend, e.g. ``transformers:Qwen/Qwen3-VL-8B-Instruct``.

The registries below are plain dicts from kind to a loader; later backends (``openai:``, ``http:``,
``gemini:``...) are one entry each.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from interleave_thinker.backends.protocols import ImageBackend, VLMBackend
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import ConfigError

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig


@dataclass(frozen=True)
class BackendSpec:
    kind: str
    target: str
    raw: str


@dataclass(frozen=True)
class BackendOptions:
    """Options for backends: device placement for local ones, transport settings for served ones."""

    device: str | None = None
    dtype: str = "auto"
    attn_implementation: str | None = None
    remote: RemoteOptions = field(default_factory=RemoteOptions)

    @classmethod
    def from_config(cls, config: PipelineConfig) -> BackendOptions:
        return cls(config.model.device, config.model.dtype, config.model.attn_implementation, config.remote)


def parse_spec(spec: str, known: dict[str, object] | None = None) -> BackendSpec:
    kind, sep, target = spec.partition(":")
    if not sep or not kind:
        raise ConfigError(f"Backend spec {spec!r} has no kind; write KIND:TARGET, e.g. 'transformers:ID'.")
    if known is not None and kind not in known:
        raise ConfigError(
            f"Unknown backend kind '{kind}' in {spec!r}; known kinds: {', '.join(sorted(known))}."
        )
    return BackendSpec(kind=kind, target=target, raw=spec)


def _transformers_vlm(spec: BackendSpec, options: BackendOptions, role: str) -> VLMBackend:
    from interleave_thinker.backends.vlm.transformers_backend import TransformersVLMBackend

    return TransformersVLMBackend(
        spec.target,
        device=options.device,
        dtype=options.dtype,
        attn_implementation=options.attn_implementation,
    )


def _tiny_vlm(spec: BackendSpec, options: BackendOptions, role: str) -> VLMBackend:
    from interleave_thinker.core.tiny import ensure_tiny_models

    which = spec.target or role
    if which not in ("planner", "critic", "judge", "planner-sft", "critic-sft", "judge-sft"):
        raise ConfigError(
            f"tiny VLM spec {spec.raw!r}: target must be planner, critic, judge, planner-sft or critic-sft."
        )
    if which.endswith("-sft") or which == "judge":
        # The one upward reference of the layers: the format-trained tiny models are made by our own SFT
        # (train/), built once and cached; imported only when asked for. A random judge could never
        # score, so the tiny judge is always the format-trained one (`tiny:critic` is a random model).
        from interleave_thinker.train.tiny_format import ensure_format_trained

        path = ensure_format_trained(which.removesuffix("-sft"))  # builds only the model asked for
        return _transformers_vlm(BackendSpec("transformers", str(path), spec.raw), options, role)
    paths = ensure_tiny_models()
    return _transformers_vlm(BackendSpec("transformers", str(getattr(paths, which)), spec.raw), options, role)


def _diffusers_image(spec: BackendSpec, options: BackendOptions) -> ImageBackend:
    from interleave_thinker.backends.image.diffusers_backend import DiffusersImageBackend

    return DiffusersImageBackend(spec.target, device=options.device, dtype=options.dtype)


def _tiny_image(spec: BackendSpec, options: BackendOptions) -> ImageBackend:
    from interleave_thinker.core.tiny import ensure_tiny_models

    if spec.target not in ("", "generator"):
        raise ConfigError(f"tiny image spec {spec.raw!r}: target must be 'generator' or empty.")
    return _diffusers_image(BackendSpec("diffusers", str(ensure_tiny_models().generator), spec.raw), options)


def _lazy(module: str, cls: str) -> Callable[..., Any]:
    """A loader that imports ``module`` only when its kind is used and calls ``cls.from_spec``."""

    def load(spec: BackendSpec, options: BackendOptions, *_: str) -> Any:
        backend_class = getattr(importlib.import_module(f"interleave_thinker.backends.{module}"), cls)
        return backend_class.from_spec(spec.target, options)

    return load


VLM_BACKENDS: dict[str, Callable[[BackendSpec, BackendOptions, str], VLMBackend]] = {
    "transformers": _transformers_vlm,
    "tiny": _tiny_vlm,
    "openai": _lazy("vlm.openai_backend", "OpenAIVLMBackend"),
    "gemini": _lazy("vlm.gemini_backend", "GeminiVLMBackend"),
}
IMAGE_BACKENDS: dict[str, Callable[[BackendSpec, BackendOptions], ImageBackend]] = {
    "diffusers": _diffusers_image,
    "tiny": _tiny_image,
    "http": _lazy("image.http_backend", "HTTPImageBackend"),
    "openai-images": _lazy("image.openai_images_backend", "OpenAIImagesBackend"),
    "gemini-image": _lazy("image.gemini_image_backend", "GeminiImageBackend"),
    "fastvideo": _lazy("image.fastvideo_backend", "FastVideoImageBackend"),
    "vllm-omni": _lazy("image.omni_backend", "OmniImagesBackend"),
    "sglang-diffusion": _lazy("image.omni_backend", "SGLangDiffusionBackend"),
}


def load_vlm_backend(
    spec: str, options: BackendOptions | None = None, *, role: str = "planner"
) -> VLMBackend:
    parsed = parse_spec(spec, VLM_BACKENDS)  # type: ignore[arg-type]
    return VLM_BACKENDS[parsed.kind](parsed, options or BackendOptions(), role)


def load_image_backend(spec: str, options: BackendOptions | None = None) -> ImageBackend:
    parsed = parse_spec(spec, IMAGE_BACKENDS)  # type: ignore[arg-type]
    return IMAGE_BACKENDS[parsed.kind](parsed, options or BackendOptions())


def check_specs(config: PipelineConfig) -> None:
    """Fail fast on an unknown backend kind in any role, before anything is loaded."""
    parse_spec(config.planner, VLM_BACKENDS)  # type: ignore[arg-type]
    parse_spec(config.critic, VLM_BACKENDS)  # type: ignore[arg-type]
    parse_spec(config.generator, IMAGE_BACKENDS)  # type: ignore[arg-type]
