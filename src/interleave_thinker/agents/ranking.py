"""The attempt ranking: when the critic accepted none of a step's attempts, it ranks them in one turn
(``loop.select_best: critic``), so the best one is kept instead of the last.

Template ``prompts/loop/rank_attempts.txt`` (ours); messages ``[before, attempt 1, ..., attempt N, text]``;
the reply ``{'ranking': [best, ..., worst], 'reason': str}`` in the models' reply format, read by the
same bounded reader as the critic's (:mod:`~interleave_thinker.agents.reply`). Valid only with a non-empty
list of distinct attempt numbers 1..N; the reason is cleaned and cut to :data:`MAX_REASON_CHARS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations

from PIL import Image

from interleave_thinker.agents.base import Agent
from interleave_thinker.agents.loop_templates import loop_template
from interleave_thinker.agents.messages import Message, fill, image_part, text_part, user_turn
from interleave_thinker.agents.reply import answer_dict, check_text, read_reply, show, write_reply
from interleave_thinker.agents.reply_formats import Choice, Skeleton, kinds, register_format, texts
from interleave_thinker.agents.seeds import Turn
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.sanitize import clean_text

TEMPLATE = "rank_attempts"
MAX_REASON_CHARS = 1000
"""Longest reason kept from a ranking or review reply (characters)."""


def bounded_reason(value: object, raw: str) -> str:
    """A reply's reason: a string, cleaned and cut to :data:`MAX_REASON_CHARS`; else :class:`ParseError`."""
    if not isinstance(value, str):
        raise ParseError(f"'reason' must be a string, got {show(value)}", raw=raw)
    return clean_text(value).strip()[:MAX_REASON_CHARS]


def ranking_messages(before: Image.Image, attempts: list[Image.Image], instruction: str) -> list[Message]:
    """``[before, attempt 1, ..., attempt N, text]``: the attempts numbered in the order shown."""
    count = len(attempts)
    text = fill(
        loop_template(TEMPLATE), count=str(count), count_plus_one=str(count + 1), instruction=instruction
    )
    return user_turn(image_part(before), *(image_part(image) for image in attempts), text_part(text))


@dataclass(frozen=True)
class Ranking:
    order: list[int]
    """Attempt numbers as shown (1..N), best first."""
    reason: str


def parse_ranking(reply: str, count: int) -> Ranking:
    """The ranking of ``count`` shown attempts; :class:`ParseError` for anything else."""
    read = read_reply(reply)
    value = answer_dict(read)
    order = value.get("ranking")
    if not isinstance(order, list) or not order or len(order) > count:
        raise ParseError(
            f"'ranking' must list 1 to {count} attempt numbers, got {show(order)}", raw=read.text
        )
    if any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= count for n in order):
        raise ParseError(f"'ranking' holds a number outside 1-{count}: {show(order)}", raw=read.text)
    if len(set(order)) != len(order):
        raise ParseError(f"'ranking' names an attempt twice: {show(order)}", raw=read.text)
    return Ranking(order=list(order), reason=bounded_reason(value.get("reason", ""), read.text))


def format_ranking(order: list[int], reason: str, reasoning: str | None = None) -> str:
    """The reply a ranking model would write: ``parse_ranking(format_ranking(o, r), n)`` gives o and r."""
    return write_reply({"ranking": order, "reason": check_text(reason, "the reason")}, reasoning)


@dataclass
class RankResult:
    ranking: Ranking | None
    raw_replies: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)


class Ranker(Agent):
    """The critic's model asked to rank a step's attempts (its own role in the call seeds)."""

    ROLE = "ranker"

    def rank(
        self, *, before: Image.Image, attempts: list[Image.Image], instruction: str, turn: Turn | None = None
    ) -> RankResult:
        """The ranking, or none (with the replies and errors) when no reply could be read."""
        count = len(attempts)
        outcome = self.ask(
            ranking_messages(before, attempts, instruction), lambda r: parse_ranking(r, count), turn
        )
        return RankResult(outcome.value, outcome.raw_replies, outcome.errors, outcome.seeds)


WHOLE_ORDER_MAX = 4
"""Attempts up to which a stand-in's ranking is a whole order (4! = 24 choices); beyond, the best alone."""


def ranking_skeleton(messages: list[Message]) -> Skeleton | None:
    """The reply skeleton of a ranking request (``agents/reply_formats.py``): the order of the attempts is
    the value (up to :data:`WHOLE_ORDER_MAX` attempts; the best one's number beyond); None for another
    request."""
    shape, text = kinds(messages), texts(messages)
    prefix = loop_template(TEMPLATE).split("{", 1)[0]
    count = len(shape) - 2
    if not text.startswith(prefix) or count < 1 or shape != "i" * (count + 1) + "t":
        return None
    numbers = range(1, count + 1)
    orders = permutations(numbers) if count <= WHOLE_ORDER_MAX else ((n,) for n in numbers)
    order = Choice(tuple(", ".join(str(n) for n in o) for o in orders))
    return ("<answer>\n{'ranking': [", order, "], 'reason': 'picked by a stand-in model'}\n</answer>")


register_format("ranking", ranking_skeleton)
