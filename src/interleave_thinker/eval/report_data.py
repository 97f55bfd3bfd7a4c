"""What ``eval report`` shows, computed from scoring folders: the side-by-side table and the paired items.

A run is a scoring folder of ``eval score`` (``summary.json``, ``scores.jsonl``); its ``outputs`` (recorded in
the summary) lead to the generation folder of ``eval generate`` (``eval.json``, ``requests/<id>/trace.json``,
the official layout), which supplies the images and the agentic traces. A generation folder holding
exactly one scoring folder is accepted in its place.

How a protocol's numbers are shown and whether one item passed (used only to pick the paired gallery)
are the protocol's own :class:`~interleave_thinker.eval.benchmark.ReportRules`: WISE_Verified score 1;
WISE legacy consistency 2; RISEBench "accurate"; UEval item score (mean of its text and image rates)
at least 0.5. A judgement that failed or an output that is missing is a fail. A summary of a slice
(``summary["slice"]``) says so in its Overall cell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interleave_thinker.core.config import LoopOptions
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import MANIFEST
from interleave_thinker.core.sanitize import clean_text
from interleave_thinker.core.untrusted import rows_by_id
from interleave_thinker.eval import benchmarks
from interleave_thinker.eval.benchmark import ReportRules
from interleave_thinker.eval.layouts import Layout
from interleave_thinker.eval.published import Published

SUMMARY = "summary.json"
RELEASE_REFERENCES = LoopOptions.model_fields["references"].default
SCORES = "scores.jsonl"
GENERATION = "eval.json"
MAX_FILE_BYTES = 256 * 2**20


@dataclass
class Run:
    """One scored run: its summary, its score lines by id, and (when found) its generation folder."""

    folder: Path
    summary: dict[str, Any]
    rows: dict[str, dict[str, Any]]
    outputs: Path | None
    generation: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Run] = field(default_factory=dict)
    """Measures of the same outputs shown beside this run's scores, by their column title."""

    @property
    def protocol(self) -> str:
        return str(self.summary.get("protocol", "unknown"))

    @property
    def mode(self) -> str | None:
        """``base``, ``agentic`` or ``agentic+references=POLICY`` (a reference policy other than the release's)."""
        mode = self.generation.get("mode")
        references = (self.generation.get("loop") or {}).get("references")
        if mode and references not in (None, RELEASE_REFERENCES):
            return f"{mode}+references={references}"
        return str(mode) if mode else None

    @property
    def label(self) -> str:
        generator = (self.generation.get("backends") or {}).get("generator")
        detail = ", ".join(str(x) for x in (self.mode, generator) if x)
        gen = self.generation_folder if self.generation else None
        inside = gen is not None and self.folder.resolve().parent == gen.resolve()
        name = f"{gen.name}/{self.folder.name}" if gen is not None and inside else self.folder.name
        return f"{name} ({detail})" if detail else name

    @property
    def judge(self) -> str:
        """The judge as given and as named by its server, never "official": nothing verified it."""
        judge = self.summary.get("judge") or {}
        spec, model = judge.get("spec"), judge.get("model")
        text = str(spec or model or "unknown judge")
        if model and spec and str(model) not in str(spec):
            text += f" (serving '{model}')"
        official = judge.get("official_model")
        if judge.get("name_matches_official", judge.get("official", False)):
            return f"{text}, named as the official judge {official}; not verified"
        if official:
            return f"{text}, not the official judge {official}; not verified"
        return f"{text}; no official judge; not verified"

    @property
    def rules(self) -> ReportRules:
        return rules(self.protocol)

    @property
    def layout(self) -> Layout:
        found = benchmarks.find_protocol_or_none(self.protocol)
        return found[0].layout if found is not None else FALLBACK_LAYOUT

    @property
    def generation_folder(self) -> Path | None:
        if self.outputs is None:
            return None
        return self.outputs.parent if self.outputs.is_file() else self.outputs


def cleaned(value: Any) -> Any:
    """A value read from a JSON file with every string cleaned (:func:`clean_text`: no NUL, no lone
    surrogate reaches the page or the terminal)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [cleaned(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): cleaned(v) for k, v in value.items()}
    return value


def _read_json(path: Path) -> Any:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InputError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB.")
    try:
        return cleaned(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}).") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise InputError(f"{path}: not a UTF-8 JSON file of bounded depth ({type(exc).__name__}).") from None


def _scoring_folder(path: Path) -> Path:
    if (path / SUMMARY).is_file():
        return path
    found = sorted(p.parent for p in path.glob(f"*/{SUMMARY}")) if path.is_dir() else []
    if len(found) == 1:
        return found[0]
    raise InputError(
        f"{path}: no {SUMMARY} there"
        + (f" and {len(found)} scoring folders below it; name one" if found else "")
        + "; run `interleave-thinker eval score ... --out DIR` first and pass DIR."
    )


def _outputs(folder: Path, summary: dict[str, Any]) -> Path | None:
    """The generation outputs the summary names (relative to the working directory, else to the folder)."""
    value = summary.get("outputs")
    if isinstance(value, str) and value:
        for candidate in (Path(value), folder / value, folder.parent / value):
            if candidate.exists():
                return candidate
    if (folder.parent / GENERATION).is_file():
        return folder.parent
    return None


def load_run(path: Path) -> Run:
    folder = _scoring_folder(path)
    summary = _read_json(folder / SUMMARY)
    if not isinstance(summary, dict):
        raise InputError(f"{folder / SUMMARY}: must hold a JSON object.")
    run = Run(folder, summary, cleaned(rows_by_id(folder / SCORES)), _outputs(folder, summary))
    generation = run.generation_folder
    if generation is not None and (generation / GENERATION).is_file():
        run.generation = _read_json(generation / GENERATION)
    elif generation is not None and (generation / MANIFEST).is_file():
        run.generation = _batch_record(_read_json(generation / MANIFEST))
    return run


def _batch_record(manifest: Any) -> dict[str, Any]:
    """A `batch` folder's settings as ``eval.json`` records them (a batch runs the agentic loop)."""
    settings = manifest.get("settings") if isinstance(manifest, dict) else None
    if not isinstance(settings, dict):
        return {}
    loop = settings.get("loop") if isinstance(settings.get("loop"), dict) else {}
    return {"mode": "agentic", "backends": {"generator": settings.get("generator")}, "loop": loop}


def load_runs(paths: list[Path]) -> list[Run]:
    """Every run, checked to share one protocol (numbers of two protocols are not comparable).

    A run of a column protocol (:attr:`ReportRules.column`, e.g. consistency) given beside another
    protocol's runs is shown as a column of the run of the same outputs; such a run kept in a run's
    generation folder (``scores-consistency/``) is found without being named."""
    loaded = [load_run(p) for p in paths]
    runs = [r for r in loaded if r.rules.column is None] or loaded
    protocols = {r.protocol for r in runs}
    if len(protocols) > 1:
        listed = ", ".join(f"{r.folder} ({r.protocol})" for r in runs)
        raise InputError(f"The runs were scored with different protocols: {listed}; compare one protocol.")
    if runs is not loaded:
        _attach_columns(runs, [r for r in loaded if r.rules.column is not None])
    return runs


def _key(run: Run) -> Path | None:
    folder = run.generation_folder
    return folder.resolve() if folder is not None else None


def _attach_columns(runs: list[Run], columns: list[Run]) -> None:
    """Each column run to the run of its outputs (named ones first, then those found beside)."""
    by_outputs = {_key(run): run for run in runs if _key(run) is not None}
    for column in columns:
        owner = by_outputs.get(_key(column))
        if owner is None:
            raise InputError(
                f"{column.folder}: a {column.protocol} score of {column.generation_folder}, which none of the "
                f"{runs[0].protocol} runs scored; pass the scoring folders of the same outputs."
            )
        owner.columns[str(column.rules.column)] = column
    for run in runs:
        folder = run.generation_folder
        for found in sorted(folder.glob(f"*/{SUMMARY}")) if folder is not None and folder.is_dir() else []:
            try:
                other = load_run(found.parent)
            except InputError:
                continue  # a broken folder beside the outputs is not this report's
            title = other.rules.column
            if title is not None and title not in run.columns and _key(other) == _key(run):
                run.columns[title] = other


# --- the table -----------------------------------------------------------------------------------

FALLBACK_RULES = ReportRules()
"""A summary of a protocol this version does not know: its ``score`` entries, shown plainly."""
FALLBACK_LAYOUT = Layout(lambda out, item_id, category, suffix: out / f"{item_id}.{suffix}")


def rules(protocol: str) -> ReportRules:
    found = benchmarks.find_protocol_or_none(protocol)
    return found[1].report if found is not None else FALLBACK_RULES


def _categories(rules: ReportRules, summary: dict[str, Any]) -> dict[str, Any]:
    value = summary.get(rules.categories_key)
    return value if isinstance(value, dict) else {}


def _overall(rules: ReportRules, summary: dict[str, Any]) -> str:
    text = rules.overall(summary) if rules.overall is not None else rules.cell(summary.get("overall"))
    part = summary.get("slice")
    if isinstance(part, dict):
        text += f" (on a {part.get('items', '?')}-item slice of {part.get('of', '?')})"
    return text


def table(runs: list[Run]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per category (in first-seen order), then "Overall"."""
    shown = runs[0].rules
    names: list[str] = []
    for run in runs:
        names += [n for n in _categories(shown, run.summary) if n not in names]
    header = ["category", *[run.label for run in runs]]
    body = [[name, *[shown.cell(_categories(shown, r.summary).get(name)) for r in runs]] for name in names]
    body.append(["Overall", *[_overall(shown, r.summary) for r in runs]])
    return header, body


def column_table(runs: list[Run]) -> tuple[list[str], list[list[str]]] | None:
    """One row per run: its overall and each column measure of its outputs (None: no run has one)."""
    titles: list[str] = []
    for run in runs:
        titles += [t for t in run.columns if t not in titles]
    if not titles:
        return None
    header = ["run", f"{runs[0].protocol} overall", *titles]
    body = []
    for run in runs:
        cells = [_overall(c.rules, c.summary) if (c := run.columns.get(t)) else "–" for t in titles]
        body.append([run.label, _overall(run.rules, run.summary), *cells])
    return header, body


def _lines(header: list[str], body: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return [line(header), line(["---"] * len(header)), *(line(row) for row in body)]


def markdown_table(runs: list[Run]) -> str:
    lines = _lines(*table(runs))
    judges = "; ".join(f"{r.label}: {r.judge}" for r in runs)
    lines += ["", f"Protocol {runs[0].protocol}; measured with {judges}."]
    columns = column_table(runs)
    if columns is not None:
        lines += ["", *_lines(*columns)]
        measured = [f"{r.label} {t}: {c.judge}" for r in runs for t, c in r.columns.items()]
        lines += ["", f"Columns measured with {'; '.join(measured)}."]
    return "\n".join(lines)


def published(protocol: str) -> list[Published]:
    return benchmarks.published(protocol)


# --- pass/fail and pairs -------------------------------------------------------------------------


def passed(protocol: str, row: dict[str, Any] | None) -> bool:
    if row is None or row.get("status") not in (None, "ok"):
        return False
    return rules(protocol).passed(row)


def paired_ids(first: Run, other: Run) -> list[str]:
    """Ids (in the first run's order) where exactly one of the two runs passed."""
    protocol = first.protocol
    ids = list(first.rows) + [i for i in other.rows if i not in first.rows]
    return [i for i in ids if passed(protocol, first.rows.get(i)) != passed(protocol, other.rows.get(i))]
