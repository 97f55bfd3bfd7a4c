"""The release's data filters as configurable rules, and the resampling that follows them.

Per step, over its attempts' judge scores (overall = sqrt(SC * PQ), 0-10):

- ``refinement_trend`` (SFT): at least two attempts, the last one labelled a success, and the last
  score at least ``trend_min_gain`` above the first: the critic's refinement visibly worked.
- ``stable_high`` (SFT): every score at least ``high_score`` and their standard deviation at most
  ``low_std``: an easy, consistent step.
- ``high_variance`` (RL): at least two attempts and a standard deviation of at least ``high_std``:
  outcomes differ a lot, so judging them is worth a reward signal.

A step matching an SFT rule goes to SFT, else one matching the RL rule goes to RL, else it is unused.
Steps without scores are ``unscored`` (score them with ``--judge``).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from interleave_thinker.core.config import format_validation_error, load_yaml
from interleave_thinker.core.errors import ConfigError

T = TypeVar("T")
U = TypeVar("U")
RULES = ("refinement_trend", "stable_high", "high_variance")


class BuildRules(BaseModel):
    """Thresholds and sampling of ``data build``; YAML via ``--rules FILE``, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid")

    high_score: float = Field(default=7.0, ge=0, le=10, description="stable_high: every score at least this.")
    low_std: float = Field(default=1.0, ge=0, description="stable_high: standard deviation at most this.")
    trend_min_gain: float = Field(default=1.0, ge=0, description="refinement_trend: last - first score.")
    high_std: float = Field(default=2.0, ge=0, description="high_variance: standard deviation at least this.")
    sft_rl_ratio: float | None = Field(
        default=2.0, gt=0, description="Critic SFT:RL example ratio after filtering; null keeps all."
    )
    balance_labels: Literal["downsample", "upsample", "none"] = Field(
        default="downsample", description="Resample each critic set to equal True/False counts."
    )
    first_attempt_rewritten: Literal["prompt", "empty"] = Field(
        default="prompt",
        description="Critic {rewritten_prompt} on a first attempt: the planned prompt (as the pipeline "
        "sends it) or empty (as the authors' data scripts did).",
    )
    guidance_cuts: int = Field(
        default=1, ge=0, description="Guidance planner pairs cut from each accepted sequence (random points)."
    )

    @classmethod
    def load(cls, path: Path | None) -> BuildRules:
        if path is None:
            return cls()
        try:
            return cls.model_validate(load_yaml(path))
        except ValidationError as exc:
            raise ConfigError(f"Invalid rules file {path}: {format_validation_error(exc)}") from None


@dataclass(frozen=True)
class StepDecision:
    matched: tuple[str, ...]
    pool: Literal["sft", "rl"] | None
    scored: bool


def classify(
    scores: Sequence[float | None], labels: Sequence[bool | None], rules: BuildRules
) -> StepDecision:
    """Which rules a step's attempt scores (in order) and labels match, and the pool it goes to.

    >>> classify([3.0, 8.5], [False, True], BuildRules()).pool
    'sft'
    >>> classify([8.0, 2.0, 9.0], [False, False, None], BuildRules()).matched
    ('high_variance',)
    """
    if not scores or any(s is None for s in scores):
        return StepDecision((), None, False)
    values = [float(s) for s in scores if s is not None]
    std = statistics.pstdev(values)
    matched = []
    if len(values) >= 2 and labels[-1] is True and values[-1] - values[0] >= rules.trend_min_gain:
        matched.append("refinement_trend")
    if min(values) >= rules.high_score and std <= rules.low_std:
        matched.append("stable_high")
    if len(values) >= 2 and std >= rules.high_std:
        matched.append("high_variance")
    pool: Literal["sft", "rl"] | None = None
    if "refinement_trend" in matched or "stable_high" in matched:
        pool = "sft"
    elif "high_variance" in matched:
        pool = "rl"
    return StepDecision(tuple(matched), pool, True)


def balance(items: list[T], label: Callable[[T], bool], mode: str, rng: random.Random) -> list[T]:
    """Equal True/False counts: drop from the larger class, or repeat random members of the smaller."""
    yes = [i for i, x in enumerate(items) if label(x)]
    no = [i for i, x in enumerate(items) if not label(x)]
    if mode == "none" or not yes or not no or len(yes) == len(no):
        return list(items)
    small, large = (yes, no) if len(yes) < len(no) else (no, yes)
    if mode == "downsample":
        keep = set(small) | set(rng.sample(large, len(small)))
        return [x for i, x in enumerate(items) if i in keep]
    return list(items) + [items[i] for i in rng.choices(small, k=len(large) - len(small))]


def take(items: list[T], n: int, label: Callable[[T], bool], rng: random.Random) -> list[T]:
    """``n`` items, drawn per label in proportion, so a balanced set stays balanced."""
    if n >= len(items):
        return items
    yes = [i for i, x in enumerate(items) if label(x)]
    no = [i for i, x in enumerate(items) if not label(x)]
    n_yes = round(n * len(yes) / len(items))
    keep = set(rng.sample(yes, min(n_yes, len(yes)))) | set(rng.sample(no, min(n - n_yes, len(no))))
    return [x for i, x in enumerate(items) if i in keep]


def apply_ratio(
    sft: list[T],
    rl: list[U],
    ratio: float | None,
    labels: tuple[Callable[[T], bool], Callable[[U], bool]],
    rng: random.Random,
) -> tuple[list[T], list[U]]:
    """Trim the larger side so ``len(sft) / len(rl)`` is ``ratio`` (both kept when either is empty)."""
    if ratio is None or not sft or not rl:
        return sft, rl
    if len(sft) > ratio * len(rl):
        return take(sft, int(ratio * len(rl)), labels[0], rng), rl
    return sft, take(rl, max(1, int(len(sft) / ratio)), labels[1], rng)


@dataclass
class BuildStats:
    """Counts ``data stats`` prints and ``data build`` writes to ``stats.json``."""

    trajectories: int = 0
    steps: int = 0
    """Steps with at least one attempt (the ones classified)."""
    attempts: int = 0
    unscored_steps: int = 0
    """Steps left out because an attempt has no overall score (score them with ``--judge``)."""
    rules: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))
    pools: dict[str, int] = field(default_factory=lambda: {"sft": 0, "rl": 0, "unused": 0})
    examples: dict[str, int] = field(default_factory=dict)
    labels: dict[str, dict[str, int]] = field(default_factory=dict)
    policies: dict[str, int] = field(default_factory=dict)
    """Trajectories per ``loop.references`` policy of their run (a release record: ``release``)."""
    with_references: dict[str, int] = field(default_factory=dict)
    """Critic examples (SFT, RL) whose critic saw reference images, of those kept."""
