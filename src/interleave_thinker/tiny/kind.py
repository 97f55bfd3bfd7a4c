"""The ``tiny`` backend kind: the offline tiny models behind ``tiny:planner``, ``tiny:critic-sft``,
``tiny:judge``, ``tiny:generator`` and friends.

Why here and registered from the package root: the format-trained tiny models are made by our own SFT
(``train``), so resolving them from ``backends`` would point an arrow up. The package root calls
:func:`register_tiny_kind` once, which makes ``tiny:`` work from the CLI, the UI, the servers and the
Python API alike. Light on purpose: no torch, transformers, diffusers or ``train`` at import (the training
variant of the tiny chat template goes to ``backends/chat_templates.py``); the loaders import them when called.
"""

from __future__ import annotations

from pathlib import Path

from interleave_thinker.backends.chat_templates import register_training_template
from interleave_thinker.backends.protocols import ImageBackend, VLMBackend
from interleave_thinker.backends.specs import (
    BackendOptions,
    BackendSpec,
    load_image_backend,
    load_vlm_backend,
    register_kind,
)
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.tiny.tokenizer import CHAT_TEMPLATE, TRAINING_TEMPLATE

VLM_TARGETS = ("planner", "critic", "judge", "planner-sft", "critic-sft", "judge-sft")


def tiny_vlm_folder(target: str) -> Path:
    """The checkpoint folder of a tiny VLM target, built (and cached) when missing.

    ``*-sft`` and ``judge`` are the format-trained models (only the one asked for is built); a random
    judge could never score, so ``tiny:judge`` is always the format-trained one.
    """
    if target not in VLM_TARGETS:
        raise ConfigError(
            f"tiny VLM target {target!r}: use planner, critic, judge, planner-sft, critic-sft or judge-sft."
        )
    if target.endswith("-sft") or target == "judge":
        from interleave_thinker.tiny.format_trained import ensure_format_trained

        return ensure_format_trained(target.removesuffix("-sft"))
    from interleave_thinker.tiny.models import ensure_tiny_model

    return ensure_tiny_model(target)


def _tiny_vlm(spec: BackendSpec, options: BackendOptions, role: str) -> VLMBackend:
    which = spec.target or role
    if which not in VLM_TARGETS:
        raise ConfigError(
            f"tiny VLM spec {spec.raw!r}: target must be planner, critic, judge, planner-sft or critic-sft."
        )
    backend = load_vlm_backend(f"transformers:{tiny_vlm_folder(which)}", options, role=role)
    from interleave_thinker.tiny.formats import constrain_formats

    return constrain_formats(backend)


def _tiny_image(spec: BackendSpec, options: BackendOptions) -> ImageBackend:
    if spec.target not in ("", "generator"):
        raise ConfigError(f"tiny image spec {spec.raw!r}: target must be 'generator' or empty.")
    from interleave_thinker.tiny.models import ensure_tiny_model

    return load_image_backend(f"diffusers:{ensure_tiny_model('generator')}", options)


def register_tiny_kind() -> None:
    """Register ``tiny:`` with the backend specs and the tiny chat template's training variant with SFT."""
    register_kind(
        "tiny", vlm=_tiny_vlm, image=_tiny_image, checkpoint=tiny_vlm_folder, local=True, empty_target=True
    )
    register_training_template(CHAT_TEMPLATE, TRAINING_TEMPLATE)
