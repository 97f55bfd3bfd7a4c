"""The page's "Redo a step": what a visitor sends, bounded and cleaned where it enters, and the step checked
against the run it redoes. The redo itself is ``Pipeline.redo`` (``runtime/redo.py``), as for the CLI.

Three fields, each refused with one line naming it: the step (a whole number from 1), the new instruction
(at most :data:`MAX_INSTRUCTION_CHARS` characters; control characters removed; blank keeps the step's
own) and the seed base from that step on (0 to :data:`MAX_SEED`; blank keeps the run's). Against the
session's last run the step must be one of its plan's, and every step before it must have finished
(a failed step may be redone, never kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from interleave_thinker.agents.seeds import SEED_MODULUS
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import load_trace, trace_path
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.redo import kept_steps

MAX_INSTRUCTION_CHARS = 1000
"""Characters of a redone step's new instruction: one step's, not a whole request's."""
MAX_SEED = SEED_MODULUS - 1
"""The largest seed base a visitor may give: the bound of the seeds the agents derive."""
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
    if isinstance(value, float) and value.is_integer():  # Gradio may send 2.0 for 2 (inf, nan: refused below)
        value = int(value)
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and low <= value
        and (high is None or value <= high)
    ):
        return value
    upper = f" to {high:,}" if high is not None else " or more"
    raise InputError(f"{field}: {_shown(value)} is not a whole number {low}{upper}.")


def _shown(value: object) -> str:
    """A field's value for a message: a client may send any JSON number, so a huge one is named, not printed."""
    return "that number" if isinstance(value, int) and value.bit_length() > 64 else repr(value)[:40]


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
        raise InputError(
            f"{STEP_FIELD}: the last run has no step {_shown(step)} to redo{stopped}; pick 1 to {last}."
        )
    return trace
