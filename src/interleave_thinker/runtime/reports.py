"""Batch outputs rebuilt from saved traces: ``summary.json``, ``results.json`` (UEval) and ``report.html``."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import IMAGES_DIR, REPORT, REQUESTS, RESULTS, SUMMARY
from interleave_thinker.core.stats import latency_percentiles
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.documents import page_templates
from interleave_thinker.runtime.failures import backend_errors
from interleave_thinker.runtime.fallbacks import fallback_counts, fallback_line
from interleave_thinker.runtime.opt_in import opt_in_counts, opt_in_line

_WHERE = re.compile(r"^.*?(?::\d+|: (?:item|row) \d+): ")
"""The input location that starts a failed request's error (``in.jsonl:3: ``), left out when grouping."""


def request_folder(request_id: str, folders: dict[str, str] | None = None) -> str:
    """Where a request's files are, relative to the report (``requests/<id>`` unless merged from elsewhere)."""
    return (folders or {}).get(request_id) or f"{REQUESTS}/{request_id}"


def release_text_answer(trace: Trace) -> str:
    """The release's text answer: per plan step, ``auxiliary_text`` when truthy and not 'None', else
    ``instruction``; concatenated with no separator (``UEval/ueval_klein.py:267-271`` in the release).

    Why here: ``batch``'s ``results.json`` and ``eval generate``'s submission must join alike, and
    ``eval`` sits above ``runtime``."""
    plan = trace.planner.plan
    if plan is None:
        return ""
    parts = []
    for step in plan.steps:
        aux = step.auxiliary_text
        parts.append(aux if aux and aux != "None" else (step.instruction or ""))
    return "".join(parts)


def answer_row(
    request_id: str,
    prompt: str,
    task: str | None,
    trace: Trace,
    image_path: Callable[[str], str],
    *,
    text_answer: bool = True,
) -> dict[str, Any]:
    """One UEval submission row (``batch``'s ``results.json`` and ``eval generate``'s submission alike):
    id, prompt, task, the paths (``image_path(file)``) of the images the sequence shows
    (``Trace.shown_images``: repaired ones included) and the text answer joined as the release joins it
    (:func:`release_text_answer`; empty when ``text_answer`` is off, as in base mode)."""
    return {
        "id": request_id,
        "prompt": prompt,
        "task": task,
        "image_answer": [image_path(name) for _, name in trace.shown_images()],
        "text_answer": release_text_answer(trace) if text_answer else "",
    }


def answer_rows(traces: dict[str, Trace], folders: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``results.json``: a :func:`answer_row` per request, image paths relative to the batch folder."""
    return [
        answer_row(
            request_id,
            trace.request.text,
            trace.request.task,
            trace,
            partial("{}/{}/{}".format, request_folder(request_id, folders), IMAGES_DIR),
        )
        for request_id, trace in traces.items()
    ]


def _percentiles(values: list[float]) -> dict[str, float | None]:
    return {**latency_percentiles(values), "count": len(values)}


def summarize(
    traces: dict[str, Trace], backends: dict[str, Any] | None = None, wall_s: float | None = None
) -> dict[str, Any]:
    statuses = Counter(t.status for t in traces.values())
    attempts = [len(s.attempts) for t in traces.values() for s in t.steps if s.kind == "image"]
    critic_retries = sum(
        max(0, len(a.critic_raw) - 1) for t in traces.values() for s in t.steps for a in s.attempts
    )
    planner_retries = sum(max(0, len(t.planner.raw_replies) - 1) for t in traces.values())
    failures = Counter(
        _WHERE.sub("", t.error or "unknown")[:160] for t in traces.values() if t.status == "failed"
    )
    total = len(traces)
    return {
        "requests": {
            "total": total,
            "succeeded": statuses.get("succeeded", 0),
            "failed": statuses.get("failed", 0),
            "unfinished": statuses.get("running", 0),
        },
        "success_rate": round(statuses.get("succeeded", 0) / total, 4) if total else 0.0,
        "steps": len(attempts) + sum(1 for t in traces.values() for s in t.steps if s.kind == "text"),
        "attempts_per_image_step": {
            "mean": round(sum(attempts) / len(attempts), 4) if attempts else 0.0,
            "histogram": {str(k): v for k, v in sorted(Counter(attempts).items())},
        },
        "retries": {
            "critic_unparsable_replies": critic_retries,
            "planner_unparsable_replies": planner_retries,
        },
        "planner_fallbacks": sum(
            1 for t in traces.values() if t.planner.plan is not None and t.planner.plan.fallback
        ),
        "latency_from_traces": {
            "planner": _percentiles([t.planner.duration_s for t in traces.values() if t.planner.raw_replies]),
            "generator": _percentiles(
                [a.durations.generate_s for t in traces.values() for s in t.steps for a in s.attempts]
            ),
            "critic": _percentiles(
                [
                    a.durations.critic_s
                    for t in traces.values()
                    for s in t.steps
                    for a in s.attempts
                    if a.critic_called
                ]
            ),
        },
        "backend_errors": _backend_errors(traces),
        "fallbacks": fallback_counts(traces.values()),
        "opt_in": opt_in_counts(traces.values()),
        "backends": backends or {},
        "wall_s": round(wall_s, 3) if wall_s is not None else None,
        "failure_reasons": dict(failures.most_common(20)),
    }


def _backend_errors(traces: dict[str, Trace]) -> dict[str, Any]:
    """Backend errors the requests went on without: their results may differ from an error-free run."""
    per_request = {i: backend_errors(t) for i, t in traces.items()}
    hit = [i for i, counts in per_request.items() if counts]
    total: Counter[str] = Counter()
    for counts in per_request.values():
        total.update(counts)
    return {
        "requests": len(hit),
        "succeeded_requests": sum(1 for i in hit if traces[i].status == "succeeded"),
        "calls": dict(sorted(total.items())),
        "ids": hit[:100],
    }


def accumulate(previous: dict[str, Any] | None, backends: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """This invocation's figures added to those of the earlier runs of the batch (a resume adds, never replaces).

    Returns ``runs`` (every invocation's own wall time and backend figures, the first run's kept),
    the total ``wall_s`` and ``backends`` with the call counts summed and the latest run's other figures.
    """
    runs = list((previous or {}).get("runs") or [])
    if not runs and previous and previous.get("wall_s") is not None:
        runs = [{"wall_s": previous["wall_s"], "backends": previous.get("backends") or {}}]
    runs.append({"wall_s": round(wall_s, 3), "backends": backends})
    total: dict[str, Any] = {}
    for run in runs:
        for role, figures in (run.get("backends") or {}).items():
            merged = total.setdefault(role, {})
            calls = merged.get("calls", 0) + figures.get("calls", 0)
            failed = merged.get("failed", 0) + figures.get("failed", 0)
            batched = merged.get("batched_calls", 0) + figures.get("batched_calls", 0)
            merged.update(figures, calls=calls, failed=failed, batched_calls=batched)
    return {"runs": runs, "wall_s": sum(r.get("wall_s") or 0.0 for r in runs), "backends": total}


def render_report(
    traces: dict[str, Trace], summary: dict[str, Any], folders: dict[str, str] | None = None
) -> str:
    """``report.html``: a card per request (its steps' accepted images, linked to its page)."""
    return (
        page_templates("html")
        .get_template("report.html.j2")
        .render(
            counts=summary["requests"],
            success_rate=summary["success_rate"],
            opt_in=opt_in_line(summary.get("opt_in") or {}),
            fallbacks=fallback_line(summary.get("fallbacks") or {}),
            tasks=sorted({t.request.task for t in traces.values() if t.request.task}),
            cards=[
                {
                    "id": i,
                    "trace": t,
                    "folder": request_folder(i, folders),
                    "opt_in": opt_in_line(opt_in_counts([t])),
                }
                for i, t in traces.items()
            ],
            images_dir=IMAGES_DIR,
        )
    )


CARRIED_KEYS = ("usage", "estimated_cost")
"""Summary figures only the runs that made them know (`data generate`'s counts per backend and their
cost): rebuilding the outputs from the traces (`report`) carries them over from the earlier summary."""


def write_reports(
    root: Path,
    traces: dict[str, Trace],
    backends: dict[str, Any] | None = None,
    wall_s: float | None = None,
    runs: list[dict[str, Any]] | None = None,
    folders: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``extra``: figures the traces cannot give, kept as they are (see :data:`CARRIED_KEYS`)."""
    summary = summarize(traces, backends, wall_s)
    if runs is not None:
        summary["runs"] = runs
    summary.update(extra or {})
    write_atomic(root / SUMMARY, json.dumps(summary, indent=2))
    write_atomic(root / RESULTS, json.dumps(answer_rows(traces, folders), indent=2, ensure_ascii=False))
    write_atomic(root / REPORT, render_report(traces, summary, folders))
    return summary
