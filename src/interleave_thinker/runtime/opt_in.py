"""What the opt-in loop features did, read from the trace: the words of the console's step line and of the
pages, and the counts of ``summary.json`` and ``report.html``.

The features are ``loop.candidates`` (a step's attempts in rounds: one kept, the others discarded),
``loop.select_best`` (a ranking or the judge's scores keep the best attempt when the critic accepted none,
or the best of a round's candidates when it accepted several)
and ``loop.repair_budget`` (a review of the finished sequence, then repairs of the steps it flags). Each is
shown on its success path and on its failure path (a failed ranking or review is also a fallback event,
``runtime/fallbacks.py``); a request that used none of them says nothing here.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from interleave_thinker.agents.ranking import parse_ranking
from interleave_thinker.core.errors import ParseError
from interleave_thinker.core.types import Attempt, RepairRecord, StepRecord, StepRepair, Trace
from interleave_thinker.runtime.failures import one_line
from interleave_thinker.runtime.selection import compared

TEXT_CHARS = 200
"""Longest model text (a ranking's or a review's reason) one line shows; the trace keeps all of it."""


def candidates_of(trace: Trace) -> int:
    """``loop.candidates`` of the run that made ``trace`` (1 when it was not set)."""
    loop = trace.settings.get("loop")
    value = loop.get("candidates", 1) if isinstance(loop, dict) else 1
    return value if isinstance(value, int) else 1


def kept_and_discarded(record: StepRecord) -> tuple[int, int]:
    """A step's attempts with an image: the one it kept (0 or 1) and the ones it discarded."""
    made = [a for a in record.attempts if a.image_file]
    kept = sum(1 for a in made if a.accepted)
    return kept, len(made) - kept


def selection_note(record: StepRecord) -> str | None:
    """What ``loop.select_best`` did at this step (None when it did not choose)."""
    chosen = record.selected
    if chosen is None:
        return None
    by = "the critic's ranking" if chosen.by == "critic" else "the judge's scores"
    # Named by its file: the console counts attempts from 1, the page and the files from 0.
    name = next((a.image_file for a in record.attempts if a.attempt == chosen.attempt and a.image_file), None)
    name = name or f"attempt index {chosen.attempt}"
    if chosen.error is not None:
        kept = record.accepted_attempt
        which = "the first accepted" if kept is not None and not kept.forced else "the last"
        return f"selection by {by} failed, {name} ({which}) kept: {one_line(chosen.error, TEXT_CHARS)}"
    return f"{name} selected by {by}: {one_line(chosen.reason, TEXT_CHARS)}"


def ranked_attempts(record: StepRecord) -> list[Attempt]:
    """The step's attempts in the order the critic's ranking put them, best first (empty when no ranking
    was used: none asked, the judge's scores chose, or the ranking failed)."""
    chosen = record.selected
    if chosen is None or chosen.by != "critic" or chosen.error is not None or not chosen.raw_replies:
        return []
    shown = compared(record)
    try:
        order = parse_ranking(chosen.raw_replies[-1], len(shown)).order
    except ParseError:  # the ranking the loop used parsed; a hand-edited trace may not
        return []
    return [shown[n - 1] for n in order]


def step_note(record: StepRecord, candidates: int = 1) -> str | None:
    """The opt-in part of a step's console line: candidates kept and discarded, the selection; None when
    the step used neither."""
    parts = []
    if candidates > 1 and record.kind == "image":
        kept, discarded = kept_and_discarded(record)
        parts.append(f"{kept + discarded} candidates: {kept} kept, {discarded} discarded")
    note = selection_note(record)
    if note is not None:
        parts.append(note)
    return "; ".join(parts) or None


def review_note(record: RepairRecord) -> str:
    """The sequence review in one line: the steps it flagged and why, or why it failed."""
    if record.flagged is None:
        return f"review failed, nothing repaired: {one_line(record.error or 'no usable verdict', TEXT_CHARS)}"
    if not record.flagged:
        return "review: no step breaks the sequence, nothing repaired"
    flagged = "; ".join(f"step {f.step}: {one_line(f.reason, TEXT_CHARS)}" for f in record.flagged)
    return f"review flagged {len(record.flagged)} step(s): {flagged}"


def repair_note(repair: StepRepair) -> str:
    """One step's repair: its repaired image in place of the original, or the original kept."""
    calls = len(repair.attempts)
    if repair.repaired_image:
        return (
            f"step {repair.step_number} repaired: {repair.repaired_image} shown in place of "
            f"{repair.original_image} ({calls} repair call(s))"
        )
    return f"step {repair.step_number} not repaired: {calls} repair call(s) rejected, {repair.original_image} kept"


def repair_lines(trace: Trace) -> list[str]:
    """The review and each step repair, one line each (nothing when no review ran)."""
    if trace.repair is None:
        return []
    return [review_note(trace.repair), *(repair_note(r) for r in trace.repair.steps)]


def opt_in_counts(traces: Iterable[Trace]) -> dict[str, Any]:
    """``summary.json``'s ``opt_in``: per feature, what succeeded and what failed (empty sections left out).

    - ``candidates``: image steps run in rounds (``loop.candidates`` > 1), attempts kept and discarded;
    - ``selections``: steps where ``loop.select_best`` chose, by a ranking or scores, and the failed ones;
    - ``reviews``: sequence reviews asked, usable, failed, and the steps they flagged;
    - ``repairs``: flagged steps regenerated, repaired (shown in place of the original), kept as they were,
      and the repair calls made.
    """
    counts: Counter[str] = Counter()
    for trace in traces:
        rounds = candidates_of(trace) > 1
        for step in trace.steps:
            if rounds and step.kind == "image" and step.attempts:
                kept, discarded = kept_and_discarded(step)
                counts["candidates.steps"] += 1
                counts["candidates.kept"] += kept
                counts["candidates.discarded"] += discarded
            if step.selected is not None:
                counts["selections.steps"] += 1
                counts[f"selections.by_{step.selected.by}"] += 1
                counts["selections.failed"] += step.selected.error is not None
        review = trace.repair
        if review is None:
            continue
        counts["reviews.asked"] += 1
        counts["reviews.failed"] += review.flagged is None
        counts["reviews.flagged_steps"] += len(review.flagged or [])
        for repair in review.steps:
            counts["repairs.steps"] += 1
            counts["repairs.repaired"] += repair.repaired_image is not None
            counts["repairs.kept_original"] += repair.repaired_image is None
            counts["repairs.calls"] += len(repair.attempts)
    table: dict[str, dict[str, int]] = {}
    for key, value in sorted(counts.items()):
        section, name = key.split(".")
        table.setdefault(section, {})[name] = value
    for name, figures in table.items():
        if name == "selections":
            figures.setdefault("failed", 0)
            figures["succeeded"] = figures["steps"] - figures["failed"]
        if name == "reviews":
            figures.setdefault("failed", 0)
            figures["succeeded"] = figures["asked"] - figures["failed"]
    return table


OPT_IN_LINES = {
    "candidates": "candidates: {kept} kept, {discarded} discarded in {steps} step(s)",
    "selections": "selections: {succeeded} made, {failed} failed",
    "reviews": "reviews: {succeeded} usable ({flagged_steps} step(s) flagged), {failed} failed",
    "repairs": "repairs: {repaired} of {steps} step(s) repaired in {calls} call(s)",
}
"""How each section of :func:`opt_in_counts` reads on the terminal, in this order (a count absent is 0)."""


def opt_in_line(counts: dict[str, Any]) -> str | None:
    """The counts as one terminal line (the last lines of a command); None when no feature ran."""
    shown = [name for name in OPT_IN_LINES if name in counts]
    parts = [OPT_IN_LINES[name].format_map(defaultdict(int, counts[name])) for name in shown]
    return "opt-in features: " + "; ".join(parts) if parts else None
