"""What a request went on without, read from its trace: one typed event per fallback, and their counts.

The release's rules stay (the last attempt is kept when the critic gives no verdict, a failed ranking
keeps the last attempt, a failed review repairs nothing, a failed judgement leaves an attempt unscored);
what this module adds is that a run made of them says so. The events are read from the trace when the
request closes (``Pipeline._close_trace``), as :func:`~interleave_thinker.runtime.failures.backend_errors`
is, so the loop records what happened as it always did, a resumed request counts each event once,
and `report` rebuilds the same counts from old traces.

The unit is one **judgement asked** of a role (a verdict on an attempt, a pair of scores, a ranking, a
review, a plan): its retries inside one turn are one judgement, and a call that got no reply at all is
``unreachable``, never "unparsable after 0 replies". :func:`fallback_counts` sums them over many
traces for ``summary.json``; :func:`share_exceeded` is the bound the scheduled commands stop at
(``agents.max_fallback_share``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from interleave_thinker.agents.retry import BACKEND_ERROR_PREFIX
from interleave_thinker.core.types import Fallback, FallbackKind, FallbackRole, Trace
from interleave_thinker.runtime.failures import one_line

FALLBACK_WARNING = "Fallback:"
"""Starts the warning line of every event in ``trace.warnings`` (replaced when the trace closes again)."""
MIN_JUDGEMENTS = 10
"""Judgements of a role asked in a run before it may stop on their failed share (its end always checks)."""
BOUNDED_ROLES = ("critic", "judge", "ranking", "review")
"""The roles whose failed share can stop a run. Not the planner: its single-step fallback is a setting
the user chose (``loop.planner_fallback``), and a planner that does not answer fails its request."""
KIND_TEXT: dict[str, str] = {
    "forced": "kept without a verdict",
    "unparsable": "unparsable reply",
    "unreachable": "no reply (backend unreachable)",
    "selection_failed": "selection failed, last attempt kept",
    "review_failed": "review failed, nothing repaired",
    "judgement_failed": "judgement failed, attempt unscored",
}


def _first_line(error: str | None) -> str:
    return one_line((error or "").strip().split("\n", 1)[0], 200)


def _failure(role: FallbackRole, kind: FallbackKind, step: int | None, error: str | None) -> Fallback:
    """A failed judgement: ``unreachable`` when no call got a reply, else the role's own ``kind``."""
    text = error or ""
    unreachable = BACKEND_ERROR_PREFIX in text
    return Fallback(
        role=role, kind="unreachable" if unreachable else kind, step=step, error=_first_line(text)
    )


def fallback_events(trace: Trace) -> list[Fallback]:
    """Every fallback of ``trace``, in the order the request met them."""
    events: list[Fallback] = []
    plan = trace.planner.plan
    if plan is not None and plan.fallback:
        events.append(
            _failure("planner", "unparsable", None, (trace.planner.errors or ["no valid plan"])[-1])
        )
    for index, step in enumerate(trace.steps, start=1):
        for attempt in step.attempts:
            if attempt.critic_called and attempt.verdict is None:
                events.append(_failure("critic", "unparsable", index, attempt.critic_error))
            scores = attempt.scores
            if scores is not None and scores.error is not None:
                events.append(_failure("judge", "judgement_failed", index, scores.error))
        kept = step.accepted_attempt
        asked = [a for a in step.attempts if a.critic_called]
        if kept is not None and kept.forced and asked and all(a.verdict is None for a in asked):
            # kept with no verdict at all: the critic was asked and never answered usably (the release's
            # forcing pass after verdicts that said no, and base mode's one attempt, are no fallback)
            reason = asked[-1].critic_error or "no verdict"
            events.append(Fallback(role="critic", kind="forced", step=index, error=_first_line(reason)))
        if step.selected is not None and step.selected.error is not None:
            events.append(_failure("ranking", "selection_failed", index, step.selected.error))
    if trace.repair is not None and trace.repair.error is not None:
        detail = trace.repair.errors[-1] if trace.repair.errors else trace.repair.error
        events.append(_failure("review", "review_failed", None, detail))
    return events


def _judgements(trace: Trace) -> Counter[tuple[str, str]]:
    """(role, "asked" | "failed") -> count: every judgement the request asked of a role, and the failed ones."""
    counts: Counter[tuple[str, str]] = Counter()
    if trace.planner.raw_replies or trace.planner.errors:
        counts["planner", "asked"] += 1
        counts["planner", "failed"] += trace.planner.plan is None or trace.planner.plan.fallback
    for step in trace.steps:
        for attempt in step.attempts:
            if attempt.critic_called:
                counts["critic", "asked"] += 1
                counts["critic", "failed"] += attempt.verdict is None
            if attempt.scores is not None:
                counts["judge", "asked"] += 1
                counts["judge", "failed"] += attempt.scores.error is not None
        if step.selected is not None:
            counts["ranking", "asked"] += 1
            counts["ranking", "failed"] += step.selected.error is not None
    if trace.repair is not None and (trace.repair.raw_replies or trace.repair.errors):
        counts["review", "asked"] += 1
        counts["review", "failed"] += trace.repair.error is not None
    return counts


def note_fallbacks(trace: Trace) -> None:
    """Record the request's fallbacks in ``trace.fallbacks`` and one warning line each (replacing older ones)."""
    trace.fallbacks = fallback_events(trace)
    trace.warnings = [w for w in trace.warnings if not w.startswith(FALLBACK_WARNING)]
    for event in trace.fallbacks:
        where = f" at step {event.step}" if event.step is not None else ""
        detail = f": {event.error}" if event.error else ""
        trace.warnings.append(f"{FALLBACK_WARNING} {event.role} {KIND_TEXT[event.kind]}{where}{detail}")


def fallback_counts(traces: Iterable[Trace]) -> dict[str, Any]:
    """``summary.json``'s ``fallbacks``: events per role and kind, the requests with any, and per role the
    judgements asked, answered and failed (a failed call is never counted as an answer)."""
    events: Counter[tuple[str, str]] = Counter()
    judgements: Counter[tuple[str, str]] = Counter()
    hit = 0
    for trace in traces:
        found = trace.fallbacks or fallback_events(trace)
        events.update((e.role, e.kind) for e in found)
        judgements.update(_judgements(trace))
        hit += bool(found)
    per_role: dict[str, dict[str, int]] = {}
    for (role, kind), n in sorted(events.items()):
        per_role.setdefault(role, {})[kind] = n
    table = _as_table(judgements)["judgements"]
    for figures in table.values():
        figures["answered"] = figures["asked"] - figures["failed"]
    return {"requests": hit, "events": per_role, "judgements": table}


def share_exceeded(counts: dict[str, Any], limit: float, *, minimum: int = MIN_JUDGEMENTS) -> str | None:
    """Why the run must stop: the first role whose failed share of at least ``minimum`` judgements is
    above ``limit``; None when none is."""
    for role, figures in counts.get("judgements", {}).items():
        if role not in BOUNDED_ROLES:
            continue
        asked, failed = figures["asked"], figures["failed"]
        if asked >= max(1, minimum) and failed / asked > limit:
            return (
                f"{failed} of {asked} {role} judgements failed ({failed / asked:.0%}), above the tolerated "
                f"{limit:.0%} (agents.max_fallback_share, --max-fallback-share). Finished requests are kept; "
                f"fix the {role} backend (see trace.json 'fallbacks') and run the same command again to continue."
            )
    return None


def fallback_line(counts: dict[str, Any]) -> str | None:
    """The counts as one terminal line (the last lines of a command); None when nothing fell back."""
    parts = [
        f"{role} {n} {kind.replace('_', ' ')}"
        for role, kinds in counts.get("events", {}).items()
        for kind, n in kinds.items()
    ]
    if not parts:
        return None
    return f"fallbacks in {counts['requests']} request(s): " + ", ".join(parts)


class FallbackBound:
    """The failed judgements of the requests one batch run finished, and whether they passed ``limit``:
    the scheduler adds each finished request's trace and starts no new request once :attr:`stopped`."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.stopped: str | None = None
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, trace: Trace) -> None:
        self.merge(_judgements(trace))

    def merge(self, judgements: Mapping[tuple[str, str], int]) -> None:
        """Add judgements counted elsewhere (a cluster's driver adds what each worker counted)."""
        with self._lock:
            self._counts.update(judgements)
            if self.stopped is None:
                self.stopped = share_exceeded(_as_table(self._counts), self.limit)

    def counted(self) -> Counter[tuple[str, str]]:
        """Every judgement added so far: (role, "asked" | "failed") -> count."""
        with self._lock:
            return Counter(self._counts)

    def final(self) -> str | None:
        """Why the run ended past ``limit``: stopped during it, or over all its requests at its end (any
        number of judgements). Earlier runs' requests are not judged again: a resume after the fix passes."""
        with self._lock:
            return self.stopped or share_exceeded(_as_table(self._counts), self.limit, minimum=1)


def _as_table(judgements: Counter[tuple[str, str]]) -> dict[str, Any]:
    return {
        "judgements": {
            role: {"asked": judgements[role, "asked"], "failed": judgements[role, "failed"]}
            for role in sorted({role for role, _ in judgements})
            if judgements[role, "asked"]
        }
    }


FALLBACKS_ONLY = "Only fallbacks:"
"""Starts the error of a request that finished on fallbacks alone (:func:`fallbacks_only`), so `data
export` can count it apart."""


def fallbacks_only(trace: Trace) -> str | None:
    """Why a finished request holds nothing to learn from: its critic gave no verdict on any attempt (every
    step dropped from the training record), or its judge scored none; None when it holds something.
    `data generate` fails such a request (its record and `data export` say so)."""
    attempts = [a for s in trace.steps for a in s.attempts if a.image_file is not None]
    if not attempts:
        return None
    asked = [a for a in attempts if a.critic_called]
    if asked and all(a.verdict is None for a in asked):
        return (
            f"{FALLBACKS_ONLY} the critic gave no verdict on any of {len(asked)} attempts, so every step is "
            f"dropped from the training record (first error: {_first_line(asked[0].critic_error)})."
        )
    judged = [a for a in attempts if a.scores is not None]
    if judged and all(a.scores is not None and a.scores.error is not None for a in judged):
        first = judged[0].scores.error if judged[0].scores is not None else None
        return (
            f"{FALLBACKS_ONLY} the judge scored none of {len(judged)} attempts "
            f"(first error: {_first_line(first)})."
        )
    return None
