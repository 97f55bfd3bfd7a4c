"""Scripted agent replies in the released formats: a plan from (instruction, prompt, auxiliary_text)
triples and a critic verdict, as the loop's tests script their planner and critic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interleave_thinker.agents.critic import format_verdict
from interleave_thinker.agents.planner import format_plan
from interleave_thinker.backends.protocols import ImageRequest, Message
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.types import Plan, PlanStep, Verdict
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend


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


def accepting(prompt: str, *seeds: int) -> Callable[[list[Message]], str]:
    """A critic reply that accepts the scripted generator's image of ``prompt`` at any of ``seeds`` and
    rejects any other: the attempts of a round (``loop.candidates``) may reach the critic in any order."""

    def reply(messages: list[Message]) -> str:
        before, after = ScriptedVLMBackend.images_in(messages)[:2]
        for seed in seeds:
            for image in (before, None):  # the critic's "before" of a first step is a white canvas
                request = ImageRequest(prompt, image=image, width=after.width, height=after.height, seed=seed)
                if ScriptedImageBackend().generate(request).tobytes() == after.tobytes():
                    return verdict(True)
        return verdict(False, f"{prompt}, calmer")

    return reply
