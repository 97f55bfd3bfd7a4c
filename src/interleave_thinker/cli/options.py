"""Options shared by the commands that build a pipeline (`run`, `batch`)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from interleave_thinker.core.config import PipelineConfig


class Preset(StrEnum):
    official = "official"
    official_sft_critic = "official-sft-critic"
    tiny = "tiny"


class Fallback(StrEnum):
    error = "error"
    single_step = "single-step"


class TextSteps(StrEnum):
    text = "text"
    generate = "generate"


PresetOption = Annotated[
    Preset | None, typer.Option(help="Backends and settings to start from \\[default: official].")
]
ConfigOption = Annotated[
    Path | None, typer.Option(help="YAML config file (keys as in docs/configuration.md).")
]
PlannerOption = Annotated[str | None, typer.Option(help="Planner backend spec, e.g. transformers:ID.")]
CriticOption = Annotated[str | None, typer.Option(help="Critic backend spec.")]
GeneratorOption = Annotated[str | None, typer.Option(help="Generator backend spec, e.g. diffusers:ID.")]
MaxAttemptsOption = Annotated[int | None, typer.Option(min=1, help="Generator calls per step.")]
SeedOption = Annotated[int | None, typer.Option(help="Seed base: seed = base + step*100 + attempt.")]
DeviceOption = Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N or auto.")]
FallbackOption = Annotated[Fallback | None, typer.Option(help="When no valid plan: error or single-step.")]
TextStepsOption = Annotated[
    TextSteps | None, typer.Option(help="Task-A steps: text answer, or generate an image.")
]
CriticOnLastAttemptOption = Annotated[
    bool | None, typer.Option(help="Ask the critic about the last attempt too.")
]
"""The declarations of the pipeline options, shared so `run` and `batch` spell them the same."""


def build_config(
    preset: Preset | None,
    config: Path | None,
    planner: str | None,
    critic: str | None,
    generator: str | None,
    max_attempts: int | None,
    seed: int | None,
    device: str | None,
    planner_fallback: Fallback | None,
    text_steps: TextSteps | None,
    critic_on_last_attempt: bool | None,
) -> PipelineConfig:
    """The options shared by `run` and `batch`, merged over the preset and config file."""
    loop = {
        "max_attempts": max_attempts,
        "seed_base": seed,
        "planner_fallback": planner_fallback.value if planner_fallback else None,
        "text_steps": text_steps.value if text_steps else None,
        "critic_on_last_attempt": critic_on_last_attempt,
    }
    overrides = {
        "planner": planner,
        "critic": critic,
        "generator": generator,
        "loop": {k: v for k, v in loop.items() if v is not None},
        "model": {"device": device} if device else {},
    }
    return PipelineConfig.resolve(
        preset=preset.value if preset else None, config_file=config, overrides=overrides
    )


def quiet_diffusers() -> None:
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.disable_progress_bar()
