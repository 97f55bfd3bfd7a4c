"""Bounded retries for model replies that cannot be parsed, and the decoding settings of each call.

Local retries never sleep: the model is right here, waiting only wastes time. Decoding follows
``agents.decoding`` (docs/configuration.md): ``temperature=None`` ("checkpoint", the default) asks every
call of a turn, retries included, with the model's own generation settings, as the release asks again
with the same ``generate`` call; the retry differs by its seed. ``temperature=0`` ("greedy") asks the
first call greedily, and retries sample with ``retry_temperature``, since a greedy model asked the same
thing twice says the same thing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from interleave_thinker.core.errors import BackendError, ParseError
from interleave_thinker.core.sanitize import clean_text

T = TypeVar("T")

BACKEND_ERROR_PREFIX = "backend error: "
"""Starts every error a turn records for a call that got no reply (so it is told from a bad reply)."""


@dataclass
class Outcome(Generic[T]):
    """What an agent turn produced: the value (or None), every raw reply and every error, in order, and
    the seed of every call made, when the turn had seeds (a call that got no reply has a seed and no raw
    reply; :meth:`Agent.ask` fills it)."""

    value: T | None
    raw_replies: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    seeds: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RetryPolicy:
    """``temperature`` None: the model's own decoding on every call; a number: that temperature on the
    first call (0 = greedy) and at least ``retry_temperature`` on retries."""

    max_attempts: int = 3
    temperature: float | None = 0.0
    retry_temperature: float = 0.7

    def temperature_for(self, attempt: int) -> float | None:
        if self.temperature is None:
            return None
        return self.temperature if attempt == 0 else max(self.temperature, self.retry_temperature)

    def run(self, call: Callable[[float | None], str], parse: Callable[[str], T]) -> Outcome[T]:
        """Call, parse, and call again on a :class:`ParseError`, up to ``max_attempts`` times.

        A backend error ends the turn (recorded with :data:`BACKEND_ERROR_PREFIX`); any other exception
        of the call is not ours to judge and goes up to the request's failure boundary.
        """
        outcome: Outcome[T] = Outcome(value=None)
        start = time.perf_counter()
        for attempt in range(self.max_attempts):
            try:
                reply = call(self.temperature_for(attempt))
            except BackendError as exc:
                outcome.errors.append(f"{BACKEND_ERROR_PREFIX}{exc}")
                break
            reply = clean_text(reply)  # lone surrogates, NULs: what is stored must stay writable
            outcome.raw_replies.append(reply)
            try:
                outcome.value = parse(reply)
                break
            except ParseError as exc:
                outcome.errors.append(str(exc))
            except (ValueError, TypeError, RecursionError, OverflowError) as exc:
                # A reply that breaks the parser is still a bad reply: record it and ask again.
                outcome.errors.append(f"unparsable reply ({type(exc).__name__}: {str(exc)[:200]})")
        outcome.duration_s = time.perf_counter() - start
        return outcome
