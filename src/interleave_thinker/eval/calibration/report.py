"""A calibration's record: ``calibration.json`` (every figure with its counts and provenance) and
``calibration.html`` (the same tables as one self-contained page), written atomically into ``--out``."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interleave_thinker.core.paths import write_atomic
from interleave_thinker.eval.calibration import opening, stats, viescore

JSON_FILE = "calibration.json"
PAGE_FILE = "calibration.html"
SCHEMA = 1
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}"
    "table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}"
    "th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.note{color:#555;font-size:.9rem}"
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _pct(value: Any) -> str:
    return "–" if value is None else f"{value:.2f}%"


def _num(value: Any) -> str:
    return "–" if value is None else f"{value:.4f}"


def _ci(cell: dict[str, Any]) -> str:
    ci = cell.get("ci95")
    if not ci or ci[0] is None:
        return _num(cell["value"])
    return f"{_num(cell['value'])} [{_num(ci[0])}, {_num(ci[1])}]"


def _opening_html(result: dict[str, Any]) -> str:
    header = ["judge", *(opening.RULE_TITLES[r] for r in opening.RULES), "published FDT"]
    rows = []
    for name, judge in result["judges"].items():
        cells = [
            f"{_pct(judge['rules'][r]['agreement'])} ({judge['rules'][r]['agree']:g}/{judge['rules'][r]['pairs']})"
            for r in opening.RULES
        ]
        rows.append([name, *cells, _pct(judge.get("published_fdt"))])
    human = result["human"]
    return (
        f"<p>{human['pairs']} human pairwise verdicts {_e(human['verdicts'])}. Agreement in percent "
        f"(agreeing/pairs counted).</p>{_table(header, rows)}"
        f"<p class=note>Published: {_e(result['published']['source'])}. {_e(result['ceiling_note'])}.</p>"
    )


def _viescore_html(result: dict[str, Any]) -> str:
    parts = []
    for correlation in stats.CORRELATIONS:
        header = [
            "task",
            *(f"{m} judge" for m in viescore.METRICS),
            *(f"{m} human ceiling" for m in viescore.METRICS),
        ]
        rows = [
            [
                task,
                *(_ci(entry[correlation][m]["judge"]) for m in viescore.METRICS),
                *(_ci(entry[correlation][m]["ceiling"]) for m in viescore.METRICS),
            ]
            for task, entry in result["tasks"].items()
        ]
        overall = result["overall"][correlation]
        rows.append(
            [
                "all tasks",
                *(_num(overall[m]["judge"]) for m in viescore.METRICS),
                *(_num(overall[m]["ceiling"]) for m in viescore.METRICS),
            ]
        )
        parts.append(f"<h3>{_e(correlation.title())}</h3>{_table(header, rows)}")
    boot, answers = result["bootstrap"], result["answers"]
    parts.append(
        f"<p class=note>Judge answers {_e(result['judge'])}: {answers['used']} used, "
        f"{answers['refused_by_parser']} refused by {_e(result['parser'])}. Aggregation: "
        f"{_e(result['aggregation'])}. 95% intervals: {boot['resamples']} bootstrap resamples of "
        f"{_e(boot['unit'])}, seed {boot['seed']}. Published: {_e(result['published']['source'])}.</p>"
    )
    return "".join(parts)


def render(result: dict[str, Any]) -> str:
    body = _opening_html(result) if result["set"] == opening.NAME else _viescore_html(result)
    title = f"Judge calibration: {result['set']}"
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{_e(title)}</title><style>{STYLE}</style>"
        f"</head><body><h1>{_e(title)}</h1><p class=note>data {_e(result['data'])}; written "
        f"{_e(result['written'])}</p>{body}</body></html>"
    )


def write(result: dict[str, Any], out: Path) -> dict[str, Any]:
    """``result`` stamped (schema, time) into ``out/calibration.json`` and ``out/calibration.html``."""
    record = {"schema": SCHEMA, "written": datetime.now(UTC).isoformat(timespec="seconds"), **result}
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / JSON_FILE, json.dumps(record, indent=2, sort_keys=False) + "\n")
    write_atomic(out / PAGE_FILE, render(record))
    return record
