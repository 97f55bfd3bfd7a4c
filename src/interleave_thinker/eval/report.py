"""``eval report``: scored runs side by side as one HTML page, plus a Markdown table for papers.

The page has the table (per category and overall, in each protocol's published unit, with the judge of
every run), the published numbers for reference (each with its source), and for every run after the
first a paired gallery of the items where exactly one of the two runs passed: each run's output images
side by side, the agentic trace's attempts (images, prompts, critic verdicts) folded under each. Images
are linked by paths relative to the page; every text from a file is HTML-escaped.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import IMAGES_DIR, REQUESTS, TRACE_FILE, read_trace
from interleave_thinker.core.types import Attempt, Trace
from interleave_thinker.eval.layouts import SUBMISSION
from interleave_thinker.eval.report_data import (
    Run,
    cleaned,
    column_table,
    load_runs,
    markdown_table,
    paired_ids,
    passed,
    published,
    table,
)
from interleave_thinker.eval.scoring import STAND_IN

MAX_PAIRED = 200
STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}
th{background:#f3f3f3}.note{color:#555;font-size:.9rem}.notice{background:#fff4d6;padding:.4rem .6rem}.pair{border-top:1px solid #ddd;padding:.6rem 0}
.runs{display:flex;gap:1rem;flex-wrap:wrap}.run{border:1px solid #ddd;border-radius:6px;padding:.4rem;width:300px}
.pass{color:#070}.fail{color:#a00}img{width:140px;border:1px solid #ccc;margin:2px}
.attempt{display:flex;gap:.4rem;font-size:.8rem;margin:.3rem 0}.attempt img{width:80px}
""".strip()


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _src(path: Path, page_dir: Path) -> str:
    return quote(os.path.relpath(path.resolve(), page_dir.resolve()).replace(os.sep, "/"))


def _img(path: Path, page_dir: Path, alt: str) -> str:
    return f'<img loading="lazy" src="{_e(_src(path, page_dir))}" alt="{_e(alt)}">'


def _trace(run: Run, item_id: str) -> Trace | None:
    folder = run.generation_folder
    path = folder / REQUESTS / item_id / TRACE_FILE if folder is not None else None
    return read_trace(path) if path is not None else None


def _submission(run: Run) -> dict[str, list[str]]:
    folder = run.generation_folder
    file = run.outputs if run.outputs is not None and run.outputs.is_file() else None
    file = file or (folder / SUBMISSION if folder is not None else None)
    if file is None or not file.is_file():
        return {}
    try:
        data = cleaned(json.loads(file.read_text(encoding="utf-8")))
    except (ValueError, OSError, RecursionError):
        return {}  # the scorer reports a bad submission; the page shows the items without images
    found: dict[str, list[str]] = {}
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict) and entry.get("id") is not None:
            images = entry.get("image_answer") or []
            found[str(entry["id"])] = [
                str(p) for p in (images if isinstance(images, list) else [images]) if p
            ]
    return found


def output_images(run: Run, item_id: str, category: str, submission: dict[str, list[str]]) -> list[Path]:
    """The item's outputs as the scorer saw them, in the official layout."""
    folder = run.generation_folder
    if folder is None:
        return []
    if run.layout.submission:
        paths = [Path(p) if Path(p).is_absolute() else folder / p for p in submission.get(item_id, [])]
        return [p for p in paths if p.is_file()]
    return [p for p in run.layout.candidates(folder, item_id, category) if p.is_file()][:1]


def _attempt_html(run: Run, item_id: str, attempt: Attempt, page_dir: Path) -> str:
    folder = run.generation_folder
    image = ""
    if folder is not None and attempt.image_file:
        image = _img(folder / REQUESTS / item_id / IMAGES_DIR / attempt.image_file, page_dir, "attempt")
    if attempt.verdict is not None:
        state = "accepted" if attempt.verdict.success else "rejected"
        verdict = f"critic: {state}; refine: {attempt.verdict.refine_prompt}"
    else:
        verdict = "forced (last attempt)" if attempt.forced else (attempt.critic_error or "no verdict")
    text = f"step {attempt.step_number}, attempt {attempt.attempt + 1}, seed {attempt.seed}: {attempt.prompt}"
    return f'<div class="attempt">{image}<div>{_e(text)}<br><i>{_e(verdict)}</i></div></div>'


def _run_cell(run: Run, item_id: str, page_dir: Path, submission: dict[str, list[str]]) -> str:
    row = run.rows.get(item_id)
    ok = passed(run.protocol, row)
    category = str((row or {}).get("category", ""))
    score = (row or {}).get("score")
    status = (row or {}).get("status", "not scored")
    parts = [
        f'<div class="run" data-passed="{str(ok).lower()}"><b>{_e(run.label)}</b><br>',
        f'<span class="{"pass" if ok else "fail"}">{"passed" if ok else "failed"}</span>',
        f" · score {_e(score)} · {_e(status)}<br>",
    ]
    images = output_images(run, item_id, category, submission)
    parts += [_img(p, page_dir, f"{run.label} output") for p in images] or ["<i>no output image</i>"]
    trace = _trace(run, item_id)
    if trace is not None:
        attempts = [a for s in trace.steps for a in s.attempts]
        parts.append(f"<details><summary>trace: {len(attempts)} attempt(s), {_e(trace.status)}</summary>")
        parts += [_attempt_html(run, item_id, a, page_dir) for a in attempts]
        parts.append("</details>")
    errors = (row or {}).get("errors") or []
    if errors:
        parts.append(f'<p class="note">{_e("; ".join(str(e) for e in errors)[:500])}</p>')
    parts.append("</div>")
    return "".join(parts)


def _prompt(runs: list[Run], item_id: str) -> str:
    for run in runs:
        trace = _trace(run, item_id)
        if trace is not None:
            return trace.request.text.replace("<image>", "").strip()
    return ""


def gallery(first: Run, other: Run, page_dir: Path) -> str:
    ids = paired_ids(first, other)
    subs = {id(first): _submission(first), id(other): _submission(other)}
    head = f"<h2>{_e(first.label)} vs {_e(other.label)}: {len(ids)} item(s) where exactly one passed</h2>"
    rows = []
    for item_id in ids[:MAX_PAIRED]:
        cells = "".join(_run_cell(r, item_id, page_dir, subs[id(r)]) for r in (first, other))
        prompt = _prompt([first, other], item_id)
        rows.append(
            f'<div class="pair" data-id="{_e(item_id)}"><h3>{_e(item_id)}</h3>'
            f'<p class="note">{_e(prompt[:400])}</p><div class="runs">{cells}</div></div>'
        )
    more = len(ids) - MAX_PAIRED
    tail = f'<p class="note">{more} more not shown.</p>' if more > 0 else ""
    return head + "".join(rows) + tail


def _html_table(table_id: str, header: list[str], body: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    rows = "".join("\n<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in body)
    return f'<table id="{table_id}"><tr>{head}</tr>{rows}</table>'


def _table_html(runs: list[Run]) -> str:
    columns = column_table(runs)
    extra = "" if columns is None else "<h2>Runs side by side</h2>" + _html_table("columns", *columns)
    return _html_table("scores", *table(runs)) + extra


def _provenance(runs: list[Run]) -> str:
    items = []
    for run in runs:
        judge = run.summary.get("judge") or {}
        note = judge.get("note") or ""
        counts = run.summary.get("counts") or {}
        items.append(
            f"<li><b>{_e(run.label)}</b>: measured with {_e(run.judge)}, protocol {_e(run.protocol)}, "
            f"scorer {_e(run.summary.get('scorer_version', '?'))};\ncounts {_e(json.dumps(counts))}"
            + (f";\n{_e(note)}" if note else "")
            + "".join(f"; {_e(t)} measured with {_e(c.judge)}" for t, c in run.columns.items())
            + "</li>\n"
        )
    return "<ul>" + "".join(items) + "</ul>"


def _published_html(protocol: str) -> str:
    rows = "".join(
        f"\n<tr><td>{_e(p.system)}</td>\n<td>{_e(p.metric)}</td><td>{_e(p.value)}</td>\n<td>{_e(p.source)}</td></tr>"
        for p in published(protocol)
    )
    if not rows:
        return '<p class="note">No published numbers recorded for this protocol.</p>'
    return (
        '<table id="published"><tr><th>system</th><th>metric</th><th>published</th><th>source</th></tr>'
        f"{rows}</table>"
    )


def render(runs: list[Run], page_dir: Path) -> str:
    protocol = runs[0].protocol
    galleries = "".join(gallery(runs[0], other, page_dir) for other in runs[1:])
    stand_in = any((run.summary.get("judge") or {}).get("stand_in") for run in runs)
    notice = f'<p class="notice"><b>Stand-in judge</b>:\n{_e(STAND_IN)}.</p>' if stand_in else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Evaluation report: {_e(protocol)}'
        f"</title><style>{STYLE}</style></head><body><h1>Evaluation report: {_e(protocol)}</h1>\n"
        f"{notice}\n{_table_html(runs)}\n{_provenance(runs)}\n<h2>Published numbers (for reference)</h2>\n"
        f"{_published_html(protocol)}\n{galleries}</body></html>\n"
    )


def write_report(paths: list[Path], out: Path) -> str:
    """Write the HTML page to ``out``; returns the Markdown table."""
    runs = load_runs(paths)
    write_atomic(out, render(runs, out.parent))
    return markdown_table(runs)
