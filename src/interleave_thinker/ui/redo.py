"""The page's "Redo a step": what a visitor sends, bounded and cleaned where it enters, and the step checked
against the run it redoes. The redo itself is ``Pipeline.redo`` (``runtime/redo.py``), as for the CLI.

Three fields, each refused with one line naming it: the step (a whole number from 1), the new instruction
(at most :data:`MAX_INSTRUCTION_CHARS` characters; control characters removed; blank keeps the step's
own) and the seed base from that step on (0 to :data:`MAX_SEED`; blank keeps the run's). Against the
session's last run the step must be one of its plan's, and every step before it must have finished
(a failed step may be redone, never kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import load_trace, trace_path
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.redo import kept_steps

MAX_INSTRUCTION_CHARS = 1000
"""Characters of a redone step's new instruction: one step's, not a whole request's."""
MAX_SEED = 2**31 - 1
"""The largest seed base a visitor may give (every generator takes seeds up to it)."""
STEP_FIELD = "Redo from step"
INSTRUCTION_FIELD = "New instruction"
SEED_FIELD = "Seed base from that step"
NO_RUN = "There is no finished run to redo in this session (or it was cleaned up); press Run first."


@dataclass(frozen=True)
class Redo:
    """A visitor's redo, bounded and cleaned: the step (1-based), its new instruction and seed base."""

    step: int
    instruction: str | None = None
    seed: int | None = None


def _whole(value: object, field: str, low: int, high: int | None = None) -> int:
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    if (
        not math.isfinite(number)
        or number != int(number)
        or number < low
        or (high is not None and number > high)
    ):
        upper = f" to {high:,}" if high is not None else " or more"
        raise InputError(f"{field}: {value!r} is not a whole number {low}{upper}.")
    return int(number)


def read_redo(step: object, instruction: object, seed: object) -> Redo:
    """The three fields as a :class:`Redo`, or an :class:`InputError` naming the field at fault."""
    if step is None:
        raise InputError(f"{STEP_FIELD}: give the number of the step to redo (1 is the first).")
    text = instruction if isinstance(instruction, str) else ""
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise InputError(
            f"{INSTRUCTION_FIELD}: {len(text):,} characters; this demo takes at most "
            f"{MAX_INSTRUCTION_CHARS:,} for one step. Shorten it."
        )
    text = clean_text(text).strip()
    return Redo(
        step=_whole(step, STEP_FIELD, 1),
        instruction=text or None,
        seed=None if seed is None else _whole(seed, SEED_FIELD, 0, MAX_SEED),
    )


def parent_trace(parent: Path | None, step: int) -> Trace:
    """The trace of the run in ``parent``, once ``step`` is known to be a step it can be redone from."""
    if parent is None or not trace_path(parent).is_file():
        raise InputError(NO_RUN)
    try:
        trace = load_trace(trace_path(parent))
    except (OSError, ValueError):  # being cleaned up as we read it
        raise InputError(NO_RUN) from None
    steps = len(trace.planner.plan.steps) if trace.planner.plan is not None else 0
    last = min(steps, kept_steps(trace) + 1)
    if last < 1:
        raise InputError(
            f"{STEP_FIELD}: the last run has no plan, so no step to redo; press Run to run it again."
        )
    if not 1 <= step <= last:
        stopped = f" (it stopped at step {last})" if last < steps else ""
        raise InputError(f"{STEP_FIELD}: the last run has no step {step} to redo{stopped}; pick 1 to {last}.")
    return trace
