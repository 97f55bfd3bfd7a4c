"""The sequence review: a VLM sees a finished sequence's images in order and names the steps that break
its consistency (``loop.repair_budget``), so they can be made again.

Template ``prompts/loop/review_sequence.txt`` (ours); messages ``[image of the first step, ..., image of
the last, text]``, the text listing each image's step number and what the step asked for; the reply
``{'inconsistent_steps': [{'step': int, 'reason': str}, ...]}`` (or that list bare) in the models' reply
format, read by the bounded reader of :mod:`~interleave_thinker.agents.reply`. Valid only when every
item names a step that was shown; a step named twice is kept once; the list is empty when the sequence
holds together. Reasons are cleaned and cut like the ranking's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from PIL import Image

from interleave_thinker.agents.base import Agent
from interleave_thinker.agents.loop_templates import loop_template
from interleave_thinker.agents.messages import Message, fill, image_part, text_part, user_turn
from interleave_thinker.agents.ranking import bounded_reason
from interleave_thinker.agents.reply import check_text, read_reply, show, write_reply
from interleave_thinker.agents.reply_formats import Choice, Skeleton, kinds, register_format, texts
from interleave_thinker.agents.seeds import Turn
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.types import Flag

TEMPLATE = "review_sequence"
ANSWER_KEY = "inconsistent_steps"


@dataclass(frozen=True)
class ShownStep:
    """One image of the reviewed sequence: its step number, what the step asked for, the image."""

    step: int
    prompt: str
    image: Image.Image


def review_messages(shown: Sequence[ShownStep]) -> list[Message]:
    """The images in step order, then the filled template listing them."""
    lines = "\n".join(
        f'- image {i}: step {s.step}, which asked for "{s.prompt}"' for i, s in enumerate(shown, 1)
    )
    text = fill(loop_template(TEMPLATE), count=str(len(shown)), steps=lines)
    return user_turn(*(image_part(s.image) for s in shown), text_part(text))


def parse_review(reply: str, steps: Sequence[int]) -> list[Flag]:
    """The flagged steps, in the order named, each once; :class:`ParseError` for anything else."""
    read = read_reply(reply)
    value = read.answer
    if isinstance(value, dict):
        if ANSWER_KEY not in value:
            raise ParseError(f"the answer has no '{ANSWER_KEY}' key", raw=read.text)
        value = value[ANSWER_KEY]
    if not isinstance(value, list) or len(value) > 4 * max(1, len(steps)):
        raise ParseError(f"'{ANSWER_KEY}' must be a list of steps, got {show(value)}", raw=read.text)
    flags: dict[int, Flag] = {}
    for item in value:
        if not isinstance(item, dict):
            raise ParseError(f"an item of '{ANSWER_KEY}' is not a dict: {show(item)}", raw=read.text)
        step = item.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step not in steps:
            raise ParseError(
                f"'step' {show(step)} is not one of the steps shown {list(steps)}", raw=read.text
            )
        flags.setdefault(step, Flag(step=step, reason=bounded_reason(item.get("reason", ""), read.text)))
    return list(flags.values())


def format_review(flags: Sequence[Flag], reasoning: str | None = None) -> str:
    """The reply a reviewing model would write: ``parse_review`` gives ``flags`` back."""
    items = [{"step": f.step, "reason": check_text(f.reason, "the reason")} for f in flags]
    return write_reply({ANSWER_KEY: items}, reasoning)


@dataclass
class ReviewResult:
    flags: list[Flag] | None
    raw_replies: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)


class SequenceReviewer(Agent):
    """A VLM (by default the critic's) asked about a whole sequence (its own role in the call seeds)."""

    ROLE = "reviewer"

    def review(self, shown: Sequence[ShownStep], turn: Turn | None = None) -> ReviewResult:
        """The flagged steps, or none (with the replies and errors) when no reply could be read."""
        steps = [s.step for s in shown]
        outcome = self.ask(review_messages(shown), lambda r: parse_review(r, steps), turn)
        return ReviewResult(outcome.value, outcome.raw_replies, outcome.errors, outcome.seeds)


_SHOWN_STEP = re.compile(r"^- image [0-9]{1,4}: step ([0-9]{1,4}), which asked for ", re.MULTILINE)


def review_skeleton(messages: list[Message]) -> Skeleton | None:
    """The reply skeleton of a review request (``agents/reply_formats.py``): one flagged step, which one
    being the value (a stand-in always finds one break, so the repair is shown); None for another request."""
    shape, text = kinds(messages), texts(messages)
    if not text.startswith(loop_template(TEMPLATE).split("{", 1)[0]) or shape != "i" * (len(shape) - 1) + "t":
        return None
    steps = list(dict.fromkeys(_SHOWN_STEP.findall(text)))
    if not steps or len(steps) != len(shape) - 1:
        return None
    return (
        f"<answer>\n{{'{ANSWER_KEY}': [{{'step': ",
        Choice(tuple(steps)),
        ", 'reason': 'named by a stand-in model'}]}\n</answer>",
    )


register_format("sequence review", review_skeleton)
