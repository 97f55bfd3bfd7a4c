"""The judge agent: VIEScore-style semantic consistency (SC) and perceptual quality (PQ) of an edit.

SC = min of its score list, PQ = min of its list, overall = sqrt(SC * PQ), all 0-10. A judgement that
cannot be parsed after the retries is an error carried in the result, never a guessed number.

Inputs are prepared as the release's judge prepares them (``GeminiEditScorer.score``): both images in
RGB, the "after" image resized to the "before" image's size with Pillow's default filter for RGB
(bicubic) *before* either judgement, so SC and PQ both see the resized image; the instruction is
stripped, and an empty one is an error without asking the judge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from PIL import Image

from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.backends.protocols import VLMBackend
from interleave_thinker.core.messages import judge_quality_messages, judge_semantic_messages
from interleave_thinker.core.parsing import parse_judgement
from interleave_thinker.core.prompt_store import TemplateSet


@dataclass
class Judgement:
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
        return {
            "sc": self.sc,
            "pq": self.pq,
            "overall": self.overall,
            "sc_scores": self.sc_scores,
            "pq_scores": self.pq_scores,
            "sc_reasoning": self.sc_reasoning,
            "pq_reasoning": self.pq_reasoning,
            "raw_replies": self.raw_replies,
            "error": self.error,
        }


EMPTY_INSTRUCTION = "empty instruction: the judge is not asked (the release scores it 0 with an error)"


def judge_inputs(before: Image.Image, after: Image.Image) -> tuple[Image.Image, Image.Image]:
    """The two images as the release's judge sees them: RGB, "after" at the size of "before"."""
    before, after = before.convert("RGB"), after.convert("RGB")
    if after.size != before.size:
        after = after.resize(before.size, Image.Resampling.BICUBIC)
    return before, after


class Judge:
    def __init__(
        self,
        backend: VLMBackend,
        templates: TemplateSet,
        *,
        retry: RetryPolicy | None = None,
        max_new_tokens: int = 1024,
    ) -> None:
        self.backend = backend
        self.templates = templates
        self.retry = retry or RetryPolicy()
        self.max_new_tokens = max_new_tokens

    def _ask(
        self, messages: list[dict[str, object]]
    ) -> tuple[tuple[list[float], str | None] | None, list[str], list[str]]:
        outcome = self.retry.run(
            lambda temperature: self.backend.chat(
                messages, max_new_tokens=self.max_new_tokens, temperature=temperature
            ),
            parse_judgement,
        )
        return outcome.value, outcome.raw_replies, outcome.errors

    def semantic(self, before: Image.Image, after: Image.Image, instruction: str) -> Judgement:
        """SC of ``after`` against ``before`` for ``instruction`` (stripped; empty is an error, no call)."""
        instruction = instruction.strip()
        if not instruction:
            return Judgement(raw_replies={"sc": []}, error=EMPTY_INSTRUCTION)
        value, raws, errors = self._ask(
            judge_semantic_messages(self.templates, before=before, after=after, instruction=instruction)
        )
        result = Judgement(raw_replies={"sc": raws})
        if value is None:
            result.error = (
                f"SC judgement unparsable after {len(raws)} replies: {errors[-1] if errors else 'no reply'}"
            )
        else:
            result.sc_scores, result.sc_reasoning = value
            result.sc = min(result.sc_scores)
        return result

    def quality(self, after: Image.Image) -> Judgement:
        """PQ of ``after`` as given: callers that judge an edit pass it through :func:`judge_inputs` first."""
        value, raws, errors = self._ask(judge_quality_messages(self.templates, after=after))
        result = Judgement(raw_replies={"pq": raws})
        if value is None:
            result.error = (
                f"PQ judgement unparsable after {len(raws)} replies: {errors[-1] if errors else 'no reply'}"
            )
        else:
            result.pq_scores, result.pq_reasoning = value
            result.pq = min(result.pq_scores)
        return result

    def judge(self, before: Image.Image, after: Image.Image, instruction: str) -> Judgement:
        """Both judgements on the release's inputs; the result carries an error when either failed."""
        before, after = judge_inputs(before, after)
        sc = self.semantic(before, after, instruction)
        if sc.error == EMPTY_INSTRUCTION:
            return sc
        pq = self.quality(after)
        return Judgement(
            sc=sc.sc,
            pq=pq.pq,
            sc_scores=sc.sc_scores,
            pq_scores=pq.pq_scores,
            sc_reasoning=sc.sc_reasoning,
            pq_reasoning=pq.pq_reasoning,
            raw_replies={**sc.raw_replies, **pq.raw_replies},
            error="; ".join(e for e in (sc.error, pq.error) if e) or None,
        )
