"""The judge agent: VIEScore-style semantic consistency (SC) and perceptual quality (PQ) of an edit.

SC = min of its score list, PQ = min of its list, overall = sqrt(SC * PQ), all 0-10. A judgement that
cannot be parsed after the retries is an error carried in the result, never a guessed number.

Inputs are prepared as the release's judge prepares them (``GeminiEditScorer.score``): both images in
RGB, the "after" image resized to the "before" image's size with Pillow's default filter for RGB
(bicubic) *before* either judgement, so SC and PQ both see the resized image; the instruction is
stripped, and an empty one is an error without asking the judge.

Templates: SC joins ``judge_context``, ``judge_edit_rule`` and ``judge_edit_sc`` by newlines (with
``<instruction>`` filled) over ``[before, after]``; PQ joins ``judge_context`` and ``judge_pq`` over
``[after]``. A judgement is a JSON block, with or without the ``||V^=^V||`` delimiters, a bare score
list or a bare number (:func:`parse_judgement`).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from PIL import Image

from interleave_thinker.agents.base import Agent
from interleave_thinker.agents.messages import Message, image_part, text_part, user_turn
from interleave_thinker.agents.reply import prepare_reply, read_answer, show
from interleave_thinker.agents.reply_formats import Skeleton, kinds, register_format, scores, texts
from interleave_thinker.agents.retry import BACKEND_ERROR_PREFIX
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.core.sanitize import clean_text

SEMANTIC_TEMPLATES = ("judge_context", "judge_edit_rule", "judge_edit_sc")
QUALITY_TEMPLATES = ("judge_context", "judge_pq")

# -- messages -----------------------------------------------------------------------------------------


def judge_semantic_messages(
    templates: TemplateSet,
    *,
    before: Image.Image,
    after: Image.Image,
    instruction: str,
    text_first: bool = False,
) -> list[Message]:
    """SC: context + rule + SC texts joined by newlines, ``<instruction>`` filled; images ``[before, after]``
    after the text with ``text_first`` (the release's GRPO reward: ``interleave_thinker_reward.py:338-353``),
    else before it.

    The "after" image is resized to the "before" image's size, as the release's judge does.
    """
    text = "\n".join(templates.get(name) for name in SEMANTIC_TEMPLATES).replace("<instruction>", instruction)
    if after.size != before.size:
        after = after.resize(before.size, Image.Resampling.BICUBIC)
    images = [image_part(before), image_part(after)]
    return user_turn(*([text_part(text), *images] if text_first else [*images, text_part(text)]))


def judge_quality_messages(
    templates: TemplateSet, *, after: Image.Image, text_first: bool = False
) -> list[Message]:
    """PQ: context + PQ texts joined by a newline; image ``[after]`` (after the text with ``text_first``)."""
    text = "\n".join(templates.get(name) for name in QUALITY_TEMPLATES)
    parts = [text_part(text), image_part(after)]
    return user_turn(*(parts if text_first else parts[::-1]))


# -- the reply ----------------------------------------------------------------------------------------

MAX_SCORES = 10
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
        raise ParseError(f"score {show(item)} is not a number", raw=raw)
    if not 0 <= item <= 10:
        raise ParseError(f"score {show(item)} is outside 0-10", raw=raw)
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
        raise ParseError(f"the score must be a non-empty list of numbers, got {show(value)}", raw=raw)
    if cut and id(value) in cut:
        raise ParseError("the score list is cut off by the end of the reply", raw=raw)
    if len(value) > MAX_SCORES:
        raise ParseError(f"the score list has {len(value)} numbers, more than {MAX_SCORES}", raw=raw)
    return [_score(item, raw) for item in value]


def parse_judgement(reply: str) -> tuple[list[float], str | None]:
    """Scores (0-10) and reasoning from a judge reply: a JSON block with or without the ``||V^=^V||``
    delimiters, a bare score list, or a bare number. Never guesses: unparsable -> :class:`ParseError`.

    The score list holds 1 to :data:`MAX_SCORES` numbers from 0 to 10 (numbers or numeric strings)
    and must be complete: a list the end of the reply cut off is an error, never a shorter list.
    """
    reply = prepare_reply(reply, keep_controls=True)  # read with its controls (agents/reply.py)
    text = reply.strip()
    reply = clean_text(reply)
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


def text_first_skeleton(messages: list[Message]) -> Skeleton | None:
    """The reply skeleton of a text-first SC or PQ request (the GRPO reward's, ``agents/reply_formats.py``):
    two scores, short enough for the reward's small reply budget; None for another request. Images-first
    requests are left alone: the tiny judge was trained on them."""
    if len(messages) != 1 or kinds(messages) not in ("ti", "tii"):
        return None
    if '"score":[' not in texts(messages).replace(" ", ""):
        return None
    return ('{"score": [', scores(), ", ", scores(), "]}")


register_format("judgement, text first", text_first_skeleton)


# -- the agent ----------------------------------------------------------------------------------------


@dataclass
class Judgement:
    """SC and PQ (each the lowest of its scores), their scores, reasons and raw replies, or the error."""

    sc: float | None = None
    pq: float | None = None
    sc_scores: list[float] = field(default_factory=list)
    pq_scores: list[float] = field(default_factory=list)
    sc_reasoning: str | None = None
    pq_reasoning: str | None = None
    raw_replies: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.sc is not None and self.pq is not None

    @property
    def overall(self) -> float | None:
        return math.sqrt(self.sc * self.pq) if self.sc is not None and self.pq is not None else None

    def as_dict(self) -> dict[str, object]:
        fields = asdict(self)
        return {"sc": fields.pop("sc"), "pq": fields.pop("pq"), "overall": self.overall, **fields}


EMPTY_INSTRUCTION = "empty instruction: the judge is not asked (the release scores it 0 with an error)"


def judge_inputs(before: Image.Image, after: Image.Image) -> tuple[Image.Image, Image.Image]:
    """The two images as the release's judge sees them: RGB, "after" at the size of "before"."""
    before, after = before.convert("RGB"), after.convert("RGB")
    if after.size != before.size:
        after = after.resize(before.size, Image.Resampling.BICUBIC)
    return before, after


class Judge(Agent):
    DEFAULT_MAX_NEW_TOKENS = 1024
    ROLE = "judge"

    text_first: bool = False
    """True: the turn holds the text before the images, as the release's GRPO reward asks its judge
    (``reward.judge_text_first``); the images come first otherwise."""

    def _judgement(self, kind: Literal["sc", "pq"], messages: list[Message]) -> Judgement:
        """One judgement: the lowest of its scores, or an error carried in the result after the retries."""
        outcome = self.ask(messages, parse_judgement)
        result = Judgement(raw_replies={kind: outcome.raw_replies})
        if outcome.value is None:
            last = outcome.errors[-1] if outcome.errors else "no reply"
            if last.startswith(BACKEND_ERROR_PREFIX) and not outcome.raw_replies:
                result.error = (
                    f"{kind.upper()} judgement got no reply ({last})"  # a connection failure, said so
                )
            else:
                replies = len(outcome.raw_replies)
                result.error = f"{kind.upper()} judgement unparsable after {replies} replies: {last}"
            return result
        scores, reasoning = outcome.value
        setattr(result, kind, min(scores))
        setattr(result, f"{kind}_scores", scores)
        setattr(result, f"{kind}_reasoning", reasoning)
        return result

    def semantic(self, before: Image.Image, after: Image.Image, instruction: str) -> Judgement:
        """SC of ``after`` against ``before`` for ``instruction`` (stripped; empty is an error, no call)."""
        instruction = instruction.strip()
        if not instruction:
            return Judgement(raw_replies={"sc": []}, error=EMPTY_INSTRUCTION)
        messages = judge_semantic_messages(
            self.templates, before=before, after=after, instruction=instruction, text_first=self.text_first
        )
        return self._judgement("sc", messages)

    def quality(self, after: Image.Image) -> Judgement:
        """PQ of ``after`` as given: callers that judge an edit pass it through :func:`judge_inputs` first."""
        messages = judge_quality_messages(self.templates, after=after, text_first=self.text_first)
        return self._judgement("pq", messages)

    def judge(self, before: Image.Image, after: Image.Image, instruction: str) -> Judgement:
        """Both judgements on the release's inputs; the result carries an error when either failed."""
        before, after = judge_inputs(before, after)
        sc = self.semantic(before, after, instruction)
        if sc.error == EMPTY_INSTRUCTION:
            return sc
        pq = self.quality(after)
        return replace(
            sc,
            pq=pq.pq,
            pq_scores=pq.pq_scores,
            pq_reasoning=pq.pq_reasoning,
            raw_replies={**sc.raw_replies, **pq.raw_replies},
            error="; ".join(e for e in (sc.error, pq.error) if e) or None,
        )
