"""Parallel candidates (``loop.candidates``): a step's attempts go out in rounds, side by side.

Why: a rejected attempt costs a whole generator + critic round trip before the next one starts; where
the generator has spare capacity (a batch, a pool of servers) the attempts of one round can be made
at once. A round is attempts ``k .. k+N-1`` of the sequential loop, with the seeds it would give them
and the round's one prompt; each is judged by the critic as it arrives, and the outcome does not
depend on arrival order:

- the kept image is the first accepted attempt in attempt (seed) order; the attempts after it were
  generated and judged and stay in the trace as attempts, not accepted (their verdicts as given);
- if none is accepted, the next round's prompt is the refined prompt of the first attempt in seed
  order whose verdict offers one (the round's prompt when none does).

Where the calls run: inside a batch request's greenlet each attempt runs in a greenlet of its own on
the scheduler's loop (:func:`~interleave_thinker.core.green.run_green`), so every backend call still
passes its per-backend limiter (a candidate takes a generator slot like any call). Outside a batch
(``run``, the Python API) the round runs on a private event loop the same way, closed after it: a served
backend's calls overlap on the wire, and a local model's call, which does not yield, runs one at a time
as before. Under an event loop that is not ours (a notebook cell) the round runs one after the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

from interleave_thinker.core.green import await_only, finish_loop, in_green, run_green
from interleave_thinker.core.types import Attempt

T = TypeVar("T")


def run_round(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Every call's result, in the calls' order, the calls made side by side (see the module doc).

    All calls run to their end, even when one raises; then the first error in order is raised, so a
    round fails the same way whichever call ended first."""
    if len(calls) <= 1:
        return [call() for call in calls]
    if in_green():
        outcomes = await_only(_side_by_side(calls, own_loop=False))
    elif _loop_running():
        outcomes = [_outcome(call) for call in calls]
    else:
        outcomes = asyncio.run(_side_by_side(calls, own_loop=True))
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes  # type: ignore[return-value]  # no exception left: every outcome is a T


async def _side_by_side(calls: Sequence[Callable[[], T]], *, own_loop: bool) -> list[T | BaseException]:
    """Each call in its own greenlet on the running loop; with ``own_loop``, the loop's served connections
    are closed after them (the loop ends with this round)."""
    try:
        return await asyncio.gather(*(run_green(call) for call in calls), return_exceptions=True)
    finally:
        if own_loop:
            await finish_loop()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _outcome(call: Callable[[], T]) -> T | BaseException:
    try:
        return call()
    except Exception as exc:  # raised by run_round after the others, as on the loop
        return exc


def keep_first_accepted(attempts: list[Attempt]) -> Attempt | None:
    """The round's first accepted attempt in seed order; the attempts after it are not accepted (nor
    forced): one image is kept per step, and it does not depend on which answer arrived first."""
    kept = next((a for a in attempts if a.accepted), None)
    if kept is not None:
        for later in attempts[attempts.index(kept) + 1 :]:
            later.accepted = later.forced = False
    return kept


def next_prompt(attempts: list[Attempt], prompt: str) -> str:
    """The next round's prompt: the refined prompt of the first verdict in seed order that offers one."""
    for attempt in attempts:
        if attempt.verdict is not None and attempt.verdict.refine_prompt.strip():
            return attempt.verdict.refine_prompt
    return prompt
