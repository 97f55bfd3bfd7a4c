"""The typed training examples every loader returns and every builder and exporter produces.

Image paths are absolute once loaded (resolved against the image folder), so two examples are equal
exactly when their texts and image files are, wherever the file that held them lives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from interleave_thinker.core.types import PlanStep

Role = Literal["system", "user", "assistant"]
Kind = Literal["planner_sft", "planner_rl", "critic_sft", "critic_rl", "record"]
KINDS: tuple[Kind, ...] = ("planner_sft", "planner_rl", "critic_sft", "critic_rl", "record")


@dataclass(frozen=True)
class ChatTurn:
    role: Role
    content: str
    """Text with one ``<image>`` marker where each image of the example belongs, in order."""


@dataclass(frozen=True)
class SFTExample:
    """One ShareGPT-style conversation (``planner_sft.json`` / ``critic_sft.json``)."""

    messages: tuple[ChatTurn, ...]
    images: tuple[Path, ...] = ()


@dataclass(frozen=True)
class PlannerRLExample:
    """One planner GRPO prompt (``planner_rl.jsonl``, the format of FastVideo's InterleaveThinker branch).

    With images it is a guidance request (``text_input`` marks each image's place with ``<image>``),
    without them a narrative one.
    """

    text_input: str
    """The user's request, as it fills the planner template's ``{text_input}``."""
    images: tuple[Path, ...] = ()
    plan_score: float | None = None
    """An external score of the request's plans, 0 to 1 (``plan_score``); None when the row has none."""


@dataclass(frozen=True)
class GroundTruth:
    """The recorded attempt's critic label and judge scores (0-10)."""

    success: bool
    """The critic's label: did the attempt carry out the step."""
    semantics: float
    """The judge's semantic-consistency score of the attempt."""
    quality: float
    """The judge's perceptual-quality score of the attempt."""


@dataclass(frozen=True)
class CriticRLExample:
    """One critic GRPO prompt with the columns the release's reward reads (``critic_rl.jsonl``)."""

    problem: str
    images: tuple[Path, ...]
    origin_prompt: str
    origin_image_path: Path
    edited_image_path: Path | None
    previous_prompt: str
    ground_truth: GroundTruth


@dataclass(frozen=True)
class RecordEntry:
    """One critic call of a trajectory record, in order (several per step when it was retried)."""

    step: int
    prompt: str
    refine_prompt: str
    source_img: Path
    target_img: Path
    success: bool
    reasoning: str | None = None
    semantics: float | None = None
    quality: float | None = None


@dataclass(frozen=True)
class TrajectoryRecord:
    """An ``execution_record.json``: the request, the plan and every critic call."""

    user_input: str
    reasoning: str | None
    plan: tuple[PlanStep, ...]
    steps: tuple[RecordEntry, ...]
    input_images: tuple[Path, ...] = field(default_factory=tuple)
