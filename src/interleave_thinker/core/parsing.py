"""Turn planner, critic and judge replies into typed results, or a :class:`ParseError` carrying the raw reply.

The released models answer ``<think>...</think><answer>{...}</answer>`` where the dict is
Python-literal-like (single quotes, ``None``, trailing commas, sometimes truncated). The answer is read
by :mod:`interleave_thinker.core.literal` (strict JSON first, then the models' dialect with only their
known slips repaired) and validated field by field; nothing is ever evaluated.

Every reply is bounded and cleaned at this boundary: over :data:`MAX_REPLY_CHARS` it is rejected,
lone surrogates and control characters are cleaned (:func:`~interleave_thinker.core.sanitize.clean_text`)
in the reply and in every string taken from it, so an accepted value can always be written as JSON.
Tags are found with plain ``bytes.find`` scans, so a reply is split in linear time. Only
:class:`ParseError` leaves these functions.

What is accepted, beyond the release's own checks (every listed field present, no folded steps, a
bool verdict and a str refine prompt):

- a plan has 1 to :data:`MAX_PLAN_STEPS` steps; ``step_number`` is an integer from 0 to
  :data:`MAX_STEP_NUMBER`, written as an integer, an integral float or a string of ASCII digits;
- a judgement's score list holds 1 to :data:`MAX_SCORES` numbers from 0 to 10 (numbers or numeric
  strings) and must be complete: a list the end of the reply cut off is an error, never a shorter
  list;
- anything the literal reader refuses (contradictions, duplicate keys, unquoted words) is an error.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.literal import ReadResult, read_literal
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import Plan, PlanStep, Verdict

MAX_REPLY_CHARS = 1_048_576
"""Longest reply read (characters); the agents ask for at most a few thousand tokens."""
MAX_PLAN_STEPS = 100
MAX_STEP_NUMBER = 10_000
MAX_SCORES = 10

_THINK_BLOCK = re.compile(b"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_STEP_DIGITS = re.compile(r"\s*[0-9]{1,9}\s*")

MALFORMED_STEP_SIGNATURE = "None}, {'step_number'"
"""A known failure: the model folds two plan steps into one string field."""

REQUIRED_STEP_FIELDS = ("step_number", "instruction", "prompt", "auxiliary_text")

_SHOW = reprlib.Repr()
_SHOW.maxstring = _SHOW.maxother = 60
_SHOW.maxlist = _SHOW.maxdict = 4
_SHOW.maxlevel = 2


def _show(value: Any) -> str:
    """A short repr for error messages (a reply's value can be a megabyte long)."""
    return _SHOW.repr(value)


def prepare_reply(reply: str) -> str:
    """The reply, cleaned; :class:`ParseError` when it is not text or longer than :data:`MAX_REPLY_CHARS`."""
    if not isinstance(reply, str):
        raise ParseError(f"the reply is a {type(reply).__name__}, not text", raw="")
    if len(reply) > MAX_REPLY_CHARS:
        raise ParseError(
            f"the reply has {len(reply)} characters, over the limit of {MAX_REPLY_CHARS}",
            raw=clean_text(reply[:MAX_REPLY_CHARS]),
        )
    return clean_text(reply)


_Folded = tuple[bytes, bytes]


def _folded(reply: str) -> _Folded:
    """The reply as UTF-8 and its ASCII-lowercased copy (same offsets): tags are found with ``bytes.find``.

    ``bytes.lower`` folds only ASCII letters, so offsets agree between the two; every search is a C
    scan and the pieces are decoded once, so any reply is split in linear time.
    """
    data = reply.encode("utf-8", "surrogatepass")
    return data, data.lower()


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def extract_think(reply: str, folded: _Folded | None = None) -> str | None:
    """The text of the first closed ``<think>`` block, or None."""
    data, low = folded or _folded(reply)
    opening = low.find(b"<think>")
    closing = low.find(b"</think>", opening + len(b"<think>")) if opening >= 0 else -1
    if closing < 0:
        return None
    return _decode(data[opening + len(b"<think>") : closing]).strip()


def _without_think(data: bytes, low: bytes) -> bytes:
    """The reply without its closed think blocks, and cut at a think block that never closes.

    Everything up to the last ``</think>`` is cleaned by one substitution (each block there has a
    closing tag after it, so the lazy match is linear); an opening tag after it runs to the end.
    """
    last = low.rfind(b"</think>")
    split = last + len(b"</think>") if last >= 0 else 0
    head = _THINK_BLOCK.sub(b"", data[:split]) if split else b""
    opening = low.find(b"<think>", split)
    return head + data[split : opening if opening >= 0 else len(data)]


def extract_answer(reply: str, folded: _Folded | None = None) -> str:
    """The text inside ``<answer>...</answer>``; after an unclosed ``<answer>``; else the reply without its think block."""
    data, low = folded or _folded(reply)
    opening = low.find(b"<answer>")
    if opening < 0:
        return _decode(_without_think(data, low)).strip()
    closing = low.find(b"</answer>", opening + len(b"<answer>"))
    return _decode(data[opening + len(b"<answer>") : closing if closing >= 0 else len(data)]).strip()


def read_answer(text: str, *, raw: str) -> ReadResult:
    """The dict or list starting at the first ``{`` or ``[`` of ``text``, read by the literal reader."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ParseError("the reply holds no JSON object or list", raw=raw)
    result = read_literal(text[start:], raw=raw)
    if not result.value:
        raise ParseError("the answer is empty", raw=raw)
    return result


def repair_literal(text: str, *, raw: str) -> Any:
    """Parse a JSON-or-Python-literal-like text into plain Python objects, repairing only known slips."""
    return read_answer(text, raw=raw).value


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
    return clean_text(value)


def _step_number(value: Any, index: int, raw: str) -> int:
    number: int | None = None
    if isinstance(value, bool):
        raise ParseError(f"step {index}: 'step_number' must be an integer, got a bool", raw=raw)
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer() and abs(value) <= MAX_STEP_NUMBER:
        number = int(value)
    elif isinstance(value, str) and _STEP_DIGITS.fullmatch(value):
        number = int(value.strip())
    if number is None:
        raise ParseError(f"step {index}: 'step_number' must be an integer, got {_show(value)}", raw=raw)
    if not 0 <= number <= MAX_STEP_NUMBER:
        shown = str(number) if number.bit_length() < 64 else "a very large integer"
        raise ParseError(f"step {index}: 'step_number' {shown} is outside 0-{MAX_STEP_NUMBER}", raw=raw)
    return number


def _plan_steps(value: Any, raw: str) -> list[Any]:
    if isinstance(value, dict):
        if "execution_plan" not in value:
            raise ParseError("the answer has no 'execution_plan' key", raw=raw)
        value = value["execution_plan"]
    elif not isinstance(value, list):
        raise ParseError(f"the answer is a {type(value).__name__}, not a plan", raw=raw)
    if not isinstance(value, list) or not value:
        raise ParseError("'execution_plan' must be a non-empty list of steps", raw=raw)
    if len(value) > MAX_PLAN_STEPS:
        raise ParseError(f"the plan has {len(value)} steps, more than {MAX_PLAN_STEPS}", raw=raw)
    return value


def parse_plan(reply: str) -> Plan:
    """Parse a planner reply into a :class:`Plan`, rejecting it as the release does."""
    reply = prepare_reply(reply)
    folded = _folded(reply)
    steps: list[PlanStep] = []
    answer = repair_literal(extract_answer(reply, folded), raw=reply)
    for index, step in enumerate(_plan_steps(answer, reply), start=1):
        if not isinstance(step, dict):
            raise ParseError(f"step {index} is a {type(step).__name__}, not a dict", raw=reply)
        missing = [key for key in REQUIRED_STEP_FIELDS if key not in step]
        if missing:
            raise ParseError(f"step {index} lacks {', '.join(missing)}", raw=reply)
        name = step.get("step_name")
        steps.append(
            PlanStep(
                step_number=_step_number(step["step_number"], index, reply),
                step_name=clean_text(name) if isinstance(name, str) else None,
                instruction=_optional_str(step, "instruction", index, reply),
                prompt=_optional_str(step, "prompt", index, reply),
                auxiliary_text=_optional_str(step, "auxiliary_text", index, reply),
            )
        )
    return Plan(steps=steps, reasoning=extract_think(reply, folded))


def parse_verdict(reply: str) -> Verdict:
    """Parse a critic reply; valid only with a bool ``previous_step_success`` and a str ``refine_prompt``."""
    reply = prepare_reply(reply)
    folded = _folded(reply)
    value = repair_literal(extract_answer(reply, folded), raw=reply)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        raise ParseError(f"the answer is a {type(value).__name__}, not a dict", raw=reply)
    success = value.get("previous_step_success")
    if not isinstance(success, bool):
        raise ParseError(f"'previous_step_success' must be True or False, got {_show(success)}", raw=reply)
    refine = value.get("refine_prompt")
    if not isinstance(refine, str):
        raise ParseError(f"'refine_prompt' must be a string, got {_show(refine)}", raw=reply)
    return Verdict(success=success, refine_prompt=clean_text(refine), reasoning=extract_think(reply, folded))


JUDGE_DELIMITER = "||V^=^V||"
_NUMBER = re.compile(r"-?[0-9]{1,20}(?:\.[0-9]{1,20})?")


def _without_fence(text: str) -> str:
    """The text without a Markdown code fence around it (text before the answer is skipped anyway)."""
    if text.startswith("```"):
        text = text[4:] if text[3:4] == "\n" else text[7:] if text[3:7].lower() == "json" else text[3:]
    return text[:-3].strip() if text.endswith("```") else text.strip()


def _score(item: Any, raw: str) -> float:
    if isinstance(item, str) and _NUMBER.fullmatch(item.strip()):
        item = float(item)
    if isinstance(item, bool) or not isinstance(item, int | float):
        raise ParseError(f"score {_show(item)} is not a number", raw=raw)
    if not 0 <= item <= 10:
        raise ParseError(f"score {_show(item)} is outside 0-10", raw=raw)
    return float(item)


def _scores_from(value: Any, raw: str, cut: set[int] | None = None) -> list[float]:
    if isinstance(value, dict):
        if "score" not in value:
            raise ParseError("the judgement has no 'score' key", raw=raw)
        value = value["score"]
    if isinstance(value, bool):
        raise ParseError("the score is a bool, not a number", raw=raw)
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value.strip())):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ParseError(f"the score must be a non-empty list of numbers, got {_show(value)}", raw=raw)
    if cut and id(value) in cut:
        raise ParseError("the score list is cut off by the end of the reply", raw=raw)
    if len(value) > MAX_SCORES:
        raise ParseError(f"the score list has {len(value)} numbers, more than {MAX_SCORES}", raw=raw)
    return [_score(item, raw) for item in value]


def parse_judgement(reply: str) -> tuple[list[float], str | None]:
    """Scores (0-10) and reasoning from a judge reply: a JSON block with or without the ``||V^=^V||``
    delimiters, a bare score list, or a bare number. Never guesses: unparsable -> :class:`ParseError`."""
    reply = prepare_reply(reply)
    text = reply.strip()
    if JUDGE_DELIMITER in text:
        pieces = text.split(JUDGE_DELIMITER)
        text = pieces[1] if len(pieces) >= 3 else pieces[-1]
    text = _without_fence(text.strip())
    if _NUMBER.fullmatch(text):
        return _scores_from(float(text), reply), None
    result = read_answer(text, raw=reply)
    value = result.value
    reasoning = value.get("reasoning") if isinstance(value, dict) else None
    scores = _scores_from(value, reply, result.cut)
    return scores, clean_text(reasoning) if isinstance(reasoning, str) else None
