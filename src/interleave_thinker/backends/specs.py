"""Backend specs: one URL-like string picks a backend, e.g. ``transformers:Qwen/Qwen3-VL-8B-Instruct``.

The registries below are plain dicts from kind to a loader; later backends (``openai:``, ``http:``,
``gemini:``...) are one entry each. Kinds that live above this layer (``tiny:``, in ``tiny``) are added
with :func:`register_kind` by the package root, so this module imports nothing above ``backends`` and
nothing heavy: a bad spec is reported before torch or diffusers load.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from interleave_thinker.backends.protocols import ImageBackend, VLMBackend
from interleave_thinker.backends.references import KINDS_WITHOUT_REFERENCES, check_policy
from interleave_thinker.core.config import RemoteOptions
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.redact import redact_spec
from interleave_thinker.core.spec_syntax import split_spec

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig


@dataclass(frozen=True)
class BackendSpec:
    kind: str
    target: str

    @property
    def raw(self) -> str:
        """The spec as written (``KIND:TARGET``): what an error quotes back to the user."""
        return f"{self.kind}:{self.target}"


@dataclass(frozen=True)
class BackendOptions:
    """Options for backends: device placement for local ones, transport settings for served ones."""

    device: str | None = None
    dtype: str = "auto"
    attn_implementation: str | None = None
    remote: RemoteOptions = field(default_factory=RemoteOptions)
    seed_device: str = "pipeline"
    """``model.seed_device``: where a local generator seeds (``pipeline``: its CUDA device, else the CPU)."""

    @classmethod
    def from_config(cls, config: PipelineConfig) -> BackendOptions:
        model = config.model
        return cls(model.device, model.dtype, model.attn_implementation, config.remote, model.seed_device)


def parse_spec(
    spec: str,
    known: Mapping[str, object] | None = None,
    *,
    source: str | None = None,
    example: str = "transformers:ID",
) -> BackendSpec:
    """The one check of a backend spec: a kind, one of ``known`` (when given). With ``source`` (the flag
    or key that set it, as the CLI names it), errors start with it and an empty target is refused too,
    unless the kind takes one (:data:`EMPTY_TARGET_KINDS`)."""
    kinds = ", ".join(sorted(known)) if known is not None else ""
    where = f"{source or 'Backend spec'} {spec!r}"
    try:
        kind, target = split_spec(spec, example)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}" + (f" (kinds: {kinds})." if kinds else ".")) from None
    if source is None:
        if known is not None and kind not in known:
            raise ConfigError(f"Unknown backend kind '{kind}' in {spec!r}; known kinds: {kinds}.")
        return BackendSpec(kind=kind, target=target)
    if known is not None and kind not in known:
        raise ConfigError(f"{where}: Unknown backend kind '{kind}'; known kinds: {kinds}.")
    if not target.strip() and kind not in EMPTY_TARGET_KINDS:
        raise ConfigError(f"{where}: the {kind} backend needs a target after the colon.")
    return BackendSpec(kind=kind, target=target)


LOCAL_KINDS = {"transformers", "diffusers", "fastvideo"}
"""Kinds that load a model into this process (and torch with it); every other kind is served. A kind
registered later says so itself (``register_kind(..., local=True)``)."""
EMPTY_TARGET_KINDS: set[str] = set()
"""Kinds whose target may be empty (``tiny:`` picks the tiny model of the role), as registered."""


def is_local(spec: str) -> bool:
    """Whether ``spec`` loads a model into this process, so that its libraries are worth importing."""
    return spec.partition(":")[0] in LOCAL_KINDS


def _transformers_vlm(spec: BackendSpec, options: BackendOptions, role: str) -> VLMBackend:
    from interleave_thinker.backends.vlm.transformers_backend import TransformersVLMBackend

    return TransformersVLMBackend(
        spec.target,
        device=options.device,
        dtype=options.dtype,
        attn_implementation=options.attn_implementation,
    )


def _diffusers_image(spec: BackendSpec, options: BackendOptions) -> ImageBackend:
    from interleave_thinker.backends.image.diffusers_backend import DiffusersImageBackend

    return DiffusersImageBackend(
        spec.target, device=options.device, dtype=options.dtype, seed_device=options.seed_device
    )


def _lazy(module: str, cls: str) -> Callable[..., Any]:
    """A loader that imports ``module`` only when its kind is used and calls ``cls.from_spec``."""

    def load(spec: BackendSpec, options: BackendOptions, *_: str) -> Any:
        backend_class = getattr(importlib.import_module(f"interleave_thinker.backends.{module}"), cls)
        return backend_class.from_spec(spec.target, options)

    return load


VLM_BACKENDS: dict[str, Callable[[BackendSpec, BackendOptions, str], VLMBackend]] = {
    "transformers": _transformers_vlm,
    "openai": _lazy("vlm.openai_backend", "OpenAIVLMBackend"),
    "gemini": _lazy("vlm.gemini_backend", "GeminiVLMBackend"),
}
IMAGE_BACKENDS: dict[str, Callable[[BackendSpec, BackendOptions], ImageBackend]] = {
    "diffusers": _diffusers_image,
    "http": _lazy("image.http_backend", "HTTPImageBackend"),
    "openai-images": _lazy("image.openai_images_backend", "OpenAIImagesBackend"),
    "gemini-image": _lazy("image.gemini_image_backend", "GeminiImageBackend"),
    "fastvideo": _lazy("image.fastvideo_backend", "FastVideoImageBackend"),
    "vllm-omni": _lazy("image.omni_backend", "OmniImagesBackend"),
    "sglang-diffusion": _lazy("image.omni_backend", "SGLangDiffusionBackend"),
}


CHECKPOINT_KINDS: dict[str, Callable[[str], Path]] = {}
"""Kinds whose targets name local checkpoint folders (``tiny:planner-sft`` -> its cached folder), for callers
that load a checkpoint themselves (SFT and GRPO start from one)."""


def register_kind(
    kind: str,
    *,
    vlm: Callable[[BackendSpec, BackendOptions, str], VLMBackend] | None = None,
    image: Callable[[BackendSpec, BackendOptions], ImageBackend] | None = None,
    checkpoint: Callable[[str], Path] | None = None,
    local: bool = False,
    empty_target: bool = False,
) -> None:
    """Add a backend kind: its chat loader, image loader and (for local checkpoints) folder resolver;
    ``local``: it loads a model into this process (:func:`is_local`); ``empty_target``: ``KIND:`` alone
    is a complete spec.

    Loaders must import heavy libraries inside themselves. Registering the same loader again is a no-op;
    another loader under a taken kind is refused, so two wings cannot silently shadow each other.
    """
    entries: list[tuple[dict[str, Any], Any]] = [
        (VLM_BACKENDS, vlm),
        (IMAGE_BACKENDS, image),
        (CHECKPOINT_KINDS, checkpoint),
    ]
    for registry, loader in entries:
        if loader is not None and registry.get(kind, loader) is not loader:
            raise ConfigError(f"Backend kind '{kind}' is registered twice; pick another kind name.")
    for registry, loader in entries:
        if loader is not None:
            registry[kind] = loader
    if local:
        LOCAL_KINDS.add(kind)
    if empty_target:
        EMPTY_TARGET_KINDS.add(kind)


def checkpoint_folder(spec: str) -> Path:
    """The local folder a checkpoint spec such as ``tiny:critic-sft`` names (built when missing)."""
    parsed = parse_spec(spec, CHECKPOINT_KINDS)
    return CHECKPOINT_KINDS[parsed.kind](parsed.target)


def load_vlm_backend(
    spec: str, options: BackendOptions | None = None, *, role: str = "planner"
) -> VLMBackend:
    parsed = parse_spec(spec, VLM_BACKENDS)
    return with_spec(VLM_BACKENDS[parsed.kind](parsed, options or BackendOptions(), role), spec)


def load_image_backend(spec: str, options: BackendOptions | None = None) -> ImageBackend:
    parsed = parse_spec(spec, IMAGE_BACKENDS)
    return with_spec(IMAGE_BACKENDS[parsed.kind](parsed, options or BackendOptions()), spec)


B = TypeVar("B")


def with_spec(backend: B, spec: str) -> B:
    """Mark ``backend`` with the spec it was loaded from, which traces record (``tiny:critic``, not the
    folder it resolves to); a loader that delegates to another spec is marked with the outer one.
    Credentials in its URLs are recorded as ``***`` (:func:`~interleave_thinker.core.redact.redact_spec`)."""
    with contextlib.suppress(AttributeError):  # a class refusing new attributes is described by its name
        backend.spec = redact_spec(spec)  # type: ignore[attr-defined]
    return backend


def check_specs(
    config: PipelineConfig, *, roles: tuple[str, ...] = ("planner", "critic", "generator")
) -> None:
    """Fail fast on an unknown backend kind in any of ``roles``, a local checkpoint path that does not
    exist, a hub model that is neither cached nor reachable, or a ``loop.references`` policy a generator
    kind cannot follow, before anything is loaded."""
    from interleave_thinker.backends._loading import resolve_checkpoint

    registries = {"planner": VLM_BACKENDS, "critic": VLM_BACKENDS, "generator": IMAGE_BACKENDS}
    for role in roles:
        parsed = parse_spec(getattr(config, role), registries[role])  # type: ignore[arg-type]
        if parsed.kind in ("transformers", "diffusers"):
            resolve_checkpoint(parsed.target)
        if parsed.kind == "fastvideo":  # its #options too
            from interleave_thinker.backends.image.fastvideo_options import parse_target

            parse_target(parsed.target)
        if role == "generator" and parsed.kind in KINDS_WITHOUT_REFERENCES:  # before a GPU model loads
            check_policy(config.generator, 0, config.loop.references)
