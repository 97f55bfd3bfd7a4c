"""What went wrong in one request, said in one storable line, and the backend errors it met.

A batch keeps going when one request breaks, so the reason it broke must survive being written to
JSON, printed on one terminal line and shown in a report: no lone surrogates, no NUL, no newline,
bounded length. Backend errors that a request survived (the loop went on with another attempt or
without a verdict) change its result silently unless they are counted; :func:`backend_errors` counts
them from the trace, so the trace and ``summary.json`` say so.
"""

from __future__ import annotations

import re
from collections import Counter

from interleave_thinker.agents.retry import BACKEND_ERROR_PREFIX
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.types import Trace

__all__ = ["backend_errors", "clean_text", "failure_reason", "note_backend_errors", "one_line"]

MAX_REASON = 300
_BREAKS = re.compile(r"[\r\n\t\x0b\x0c\x85\u2028\u2029]+")
BACKEND_WARNING = "Backend errors during this request:"


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """``text`` cleaned, on one line, at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(_BREAKS.sub(" ", clean_text(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def failure_reason(exc: BaseException) -> str:
    """``ExcType: message`` on one bounded line; the message is cut before it is formatted (it may be huge)."""
    try:
        message = str(exc)[: MAX_REASON * 4]
    except Exception:  # a message that cannot even be formatted still leaves the type
        message = "(message cannot be shown)"
    return one_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def backend_errors(trace: Trace) -> Counter[str]:
    """Backend errors a request met, per role (planner, critic, generator, judge, ranking, review), read
    from its trace."""
    counts: Counter[str] = Counter()
    counts["planner"] += sum(1 for e in trace.planner.errors if e.startswith(BACKEND_ERROR_PREFIX))
    for step in trace.steps:
        for attempt in step.attempts:
            counts["generator"] += attempt.generation_error is not None
            counts["critic"] += (attempt.critic_error or "").count(BACKEND_ERROR_PREFIX)
            counts["judge"] += ((attempt.scores and attempt.scores.error) or "").count(BACKEND_ERROR_PREFIX)
        counts["ranking"] += ((step.selected and step.selected.error) or "").count(BACKEND_ERROR_PREFIX)
    if trace.repair is not None:
        counts["review"] += sum(1 for e in trace.repair.errors if e.startswith(BACKEND_ERROR_PREFIX))
    return +counts


def note_backend_errors(trace: Trace) -> None:
    """Say in the trace's warnings how many backend errors the request met (replacing an older count)."""
    trace.warnings = [w for w in trace.warnings if not w.startswith(BACKEND_WARNING)]
    counts = backend_errors(trace)
    if counts:
        parts = ", ".join(f"{role} {n}" for role, n in sorted(counts.items()))
        trace.warnings.append(
            f"{BACKEND_WARNING} {parts}. The request went on without those calls, so its result may "
            "differ from an error-free run; check the backends and re-run it to compare."
        )
