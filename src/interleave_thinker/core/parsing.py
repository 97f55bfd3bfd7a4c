"""Turn planner and critic replies into typed results, or a :class:`ParseError` carrying the raw reply.

The released models answer ``<think>...</think><answer>{...}</answer>`` where the dict is
Python-literal-like (single quotes, ``None``, trailing commas, sometimes truncated). We repair it
into JSON with ``json-repair`` and validate field by field; nothing is ever evaluated.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import json_repair

from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.types import Plan, PlanStep, Verdict

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_OPEN = re.compile(r"<answer>(.*)\Z", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>.*?(?=<answer>|\Z)", re.DOTALL | re.IGNORECASE)

MALFORMED_STEP_SIGNATURE = "None}, {'step_number'"
"""A known failure: the model folds two plan steps into one string field."""

REQUIRED_STEP_FIELDS = ("step_number", "instruction", "prompt", "auxiliary_text")


def extract_think(reply: str) -> str | None:
    match = _THINK.search(reply)
    return match.group(1).strip() if match else None


def extract_answer(reply: str) -> str:
    """The text inside ``<answer>...</answer>``; after an unclosed ``<answer>``; else the reply without its think block."""
    match = _ANSWER.search(reply)
    if match:
        return match.group(1).strip()
    match = _ANSWER_OPEN.search(reply)
    if match:
        return match.group(1).strip()
    without_think = _THINK.sub("", reply)
    return _THINK_OPEN.sub("", without_think).strip()


def _strict_literal(text: str) -> Any:
    """Well-formed answers (the common case) parse as a Python or JSON literal without repair; never evaluated."""
    body = text.strip()
    if len(body) > 200_000:
        return None
    for parse in (ast.literal_eval, json.loads):
        try:
            value = parse(body)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict | list):
            return value
    return None


def repair_literal(text: str, *, raw: str) -> Any:
    """Parse a JSON-or-Python-literal-like text into plain Python objects, repairing what it can."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ParseError("the reply holds no JSON object or list", raw=raw)
    value = _strict_literal(text[start:])
    if value is None:
        try:
            value = json_repair.loads(text[start:])
        except Exception as exc:  # json-repair raises assorted errors on hopeless input
            raise ParseError(f"the answer could not be repaired into JSON ({exc})", raw=raw) from exc
    if value in ("", None, [], {}):
        raise ParseError("the answer is empty after repair", raw=raw)
    return value


def _optional_str(step: dict[str, Any], key: str, index: int, raw: str) -> str | None:
    value = step[key]
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(
            f"step {index}: '{key}' must be a string or null, got {type(value).__name__}", raw=raw
        )
    if MALFORMED_STEP_SIGNATURE in value:
        raise ParseError(f"step {index}: '{key}' holds two steps folded into one string", raw=raw)
    return value


def _step_number(value: Any, index: int, raw: str) -> int:
    if isinstance(value, bool):
        raise ParseError(f"step {index}: 'step_number' must be an integer, got a bool", raw=raw)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ParseError(f"step {index}: 'step_number' must be an integer, got {value!r}", raw=raw)


def parse_plan(reply: str) -> Plan:
    """Parse a planner reply into a :class:`Plan`, rejecting it as the release does."""
    value = repair_literal(extract_answer(reply), raw=reply)
    if isinstance(value, dict):
        if "execution_plan" not in value:
            raise ParseError("the answer has no 'execution_plan' key", raw=reply)
        steps_value = value["execution_plan"]
    elif isinstance(value, list):
        steps_value = value
    else:
        raise ParseError(f"the answer is a {type(value).__name__}, not a plan", raw=reply)
    if not isinstance(steps_value, list) or not steps_value:
        raise ParseError("'execution_plan' must be a non-empty list of steps", raw=reply)
    steps: list[PlanStep] = []
    for index, step in enumerate(steps_value, start=1):
        if not isinstance(step, dict):
            raise ParseError(f"step {index} is a {type(step).__name__}, not a dict", raw=reply)
        missing = [key for key in REQUIRED_STEP_FIELDS if key not in step]
        if missing:
            raise ParseError(f"step {index} lacks {', '.join(missing)}", raw=reply)
        name = step.get("step_name")
        steps.append(
            PlanStep(
                step_number=_step_number(step["step_number"], index, reply),
                step_name=name if isinstance(name, str) else None,
                instruction=_optional_str(step, "instruction", index, reply),
                prompt=_optional_str(step, "prompt", index, reply),
                auxiliary_text=_optional_str(step, "auxiliary_text", index, reply),
            )
        )
    return Plan(steps=steps, reasoning=extract_think(reply))


def parse_verdict(reply: str) -> Verdict:
    """Parse a critic reply; valid only with a bool ``previous_step_success`` and a str ``refine_prompt``."""
    value = repair_literal(extract_answer(reply), raw=reply)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        raise ParseError(f"the answer is a {type(value).__name__}, not a dict", raw=reply)
    success = value.get("previous_step_success")
    if not isinstance(success, bool):
        raise ParseError(f"'previous_step_success' must be True or False, got {success!r}", raw=reply)
    refine = value.get("refine_prompt")
    if not isinstance(refine, str):
        raise ParseError(f"'refine_prompt' must be a string, got {refine!r}", raw=reply)
    return Verdict(success=success, refine_prompt=refine, reasoning=extract_think(reply))


JUDGE_DELIMITER = "||V^=^V||"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _scores_from(value: Any, raw: str) -> list[float]:
    if isinstance(value, dict):
        if "score" not in value:
            raise ParseError("the judgement has no 'score' key", raw=raw)
        value = value["score"]
    if isinstance(value, bool):
        raise ParseError("the score is a bool, not a number", raw=raw)
    if isinstance(value, int | float):
        value = [value]
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = [float(value)]
    if not isinstance(value, list) or not value:
        raise ParseError(f"the score must be a non-empty list of numbers, got {value!r}", raw=raw)
    scores: list[float] = []
    for item in value:
        if isinstance(item, str) and _NUMBER.fullmatch(item.strip()):
            item = float(item)
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise ParseError(f"score {item!r} is not a number", raw=raw)
        if not 0 <= item <= 10:
            raise ParseError(f"score {item} is outside 0-10", raw=raw)
        scores.append(float(item))
    return scores


def parse_judgement(reply: str) -> tuple[list[float], str | None]:
    """Scores (0-10) and reasoning from a judge reply: a JSON block with or without the ``||V^=^V||``
    delimiters, a bare score list, or a bare number. Never guesses: unparsable -> :class:`ParseError`."""
    text = reply.strip()
    if JUDGE_DELIMITER in text:
        pieces = text.split(JUDGE_DELIMITER)
        text = pieces[1] if len(pieces) >= 3 else pieces[-1]
    text = re.sub(r"^```(?:json)?|```$", "", text.strip(), flags=re.MULTILINE).strip()
    if _NUMBER.fullmatch(text):
        return _scores_from(float(text), reply), None
    value = repair_literal(text, raw=reply)
    reasoning = value.get("reasoning") if isinstance(value, dict) else None
    return _scores_from(value, reply), reasoning if isinstance(reasoning, str) else None
