"""One typed configuration for a pipeline, grouped by concern.

Resolution order, later wins: preset YAML (package data) < ``--config`` YAML < ``INTERLEAVE_THINKER_*``
environment variables (``INTERLEAVE_THINKER_LOOP__MAX_ATTEMPTS=5``) < command-line flags.
Unknown keys are errors that name the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

import yaml
from pydantic import Field, ValidationError, field_serializer, model_validator

from interleave_thinker.core.config_sections import (
    EvalOptions,
    PriceOptions,
    PromptOptions,
    RemoteOptions,
    RolePrices,
    ScaleOptions,
    choice,
    count,
    unset,
)
from interleave_thinker.core.config_sections import (
    Section as _Section,
)
from interleave_thinker.core.config_sources import deep_merge, format_validation_error, load_yaml
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.redact import redact_spec
from interleave_thinker.core.spec_syntax import split_spec

ENV_PREFIX = "INTERLEAVE_THINKER_"
PresetName = Literal[
    "official", "official-sft-critic", "tiny", "teacher-nano", "teacher-klein", "teacher-qwen"
]
PlannerFallback = Literal["error", "single-step"]
TextSteps = Literal["text", "generate"]
FirstRewrittenPrompt = Literal["planned", "empty"]
Decoding = Literal["checkpoint", "greedy"]
ReferencePolicy = Literal["release", "previous+inputs", "anchor"]
SelectBest = Literal["off", "critic", "judge"]
SeedDevice = Literal["pipeline", "cpu"]
"""The choices of settings fields, also the choices of their flags (one spelling everywhere)."""
PRESETS: tuple[str, ...] = get_args(PresetName)


class ModelOptions(_Section):
    device: str | None = unset(
        "'cpu', 'cuda', 'cuda:N' or 'auto' (device_map for the VLMs); default: cuda when present, else cpu."
    )
    dtype: str = Field(
        default="auto",
        description="'auto' (the checkpoint's dtype on GPU, float32 on CPU), or 'bfloat16', 'float16', 'float32'.",
    )
    attn_implementation: str | None = unset("VLM attention kernel, e.g. 'flash_attention_2' or 'sdpa'.")
    seed_device: SeedDevice = choice(
        "pipeline",
        "Where a local generator seeds its torch.Generator: 'pipeline' = on the pipeline's CUDA "
        "device when it runs on one (as the release seeds: UEval/ueval_klein.py:208, 219; klein_api.py:137), "
        "so the release's seed gives the release's images, else on the CPU; 'cpu' = on the CPU everywhere "
        "(the same starting noise on every device). The trace records which (settings.generator_seed_device).",
    )


class AgentOptions(_Section):
    max_parse_attempts: int = count(3, "Model calls per planner/critic turn until a reply parses.")
    max_new_tokens: int = count(4096, "Reply length bound for planner and critic.")
    many_images_max_pixels: int | None = count(
        None,
        "Pixel bound of each image when the planner's turn holds five or more (147456 = 384x384, "
        "the key the release's demo writes, which its transformers ignores); none: images as given, as released.",
    )
    decoding: Decoding = choice(
        "checkpoint",
        "How planner and critic replies are decoded: 'checkpoint' (as released: the checkpoint's "
        "generation_config.json unchanged, on every call and retry; served backends send no sampling fields) "
        "or 'greedy' (first call greedy, retries sampled at agents.retry_temperature). Each call is seeded "
        "from loop.seed_base (recorded in the trace).",
    )
    retry_temperature: float = Field(
        default=0.7,
        ge=0.0,
        description="With agents.decoding greedy: sampling temperature of retries after an unparsable reply "
        "(greedy would repeat itself).",
    )
    max_fallback_share: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Largest share of one role's judgements (critic verdicts, judge scores, rankings, "
        "reviews) that may fail, unparsable or unanswered, before `batch`, `data generate` or "
        "`eval generate` stops (checked once a role has 10, and at the end); finished requests are kept and "
        "the same command continues them. 1 never stops.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_temperature(cls, data: Any) -> Any:
        if isinstance(data, dict) and "temperature" in data:
            raise ValueError(
                "agents.temperature was replaced by agents.decoding: write 'decoding: greedy' for a greedy "
                "first call (temperature 0), or drop it to decode with the checkpoint's own generation config"
            )
        return data


class LoopOptions(_Section):
    max_attempts: int = count(3, "Generator calls per step (the release's max_step_iterations).")
    critic_on_last_attempt: bool = Field(
        default=False, description="Ask the critic about the last attempt too (the release force-passes it)."
    )
    seed_base: int = Field(
        default=0, description="Added to every seed: seed = seed_base + step * seed_stride + attempt."
    )
    seed_stride: int = count(100, "Seed distance between steps (the release: step_number * 100 + attempt).")
    text_steps: TextSteps = choice(
        "text",
        "Guidance Task-A steps (no instruction, no prompt): a text answer, or generate from "
        "auxiliary_text as the authors' demo does.",
    )
    planner_fallback: PlannerFallback = choice(
        "error",
        "When the planner never returns a valid plan: 'error', or 'single-step' (the request as one "
        "step, marked in the trace and page).",
    )
    generator_budget: int | None = count(
        None,
        "Generator calls per request, shared by its steps, instead of max_attempts per step (the "
        "authors' data-generation scripts: 15); none = max_attempts per step.",
    )
    first_rewritten_prompt: FirstRewrittenPrompt = choice(
        "planned",
        "The critic's rewritten_prompt on a step's first attempt: 'planned' (the planned prompt, as "
        "the UEval runner and demo) or 'empty' (the authors' data-generation scripts).",
    )

    references: ReferencePolicy = choice(
        "release",
        "Images sent with each edit to keep the subject: 'release' (the previous image only), "
        "'previous+inputs' (also the request's input images) or 'anchor' (the input images and the first "
        "accepted image of the sequence, plus the previous one); with a policy on, the critic also judges "
        "consistency with them.",
    )
    candidates: int = count(
        1,
        "Attempts of a step sent side by side in one round, each with its own seed; the first "
        "accepted in seed order is kept; 1 = the released sequential loop.",
    )
    speculate: int = Field(
        default=0,
        ge=0,
        le=2,
        description="Steps that may run ahead of the critic: as soon as an attempt has an image, the next "
        "step's first generator call starts from it while the critic judges it, and is discarded if that "
        "image is not kept (the kept sequence is the same); 0 = wait for each verdict (the release).",
    )
    select_best: SelectBest = choice(
        "off",
        "When no attempt of a step is accepted (or, with candidates, several of a round are): 'off' "
        "keeps the last (the first), as the release; 'critic' keeps the one the critic ranks best, 'judge' the "
        "one with the best judge SC/PQ.",
    )
    repair_budget: int = Field(
        default=0,
        ge=0,
        description="Generator calls a sequence review may spend regenerating steps that break consistency "
        "after the last step; 0 = no review (the release).",
    )
    repair_reviewer: str | None = unset(
        "VLM backend spec of the sequence review (loop.repair_budget), which names the steps that "
        "break consistency; none = the critic's backend."
    )

    OPT_IN: ClassVar[tuple[str, ...]] = (
        "references",
        "candidates",
        "speculate",
        "select_best",
        "repair_budget",
        "repair_reviewer",
    )
    """Settings beyond the release: recorded in a trace only when changed, so a run with them at their
    defaults writes the same trace, byte for byte, as before they existed."""

    def trace_settings(self) -> dict[str, Any]:
        """The settings a trace and a folder's settings record keep (opt-in ones only when changed)."""
        dumped = self.model_dump(mode="json")
        for key in self.OPT_IN:
            if dumped[key] == type(self).model_fields[key].default:
                del dumped[key]
        return dumped

    @field_serializer("repair_reviewer", when_used="json")
    def _recorded_reviewer(self, spec: str | None) -> str | None:
        """The reviewer's spec as a trace records it: URL credentials as ``***``."""
        return None if spec is None else redact_spec(spec)

    @model_validator(mode="after")
    def _seeds_distinct(self) -> LoopOptions:
        per_step = self.generator_budget or self.max_attempts
        if per_step > self.seed_stride:
            raise ValueError(
                f"loop.seed_stride {self.seed_stride} is below the {per_step} generator calls a step may make "
                "(loop.generator_budget or loop.max_attempts), so two attempts could share a seed; raise "
                "loop.seed_stride"
            )
        return self


class GenerationOptions(_Section):
    width: int = Field(default=1024, ge=16, description="Output width in pixels.")
    height: int = Field(default=1024, ge=16, description="Output height in pixels.")
    steps: int | None = count(None, "Denoising steps; none = the model's default (FLUX.2-klein: 4).")
    guidance: float | None = unset("Guidance scale; none = the model's default (FLUX.2-klein: 1.0).")


class PipelineConfig(_Section):
    """Everything needed to build a :class:`~interleave_thinker.Pipeline`."""

    preset: str | None = unset(
        "Backends and settings to start from (official, official-sft-critic, tiny; for "
        "`data generate`: teacher-nano, teacher-klein, teacher-qwen)."
    )
    planner: str = Field(description="VLM backend spec of the planner, e.g. 'transformers:ID'.")
    critic: str = Field(description="VLM backend spec of the critic (the planner's spec = one shared model).")
    generator: str = Field(
        description="Image backend spec, e.g. 'diffusers:black-forest-labs/FLUX.2-klein-9B'."
    )
    model: ModelOptions = Field(default_factory=ModelOptions)
    agents: AgentOptions = Field(default_factory=AgentOptions)
    loop: LoopOptions = Field(default_factory=LoopOptions)
    generation: GenerationOptions = Field(default_factory=GenerationOptions)
    prompts: PromptOptions = Field(default_factory=PromptOptions)
    remote: RemoteOptions = Field(default_factory=RemoteOptions)
    judge: str | None = unset(
        "VLM backend spec of the judge that scores every attempt in `data generate` (and in any "
        "run with loop.select_best 'judge')."
    )
    prices: PriceOptions = Field(default_factory=PriceOptions)
    notice: str | None = unset("A note shown on every page this config produces.")
    eval: EvalOptions = Field(default_factory=EvalOptions)
    scale: ScaleOptions = Field(default_factory=ScaleOptions)

    @field_serializer("planner", "critic", "generator", "judge", when_used="json")
    def _recorded_spec(self, spec: str | None) -> str | None:
        """Specs as JSON records of the settings hold them: URL credentials as ``***``."""
        return None if spec is None else redact_spec(spec)

    @model_validator(mode="after")
    def _check(self) -> PipelineConfig:
        for role in ("planner", "critic", "generator"):
            try:
                split_spec(getattr(self, role), "diffusers:ID" if role == "generator" else "transformers:ID")
            except ValueError as exc:
                raise ValueError(f"{role} spec {getattr(self, role)!r}: {exc} (or 'tiny:')") from None
        if self.loop.select_best == "judge" and not self.judge:
            raise ValueError(
                "loop.select_best 'judge' needs a judge to score the attempts: set the key 'judge' (flag "
                "--select-best-judge SPEC) or choose loop.select_best 'critic'"
            )
        return self

    @classmethod
    def resolve(
        cls,
        *,
        preset: str | None = None,
        config_file: Path | None = None,
        overrides: dict[str, Any] | None = None,
        environ: dict[str, str] | None = None,
    ) -> PipelineConfig:
        """Merge preset, file, environment and flags (in that order) into one validated config."""
        data: dict[str, Any] = {}
        file_data = load_yaml(config_file) if config_file is not None else {}
        name = preset or file_data.get("preset") or (None if "planner" in file_data else "official")
        if name is not None:
            data = preset_data(name)
        deep_merge(data, file_data)
        deep_merge(data, env_overrides(os.environ if environ is None else environ))
        deep_merge(data, {k: v for k, v in (overrides or {}).items() if v is not None})
        return cls.from_dict(data, origin=str(config_file) if config_file else "configuration")

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, origin: str = "configuration") -> PipelineConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"Invalid {origin}: {format_validation_error(exc)}") from None


def preset_data(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise ConfigError(f"Unknown preset '{name}'; choose one of: {', '.join(PRESETS)}.")
    text = (resources.files("interleave_thinker") / "presets" / f"{name}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    data["preset"] = name
    return dict(data)


def env_overrides(environ: dict[str, str] | os._Environ[str]) -> dict[str, Any]:
    """``INTERLEAVE_THINKER_<SECTION>__<KEY>`` or ``INTERLEAVE_THINKER_<ROLE>`` for config keys only."""
    sections = {
        name
        for name, field in PipelineConfig.model_fields.items()
        if field.annotation not in (str, str | None)
    }
    top = {"planner", "critic", "generator"}
    result: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        parts = key[len(ENV_PREFIX) :].lower().split("__")
        if len(parts) == 1 and parts[0] in top:
            result[parts[0]] = value
        elif len(parts) == 2 and parts[0] in sections:
            result.setdefault(parts[0], {})[parts[1]] = yaml.safe_load(value) if value else None
    return result


__all__ = [
    "EvalOptions",
    "PipelineConfig",
    "PriceOptions",
    "PromptOptions",
    "RemoteOptions",
    "RolePrices",
    "ScaleOptions",
    "env_overrides",
    "format_validation_error",
    "load_yaml",
    "preset_data",
]
