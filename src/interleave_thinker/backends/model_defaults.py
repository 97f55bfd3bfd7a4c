"""The one table of per-model generation defaults: steps, guidance and how each generator takes them.

Why one table: the local ``diffusers`` backend, FastVideo, the vLLM-Omni/SGLang client (which sends
what the local backend would use) and the authors' "/edit" knob presets all need the same numbers (the
authors' settings, UPSTREAM "/edit"); two copies had already started to drift. Importing this module
loads no model library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from interleave_thinker.core.errors import ConfigError


@dataclass(frozen=True)
class ModelDefaults:
    """A model family's defaults; ``guidance_arg`` is the diffusers call argument carrying guidance and
    ``edit_extras`` the further knobs the authors' "/edit" clients send for it."""

    steps: int
    guidance: float
    guidance_arg: str = "guidance_scale"
    edit_extras: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def edit_guidance_key(self) -> str:
        """The "/edit" field for guidance: OmniGen2's servers read ``text_guidance_scale``, all others
        ``guidance_scale`` (Qwen-Image-Edit too, though diffusers calls it ``true_cfg_scale``)."""
        return "text_guidance_scale" if self.guidance_arg == "text_guidance_scale" else "guidance_scale"

    def edit_knobs(self) -> dict[str, Any]:
        """The "/edit" knobs; ``num_inference_step`` is singular on purpose, as in the authors' servers."""
        return {"num_inference_step": self.steps, self.edit_guidance_key: self.guidance, **self.edit_extras}


MODEL_DEFAULTS: Mapping[str, ModelDefaults] = MappingProxyType(
    {
        "flux.2-klein": ModelDefaults(
            4, 1.0, edit_extras={"width": 1024, "height": 1024, "enhance_prompt": False}
        ),
        "qwen-image-edit": ModelDefaults(50, 5.0, "true_cfg_scale"),
        "omnigen2": ModelDefaults(
            50, 5.0, "text_guidance_scale", {"image_guidance_scale": 1.5, "negative_prompt": ""}
        ),
        "longcat": ModelDefaults(50, 4.5, edit_extras={"negative_prompt": ""}),
    }
)
"""Matched by substring of the lower-cased checkpoint reference (see :func:`find_defaults`)."""

FALLBACK_DEFAULTS = ModelDefaults(28, 3.5)
"""For a model the table does not know (diffusers' usual FLUX settings)."""

KNOB_PRESETS: Mapping[str, str] = MappingProxyType(
    {
        "klein": "flux.2-klein",
        "omnigen2": "omnigen2",
        "qwen-image-edit": "qwen-image-edit",
        "longcat": "longcat",
    }
)
"""The ``http:...#PRESET`` names the authors' clients use, mapped to their row of :data:`MODEL_DEFAULTS`."""


def find_defaults(ref: str, pipeline_class: str = "") -> ModelDefaults | None:
    """The row whose key occurs in ``ref`` or the pipeline class name (``Flux2KleinPipeline``), or None."""
    key = (
        f"{ref} {pipeline_class}".lower()
        .replace("flux2klein", "flux.2-klein")
        .replace("qwenimageedit", "qwen-image-edit")
    )
    return next((v for k, v in MODEL_DEFAULTS.items() if k in key), None)


def model_defaults(ref: str, pipeline_class: str = "") -> ModelDefaults:
    """:func:`find_defaults`, else :data:`FALLBACK_DEFAULTS`."""
    return find_defaults(ref, pipeline_class) or FALLBACK_DEFAULTS


def preset_knobs(preset: str) -> dict[str, Any]:
    """The "/edit" knobs of a named preset (``klein``, ``omnigen2``, ...)."""
    if preset not in KNOB_PRESETS:
        raise ConfigError(f"Unknown knob preset '{preset}'; known presets: {', '.join(KNOB_PRESETS)}.")
    return MODEL_DEFAULTS[KNOB_PRESETS[preset]].edit_knobs()
