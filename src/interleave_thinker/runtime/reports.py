"""Batch outputs rebuilt from saved traces: ``summary.json``, ``results.json`` (UEval) and ``report.html``."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.recorder import IMAGES_DIR
from interleave_thinker.runtime.store import REQUESTS

SUMMARY = "summary.json"
RESULTS = "results.json"
REPORT = "report.html"


def ueval_results(traces: dict[str, Trace]) -> list[dict[str, Any]]:
    """The UEval submission: id, prompt, task, accepted image paths (relative to the batch folder), step texts joined."""
    rows = []
    for request_id, trace in traces.items():
        images = [
            f"{REQUESTS}/{request_id}/{IMAGES_DIR}/{s.accepted_image}"
            for s in trace.steps
            if s.accepted_image
        ]
        texts = [s.text for s in trace.steps if s.text]
        rows.append(
            {
                "id": request_id,
                "prompt": trace.request.text,
                "task": trace.request.task,
                "image_answer": images,
                "text_answer": "\n".join(texts),
            }
        )
    return rows


def _percentiles(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)

    def pct(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4) if ordered else None

    return {"p50_s": pct(0.5), "p90_s": pct(0.9), "p99_s": pct(0.99), "count": len(ordered)}


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
        (t.error or "unknown").split(": ", 1)[-1][:160] for t in traces.values() if t.status == "failed"
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
        "backends": backends or {},
        "wall_s": round(wall_s, 3) if wall_s is not None else None,
        "failure_reasons": dict(failures.most_common(20)),
    }


def _card(request_id: str, trace: Trace) -> str:
    task = html.escape(trace.request.task or "")
    parts = [f'<div class="card" data-status="{trace.status}" data-task="{task}">']
    parts.append(
        f'<h3><a href="{REQUESTS}/{html.escape(request_id)}/index.html">{html.escape(request_id)}</a> · {trace.status}</h3>'
    )
    parts.append(f"<p>{html.escape(trace.request.text[:300])}</p>")
    if trace.error:
        parts.append(f'<p class="error">{html.escape(trace.error)}</p>')
    parts.append('<div class="steps">')
    for index, step in enumerate(trace.steps, start=1):
        parts.append("<figure>")
        if step.accepted_image:
            src = f"{REQUESTS}/{request_id}/{IMAGES_DIR}/{step.accepted_image}"
            parts.append(f'<img loading="lazy" src="{html.escape(src)}" alt="step {index}">')
        caption = f"{index}. {len(step.attempts)} attempt(s)" if step.kind == "image" else f"{index}. text"
        parts.append(
            f"<figcaption>{html.escape(caption)}<br>{html.escape((step.text or '')[:120])}</figcaption></figure>"
        )
    parts.append("</div></div>")
    return "".join(parts)


def render_report(traces: dict[str, Trace], summary: dict[str, Any]) -> str:
    tasks = sorted({t.request.task for t in traces.values() if t.request.task})
    options = "".join(f'<option value="{html.escape(t)}">{html.escape(t)}</option>' for t in tasks)
    counts = summary["requests"]
    head = (
        "<style>body{font-family:system-ui,sans-serif;margin:1.5rem}.card{border:1px solid #ddd;border-radius:6px;"
        "padding:.5rem 1rem;margin:.7rem 0}.steps{display:flex;gap:.5rem;flex-wrap:wrap}figure{margin:0;width:150px}"
        "img{width:150px;border:1px solid #ccc}figcaption{font-size:.75rem;color:#555}.error{color:#a00}"
        ".hidden{display:none}</style>"
    )
    script = (
        "<script>function f(){const s=document.getElementById('status').value,t=document.getElementById('task').value;"
        "for(const c of document.querySelectorAll('.card')){const ok=(!s||c.dataset.status===s)&&(!t||c.dataset.task===t);"
        "c.classList.toggle('hidden',!ok)}}</script>"
    )
    controls = (
        '<p>Status <select id="status" onchange="f()"><option value="">all</option><option>succeeded</option>'
        f'<option>failed</option><option>running</option></select> Task <select id="task" onchange="f()">'
        f'<option value="">all</option>{options}</select></p>'
    )
    cards = "\n".join(_card(i, t) for i, t in traces.items())
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Batch report</title>{head}{script}</head><body>'
        f"<h1>Batch report</h1><p>{counts['total']} requests: {counts['succeeded']} succeeded, {counts['failed']} failed, "
        f"{counts['unfinished']} unfinished · success rate {summary['success_rate']:.1%}</p>{controls}{cards}</body></html>\n"
    )


def write_reports(
    root: Path, traces: dict[str, Trace], backends: dict[str, Any] | None = None, wall_s: float | None = None
) -> dict[str, Any]:
    summary = summarize(traces, backends, wall_s)
    write_atomic(root / SUMMARY, json.dumps(summary, indent=2))
    write_atomic(root / RESULTS, json.dumps(ueval_results(traces), indent=2, ensure_ascii=False))
    write_atomic(root / REPORT, render_report(traces, summary))
    return summary
