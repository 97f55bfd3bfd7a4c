"""The critic agent: judges one attempt from the images before and after it, and refines the prompt.

Template ``critic``; messages ``[before, after, filled template]`` in this order, as the critic was
trained. With reference images (``loop.references``), our own template ``prompts/references/critic.txt``
instead, which also asks for consistency with them, and messages ``[before, after, *references, text]``.
The reply read into a :class:`Verdict` (:func:`parse_verdict`), valid only with a bool
``previous_step_success`` and a str ``refine_prompt``, and, the inverse, a verdict written as the
critic would answer it (:func:`format_verdict`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

from PIL import Image

from interleave_thinker.agents.base import Agent
from interleave_thinker.agents.messages import Message, fill, image_part, text_part, user_turn
from interleave_thinker.agents.reply import answer_dict, check_text, read_reply, show, write_reply
from interleave_thinker.agents.seeds import Turn
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import Attempt, Verdict

TEMPLATE = "critic"
REFERENCES_TEMPLATE = "references/critic"
"""Our own critic template for a loop with reference images, ``prompts/references/critic.txt``: in a
folder of its own, so the built-in template set stays the released set and the released critic
template stays the one used without references."""


@functools.cache
def references_template() -> str:
    """The text of :data:`REFERENCES_TEMPLATE` (package data)."""
    path = resources.files("interleave_thinker.prompts").joinpath(f"{REFERENCES_TEMPLATE}.txt")
    return path.read_text(encoding="utf-8")


def references_template_digest() -> str:
    """SHA-256 of :func:`references_template`, recorded in a trace that used it."""
    return hashlib.sha256(references_template().encode("utf-8")).hexdigest()


def critic_messages(
    templates: TemplateSet,
    *,
    before: Image.Image,
    after: Image.Image,
    original_instruction: str,
    rewritten_prompt: str,
    references: Sequence[Image.Image] = (),
) -> list[Message]:
    """``[before, after, text]`` in this order, as the critic was trained; with ``references``,
    ``[before, after, *references, text]`` and our template that asks for consistency with them."""
    text = critic_text(templates, original_instruction, rewritten_prompt, len(references))
    return user_turn(*(image_part(im) for im in (before, after, *references)), text_part(text))


def critic_text(
    templates: TemplateSet, original_instruction: str, rewritten_prompt: str, references: int = 0
) -> str:
    """The text of the critic's message (:func:`critic_messages`) with ``references`` reference images:
    the critic template without any, our references template with some. ``data build`` writes the
    critic's training rows with it, so a row holds exactly the text the critic reads at inference."""
    values = {"original_instruction": original_instruction, "rewritten_prompt": rewritten_prompt}
    if not references:
        return fill(templates.get(TEMPLATE), **values)
    return fill(references_template(), **values, reference_count=str(references))


def parse_verdict(reply: str) -> Verdict:
    """Parse a critic reply; valid only with a bool ``previous_step_success`` and a str ``refine_prompt``."""
    read = read_reply(reply)
    value = answer_dict(read)
    success = value.get("previous_step_success")
    if not isinstance(success, bool):
        raise ParseError(f"'previous_step_success' must be True or False, got {show(success)}", raw=read.text)
    refine = value.get("refine_prompt")
    if not isinstance(refine, str):
        raise ParseError(f"'refine_prompt' must be a string, got {show(refine)}", raw=read.text)
    return Verdict(success=success, refine_prompt=clean_text(refine), reasoning=read.reasoning)


def format_verdict(verdict: Verdict) -> str:
    """The reply a critic would write for ``verdict``: ``parse_verdict(format_verdict(v)) == v``.

    ``ValueError`` for text that parsing would change (a control character, a lone surrogate, a
    thought with surrounding space or tags of its own).
    """
    answer = {
        "previous_step_success": verdict.success,
        "refine_prompt": check_text(verdict.refine_prompt, "the refine prompt"),
    }
    return write_reply(answer, verdict.reasoning)


@dataclass
class CriticResult:
    verdict: Verdict | None
    raw_replies: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    seeds: list[int] = field(default_factory=list)

    def record(self, attempt: Attempt) -> None:
        """Write this review onto ``attempt`` (the loop's attempts and the repair calls alike); no verdict
        leaves it not accepted, with the errors."""
        attempt.critic_called = True
        attempt.critic_raw = self.raw_replies
        attempt.critic_seeds = self.seeds
        attempt.verdict = self.verdict
        attempt.durations.critic_s = round(self.duration_s, 4)
        if self.verdict is None:
            attempt.critic_error = "; ".join(self.errors) or "the critic gave no reply"
        else:
            attempt.accepted = self.verdict.success


class Critic(Agent):
    ROLE = "critic"

    def review(
        self,
        *,
        before: Image.Image,
        after: Image.Image,
        original_instruction: str,
        rewritten_prompt: str,
        turn: Turn | None = None,
        references: Sequence[Image.Image] = (),
    ) -> CriticResult:
        """A verdict on this attempt, or none (with the replies and errors) when every reply was unparsable;
        with ``turn``, every call's seed too; with ``references``, judged for consistency with them too."""
        messages = critic_messages(
            self.templates,
            before=before,
            after=after,
            original_instruction=original_instruction,
            rewritten_prompt=rewritten_prompt,
            references=references,
        )
        outcome = self.ask(messages, parse_verdict, turn)
        return CriticResult(
            outcome.value, outcome.raw_replies, outcome.errors, round(outcome.duration_s, 4), outcome.seeds
        )
