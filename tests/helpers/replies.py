"""Scripted agent replies in the released formats: a plan from (instruction, prompt, auxiliary_text)
triples and a critic verdict, as the loop's tests script their planner and critic."""

from __future__ import annotations

from typing import Any

from interleave_thinker.agents.critic import format_verdict
from interleave_thinker.agents.planner import format_plan
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.types import Plan, PlanStep, Verdict


def plan_reply(*steps: tuple[str | None, str | None, str | None]) -> str:
    """A planner reply with steps (instruction, prompt, auxiliary_text), named S1, S2, ..."""
    return format_plan(
        Plan(
            steps=[
                PlanStep(step_number=i, step_name=f"S{i}", instruction=ins, prompt=pr, auxiliary_text=aux)
                for i, (ins, pr, aux) in enumerate(steps, start=1)
            ],
            reasoning="plan",
        )
    )


def verdict(success: bool, refine: str = "") -> str:
    """A critic reply: accepted or not, with a refined prompt."""
    return format_verdict(Verdict(success=success, refine_prompt=refine, reasoning="checked"))


def scripted_config(loop: dict[str, Any], **extra: Any) -> PipelineConfig:
    """Settings naming scripted planner, critic and generator at 32x32, with ``loop`` and ``extra`` keys."""
    return PipelineConfig.model_validate(
        {
            "planner": "scripted:p",
            "critic": "scripted:c",
            "generator": "scripted:g",
            "loop": loop,
            "generation": {"width": 32, "height": 32},
            **extra,
        }
    )
