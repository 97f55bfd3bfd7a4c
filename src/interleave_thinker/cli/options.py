"""Options shared by the commands that build a pipeline (`run`, `batch`)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

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
