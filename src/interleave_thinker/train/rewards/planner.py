"""Planner rewards. These are our own design (the release trains the planner by SFT only).

``planner_format_reward``: 1.0 for ``<think>...</think>`` followed by ``<answer>...</answer>`` whose
content parses into a valid plan (the same validation the pipeline applies), else 0.0.

``planner_plan_reward``: the mean of four checks, each 0 or 1:

1. every step is an image operation (has a prompt or instruction), except Task-A text answers in
   guidance requests (requests with ``<image>``);
2. when the request names a number of steps ("in 4 steps", "three images"), the plan has that many;
3. no ``Step N:`` / ``(N)`` prefixes in ``instruction`` or ``prompt``;
4. ``auxiliary_text`` is null unless the request asks for text (explain, describe, caption, ...).

``planner_score_reward``: a row's external ``plan_score`` (the ``planner_rl`` column of FastVideo's
InterleaveThinker branch, 0 to 1) for a well-formed plan, 0.0 for a reply that is not one, None for a row
without a score (TRL then leaves it out of that row's total).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from interleave_thinker.agents.planner import parse_plan
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.types import Plan
from interleave_thinker.train.rewards._columns import completion_text
from interleave_thinker.train.rewards.answers import think_then_answer

_PREFIX = re.compile(r"^\s*(step\s*\d+\s*[:.)-]|\(\d+\)|\d+[.)]\s)", re.IGNORECASE)
_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}
_COUNT = re.compile(
    r"\b(\d+|" + "|".join(_WORDS) + r")\s+(?:steps|images|pictures|stages|panels|frames)\b", re.IGNORECASE
)
_TEXT_WORDS = re.compile(
    r"\b(explain|explanation|describe|description|caption|summar|text|why|how does|tell|write|answer|story|narrat|"
    r"textually|instructions?)\w*",
    re.IGNORECASE,
)


def _plan(completion: Any) -> Plan | None:
    text = completion_text(completion)
    try:
        return parse_plan(text)
    except ParseError:
        return None


def planner_format_reward(prompts: Any, completions: list[Any], **columns: Any) -> list[float]:
    """1.0 for ``<think>`` then ``<answer>`` holding a valid plan, else 0.0.

    >>> planner_format_reward(None, ["<think>t</think><answer>{'execution_plan': [{'step_number': 1, "
    ...     "'instruction': 'i', 'prompt': 'p', 'auxiliary_text': None}]}</answer>"])
    [1.0]
    """
    return [
        1.0 if think_then_answer(completion_text(c)) and _plan(c) is not None else 0.0 for c in completions
    ]


def requested_step_count(request: str) -> int | None:
    match = _COUNT.search(request)
    if match is None:
        return None
    word = match.group(1).lower()
    return int(word) if word.isdigit() else _WORDS[word]


def request_text(prompt: Any) -> str:
    """The user's request from a prompt: a string or a conversation (last user turn's text)."""
    if isinstance(prompt, list):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return completion_text(users[-1]) if users else completion_text(prompt)
    return completion_text(prompt)


def plan_checks(plan: Plan, request: str) -> dict[str, bool]:
    guidance = "<image>" in request.lower()
    wants_text = bool(_TEXT_WORDS.search(request))
    count = requested_step_count(request)
    return {
        "image_steps": all(
            s.generation_prompt is not None or (guidance and s.is_text_answer) for s in plan.steps
        ),
        "step_count": count is None or len(plan.steps) == count,
        "no_prefixes": not any(_PREFIX.match(v) for s in plan.steps for v in (s.instruction, s.prompt) if v),
        "auxiliary_text": wants_text or all(s.auxiliary_text in (None, "None", "") for s in plan.steps),
    }


def planner_plan_reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
    """Mean of :func:`plan_checks` for a parsable plan, 0.0 otherwise. Uses a ``request`` column when present."""
    requests = columns.get("request") or [request_text(p) for p in prompts]
    rewards = []
    for completion, request in zip(completions, requests, strict=True):
        plan = _plan(completion)
        if plan is None:
            rewards.append(0.0)
            continue
        checks = plan_checks(plan, request)
        rewards.append(sum(checks.values()) / len(checks))
    return rewards


def planner_score_reward(prompts: Any, completions: list[Any], **columns: Any) -> list[float | None]:
    """The row's ``plan_score`` when the completion is a well-formed plan (:func:`planner_format_reward`),
    else 0.0; None for rows without a score.

    The branch blends the score linearly, ``w * format + (1 - w) * plan_score`` with ``w`` = 1.0 by
    default. Why we gate it by the format instead: the score belongs to the prompt, so it is the same for
    every completion of a GRPO group, and a term added to all of them cancels out of the group's
    advantages; gated, a well-formed plan earns more on the requests the external scorer rates higher.

    >>> good = ("<think>t</think><answer>{'execution_plan': [{'step_number': 1, 'instruction': 'i', "
    ...         "'prompt': 'p', 'auxiliary_text': None}]}</answer>")
    >>> planner_score_reward(None, [good, "no plan", good], plan_score=[0.8, 0.8, None])
    [0.8, 0.0, None]
    """
    scores = columns.get("plan_score")
    if scores is None:
        return [None] * len(completions)
    scores = list(scores)
    if len(scores) != len(completions):
        raise ValueError(f"column 'plan_score' has {len(scores)} values for {len(completions)} completions")
    formats = planner_format_reward(prompts, completions)
    return [None if score is None else float(score) * fmt for score, fmt in zip(scores, formats, strict=True)]


PLANNER_REWARDS: dict[str, Callable[..., Sequence[float | None]]] = {
    "planner_format": planner_format_reward,
    "planner_plan": planner_plan_reward,
    "planner_score": planner_score_reward,
}
"""The planner's GRPO rewards by the name each is logged under, so the trainer and its logs agree."""
