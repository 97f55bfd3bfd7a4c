"""How the rewards read a rollout, as the release reads it, in linear time.

The release's critic reward (EasyR1 ``interleave_thinker_reward.py``) deletes whitespace around every
``<``, ``>`` and ``/``, takes the text between the first ``<answer>`` and the first ``</answer>`` after
it, and reads it with ``json_repair``. So it accepts the dialects the models write: Python literals
(``True``, single quotes), lowercase JSON booleans in a Python dict (``{'previous_step_success':
true}``), trailing commas, single and double quotes mixed, a dict whose closing brace is missing. Here
the answer is read by the agents' own reader (:func:`~interleave_thinker.agents.reply.read_answer`,
:mod:`interleave_thinker.core.literal`): one parser for the agents and the rewards, bounded, never a
guess beyond those slips, every reply read in linear time. It reads three more slips as ``json_repair``
(0.64.4) does, leniently: a key given twice keeps its last value, comments (``#``, ``//``, ``/* */``)
between items are skipped, and words after a constant (``True and False``) are dropped. Where
``json_repair`` goes further (a missing comma between items) this reader refuses, and the reply scores
format 0: see docs/training.md.

Why linear matters: the release's own normalisation (``re.sub(r"\\s*(<|>|/)\\s*", ...)``) and tag
search (``<answer>(.*?)</answer>``) are quadratic on long runs of spaces or of ``<answer>`` tags;
a policy under RL writes such replies. :func:`normalize_response` gives the same text with two
prefix-indexed passes; tags are found with ``str.find``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from interleave_thinker.agents.reply import read_answer
from interleave_thinker.core.errors import ParseError

_OPEN, _CLOSE = "<answer>", "</answer>"
_SPACE_AFTER_TAG_CHAR = re.compile(r"(?<=[<>/])\s+")
_THINK_ANY_CASE = re.compile("<think>", re.IGNORECASE)
_OPEN_ANY_CASE = re.compile("<answer>", re.IGNORECASE)
_CLOSE_ANY_CASE = re.compile("</answer>", re.IGNORECASE)
_THINK_THEN_ANSWER = re.compile(r"</think>\s*<answer>")
_MISSING = object()

MAX_COMPLETION_CHARS = 131_072
"""Longest rollout the critic reward reads (characters): 32 a token at the release's 4,096-token
response limit, far beyond any real reply (a few characters a token); longer ones score as replies
without an answer, so a degenerate rollout costs no more than a real one."""


def normalize_response(text: str) -> str:
    """Delete whitespace around every ``<``, ``>`` and ``/`` (the release's normalisation, refine prompt included).

    The same text as the release's ``re.sub(r"\\s*(<|>|/)\\s*", r"\\1", text)``: a run of whitespace
    goes when a ``<``, ``>`` or ``/`` touches it on either side. Runs after such a character go in one
    pass, runs before one in a second pass over the reversed text; a run is only ever entered right
    after the character, so neither pass is quadratic on long runs of spaces as the release's pattern is.
    """
    if "<" not in text and ">" not in text and "/" not in text:
        return text
    once = _SPACE_AFTER_TAG_CHAR.sub("", text)
    return _SPACE_AFTER_TAG_CHAR.sub("", once[::-1])[::-1]


def answer_text(normalized: str) -> str | None:
    """The stripped text between the first ``<answer>`` and the first ``</answer>`` after it (case as written), or None."""
    start = normalized.find(_OPEN)
    if start < 0:
        return None
    end = normalized.find(_CLOSE, start + len(_OPEN))
    return None if end < 0 else normalized[start + len(_OPEN) : end].strip()


def read_answer_dict(normalized: str) -> dict[str, Any] | None:
    """The answer of a normalised reply as a non-empty dict, read in the models' dialects; None otherwise."""
    body = answer_text(normalized)
    if body is None:
        return None
    try:
        value = read_answer(body, raw=body, lenient=True).value
    except ParseError:
        return None
    return value if isinstance(value, dict) else None


def _tags_in_order(normalized: str) -> bool:
    """An ``<answer>...</answer>`` (any case) exists and no ``<think>`` (any case) starts after its opening tag."""
    opening = _OPEN_ANY_CASE.search(normalized)
    if opening is None or _CLOSE_ANY_CASE.search(normalized, opening.end()) is None:
        return False
    think = _THINK_ANY_CASE.search(normalized)
    return think is None or think.start() < opening.start()


@dataclass(frozen=True)
class CriticReading:
    """A critic rollout read once, as the release reads it: format, prediction and refine prompt."""

    format_ok: bool
    """The release's ``tag_format_reward``: tags in order and a bool ``previous_step_success`` and str ``refine_prompt``."""
    predicted: Any
    """The answer's ``previous_step_success`` as written (any type), or a marker when it is missing."""
    refine_prompt: Any
    """The answer's ``refine_prompt`` as written (any type), or None when missing."""

    def accuracy(self, truth: bool) -> float:
        """1.0 when the prediction equals ``truth`` as the release compares (``==``, so ``0 == False``), else 0.0."""
        value = self.predicted
        if value is _MISSING or not isinstance(value, bool | int | float):
            return 0.0  # a string, list or dict never equals a bool; a missing value is the release's -1
        return 1.0 if value != -1 and value == truth else 0.0


def read_critic(text: str) -> CriticReading:
    """Read a critic rollout; one over :data:`MAX_COMPLETION_CHARS` reads as a reply without an answer."""
    normalized = normalize_response(text) if len(text) <= MAX_COMPLETION_CHARS else ""
    answer = read_answer_dict(normalized) or {}
    success, refine = answer.get("previous_step_success", _MISSING), answer.get("refine_prompt")
    valid = isinstance(success, bool) and isinstance(refine, str)
    return CriticReading(valid and _tags_in_order(normalized), success, refine)


def think_then_answer(text: str) -> bool:
    """``<think>...</think>``, optional whitespace, ``<answer>...</answer>`` and nothing else around them.

    The planner format's shape check, the same as ``^\\s*<think>.*?</think>\\s*<answer>.*?</answer>\\s*$``
    (DOTALL) but linear: that pattern retries its lazy parts at every ``</think>`` and takes seconds on
    a reply full of them.
    """
    body = text.strip()
    if not body.startswith("<think>") or not body.endswith(_CLOSE):
        return False
    found = _THINK_THEN_ANSWER.search(body, len("<think>"))
    return found is not None and found.end() <= len(body) - len(_CLOSE)
