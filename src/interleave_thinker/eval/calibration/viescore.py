"""ImagenHub's human ratings against a VIEScore judge's stored answers: rank correlation per task.

Data (``--data DIR``, VIEScore's ``paper_implementation/`` at the pinned commit, see
:mod:`interleave_thinker.eval.calibration.labels`):

- ``_human_annotations/ImagenHub_human_eval_results/<task>/*_rater{1,2,3}.tsv``: one row per sample
  (``uid``), one column per image model, each cell ``[SC, PQ]`` with values in {0, 0.5, 1}.
- ``_answers/<judge>/<task>/<model>/{SC,PQ}.json``: the judge's answer per sample, ``{"score": [...],
  "reasoning": "..."}`` (the JSON the judge replied, stored parsed by VIEScore's runner).

Each stored answer is written back as the JSON reply it was and read by our own VIEScore parser
(:func:`interleave_thinker.agents.judge.parse_judgement`, the one our judge uses); an answer it refuses
is counted and left out, never guessed. The aggregation follows the paper's notebook
(``analyze_json.ipynb``) so the numbers can be compared:

- judge SC (PQ) of a sample = the lowest of its scores / 10 (the notebook truncates each score to an
  integer first; we keep the parsed value and count where that differs), O = sqrt(SC * PQ);
  human SC (PQ) = the mean of the raters' cells, human O = the mean of sqrt(SC * PQ) per rater;
- per model, Spearman (and Kendall tau-b) between judge and human over the samples both have;
- per task, the models' correlations averaged by ``tanh(mean(r))`` (the notebook's
  ``average_correlation``, see :func:`~interleave_thinker.eval.calibration.stats.tanh_of_mean`), and
  over the seven tasks the same way;
- the ceiling: each rater against the mean of the other two over every rated sample, averaged over
  the three raters, then over models and tasks the same way.

Bootstrap intervals resample each model's samples (seeded) and repeat the whole per-task aggregation.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from interleave_thinker.agents.judge import parse_judgement
from interleave_thinker.core.errors import InputError, ParseError
from interleave_thinker.core.untrusted import MAX_JSON_BYTES, load_json, read_bounded
from interleave_thinker.eval.calibration import stats

NAME = "viescore"
HUMAN_DIR = Path("_human_annotations") / "ImagenHub_human_eval_results"
ANSWERS_DIR = Path("_answers")
DEFAULT_JUDGE = "results_gpt4o_0shot"
METRICS = ("SC", "PQ", "O")
MAX_TSV_BYTES = 4 * 2**20
SOURCE = (
    "VIEScore paper (arXiv 2312.14867v2, abstract): VIEScore with GPT-4o reaches a Spearman correlation "
    "of about 0.4 with human ratings, human-to-human about 0.45; the per-task table is an image "
    "(table_overall_new.png) we could not read here, so only these two figures are compared"
)
PUBLISHED = {"overall_spearman_judge": 0.4, "overall_spearman_human": 0.45}
CODE = (
    "TIGER-AI-Lab/VIEScore@2cbea4e8ce5721425a8772590ecdbe7d2edd1721 paper_implementation/analyze_json.ipynb"
)


@dataclass(frozen=True)
class Model:
    """One image model of a task: per sample, the judge's and the people's SC, PQ and O."""

    task: str
    name: str
    judge: dict[str, np.ndarray]
    human: dict[str, np.ndarray]
    raters: np.ndarray
    """Every rated sample's cells, shape (samples, raters, 2): the ceiling's input."""
    samples: int
    refused: list[str]
    truncation_differs: int


# --- reading ------------------------------------------------------------------------------------------


def _cell(text: str, where: str) -> tuple[float, float]:
    try:
        value = json.loads(text)
    except ValueError:
        raise InputError(f"{where}: {text[:40]!r} is not a [SC, PQ] list.") from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1 for v in value)
    ):
        raise InputError(f"{where}: {text[:40]!r} is not a [SC, PQ] pair of numbers from 0 to 1.")
    return float(value[0]), float(value[1])


def read_raters(folder: Path) -> list[dict[str, dict[str, tuple[float, float]]]]:
    """Each rater file of a task folder (sorted by name): model -> uid -> (SC, PQ)."""
    files = sorted(folder.glob("*.tsv"))
    if len(files) < 2:
        raise InputError(f"{folder}: {len(files)} rater file(s); the ceiling needs at least two raters.")
    raters = []
    for path in files:
        text = read_bounded(path, MAX_TSV_BYTES, what=path.name).decode("utf-8")
        table: dict[str, dict[str, tuple[float, float]]] = {}
        for line, row in enumerate(csv.DictReader(io.StringIO(text), delimiter="\t"), start=2):
            uid = row.get("uid")
            if not uid:
                raise InputError(f"{path} line {line}: no uid.")
            for model, cell in row.items():
                if model != "uid" and model is not None and cell is not None:
                    table.setdefault(model, {})[uid] = _cell(cell, f"{path} line {line}, {model}")
        raters.append(table)
    return raters


def read_answers(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"{path}: no such file (the judge's stored answers).")
    answers = load_json(read_bounded(path, MAX_JSON_BYTES, what=path.name))
    if not isinstance(answers, dict):
        raise InputError(f"{path}: expected an object of answers by sample uid.")
    return answers


def judged(answer: Any) -> tuple[float, bool]:
    """The answer's score (lowest / 10) by our parser, and whether the notebook's int() truncation differs.

    :class:`ParseError` when our parser refuses it."""
    if not isinstance(answer, dict):
        raise ParseError("the stored answer is not an object", raw=str(answer)[:200])
    reply = json.dumps({"score": answer.get("score"), "reasoning": answer.get("reasoning")})
    scores, _ = parse_judgement(reply)
    lowest = min(scores)
    return lowest / 10.0, math.trunc(lowest) != lowest


def _model(task: str, name: str, answers: dict[str, dict[str, Any]], raters: list[dict[str, Any]]) -> Model:
    rated = [r.get(name, {}) for r in raters]
    uids = sorted(set(answers["SC"]) & set(answers["PQ"]))
    judge: dict[str, list[float]] = {m: [] for m in METRICS}
    human: dict[str, list[float]] = {m: [] for m in METRICS}
    refused, differs = [], 0
    for uid in uids:
        try:
            (sc, t1), (pq, t2) = judged(answers["SC"][uid]), judged(answers["PQ"][uid])
        except ParseError as exc:
            refused.append(f"{uid}: {exc}")
            continue
        cells = [r[uid] for r in rated if uid in r]
        if not cells:
            continue
        differs += t1 + t2
        judge["SC"].append(sc)
        judge["PQ"].append(pq)
        judge["O"].append(math.sqrt(sc * pq))
        human["SC"].append(float(np.mean([c[0] for c in cells])))
        human["PQ"].append(float(np.mean([c[1] for c in cells])))
        human["O"].append(float(np.mean([math.sqrt(c[0] * c[1]) for c in cells])))
    everyone = sorted(set.intersection(*(set(r) for r in rated))) if all(rated) else []
    grid = np.array([[r[uid] for r in rated] for uid in everyone], dtype=float).reshape(
        len(everyone), len(rated), 2
    )
    return Model(
        task,
        name,
        {m: np.array(v) for m, v in judge.items()},
        {m: np.array(v) for m, v in human.items()},
        grid,
        len(judge["SC"]),
        refused,
        differs,
    )


def load(data: Path, judge: str = DEFAULT_JUDGE) -> list[Model]:
    """Every (task, model) with both the judge's answers and human ratings, in name order."""
    humans, answers = data / HUMAN_DIR, data / ANSWERS_DIR / judge
    for folder, what in ((humans, "the human ratings"), (answers, f"the judge's answers ({judge})")):
        if not folder.is_dir():
            raise InputError(
                f"--data {data}: no {folder.relative_to(data)} ({what}); give VIEScore's paper_implementation folder."
            )
    models = []
    for task_dir in sorted(p for p in answers.iterdir() if p.is_dir()):
        raters = read_raters(humans / task_dir.name)
        for model_dir in sorted(p for p in task_dir.iterdir() if p.is_dir()):
            stored = {m: read_answers(model_dir / f"{m}.json") for m in ("SC", "PQ")}
            if not any(model_dir.name in r for r in raters):
                raise InputError(
                    f"{model_dir}: no human ratings for model {model_dir.name} in {humans / task_dir.name}."
                )
            models.append(_model(task_dir.name, model_dir.name, stored, raters))
    if not models:
        raise InputError(f"{answers}: no <task>/<model>/SC.json and PQ.json answers.")
    return models


# --- statistics ---------------------------------------------------------------------------------------


def _human_values(cells: np.ndarray, metric: str) -> np.ndarray:
    """(..., raters) values of one metric from (..., raters, 2) cells."""
    if metric == "O":
        return np.sqrt(cells[..., 0] * cells[..., 1])
    return cells[..., METRICS.index(metric)]


def ceiling_batch(cells: np.ndarray, metric: str, correlation: str) -> np.ndarray:
    """Each rater against the others' mean, ``tanh(mean)`` over raters: (batch, samples, raters, 2) -> (batch,)."""
    values = _human_values(cells, metric)
    raters = values.shape[-1]
    function = stats.CORRELATIONS[correlation]
    per_rater = []
    for i in range(raters):
        others = np.delete(values, i, axis=-1).mean(axis=-1)
        per_rater.append(function(values[..., i], others))
    return np.tanh(np.mean(per_rater, axis=0))


def _model_value(
    model: Model, metric: str, correlation: str, kind: str, idx: np.ndarray | None
) -> np.ndarray:
    if kind == "ceiling":
        cells = model.raters if idx is None else model.raters[idx]
        return ceiling_batch(cells if idx is not None else cells[None], metric, correlation)
    x, y = model.judge[metric], model.human[metric]
    if idx is None:
        x, y = x[None], y[None]
    else:
        x, y = x[idx], y[idx]
    return stats.CORRELATIONS[correlation](x, y)


def _size(model: Model, kind: str) -> int:
    return len(model.raters) if kind == "ceiling" else model.samples


def task_value(models: list[Model], metric: str, correlation: str, kind: str) -> float:
    return stats.tanh_of_mean([float(_model_value(m, metric, correlation, kind, None)[0]) for m in models])


def task_interval(
    models: list[Model], metric: str, correlation: str, kind: str, resamples: int, seed: int
) -> list[float | None]:
    """The task's aggregate over resamples of each model's samples (one seeded stream per model)."""
    per_model = []
    for offset, model in enumerate(models):
        function = functools.partial(_model_value, model, metric, correlation, kind)
        per_model.append(stats.bootstrap(function, _size(model, kind), resamples, seed + offset))
    samples = np.tanh(np.mean(np.vstack(per_model), axis=0))
    return stats.interval(samples)


def _overall(table: dict[str, Any]) -> dict[str, Any]:
    """Over the tasks, the same way as over models: ``tanh(mean r)``."""
    return {
        correlation: {
            metric: {
                kind: stats.rounded(
                    stats.tanh_of_mean([table[t][correlation][metric][kind]["value"] for t in table])
                )
                for kind in ("judge", "ceiling")
            }
            for metric in METRICS
        }
        for correlation in stats.CORRELATIONS
    }


def _per_model(models: list[Model]) -> dict[str, Any]:
    return {
        f"{m.task}/{m.name}": {
            "samples": m.samples,
            "refused": len(m.refused),
            "spearman_SC": stats.rounded(float(_model_value(m, "SC", "spearman", "judge", None)[0])),
        }
        for m in models
    }


def calibrate(data: Path, judge: str = DEFAULT_JUDGE, resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Per task and overall: the judge's Spearman and Kendall with people, intervals, the human ceiling."""
    models = load(data, judge)
    tasks: dict[str, list[Model]] = {}
    for model in models:
        tasks.setdefault(model.task, []).append(model)
    table: dict[str, Any] = {}
    for task, group in tasks.items():
        entry: dict[str, Any] = {"models": [m.name for m in group], "samples": sum(m.samples for m in group)}
        for correlation in stats.CORRELATIONS:
            for metric in METRICS:
                for kind in ("judge", "ceiling"):
                    cell: dict[str, Any] = {
                        "value": stats.rounded(task_value(group, metric, correlation, kind))
                    }
                    if resamples:
                        ci = task_interval(group, metric, correlation, kind, resamples, seed)
                        cell["ci95"] = [stats.rounded(v) for v in ci]
                    entry.setdefault(correlation, {}).setdefault(metric, {})[kind] = cell
        table[task] = entry
    overall = _overall(table)
    per_model = _per_model(models)
    refused = [f"{m.task}/{m.name} {r}" for m in models for r in m.refused]
    return {
        "set": NAME,
        "kind": "scalar",
        "data": str(data),
        "judge": judge,
        "parser": "interleave_thinker.agents.judge.parse_judgement",
        "aggregation": "per model over samples; tanh(mean r) over models per task, and over tasks (VIEScore's notebook)",
        "bootstrap": {
            "resamples": resamples,
            "seed": seed,
            "level": 0.95,
            "unit": "samples within each model",
        },
        "answers": {
            "used": sum(m.samples for m in models),
            "refused_by_parser": len(refused),
            "refused_examples": refused[:20],
            "truncation_differs": sum(m.truncation_differs for m in models),
        },
        "tasks": table,
        "overall": overall,
        "models": per_model,
        "published": {**PUBLISHED, "source": SOURCE, "code": CODE},
    }


def _row(label: str, entry: dict[str, Any], value: Callable[[Any], Any]) -> str:
    """One printed row: judge (human ceiling) for each correlation and metric; ``value`` reads a figure
    (a task's figures carry intervals, the overall ones are bare numbers)."""
    cells = [
        f"{_fmt(value(entry[c][m]['judge']))} ({_fmt(value(entry[c][m]['ceiling']))})"
        for c in stats.CORRELATIONS
        for m in METRICS
    ]
    return f"{label:<30}" + "".join(f"{cell:>18}" for cell in cells)


def lines(result: dict[str, Any]) -> list[str]:
    """The printed table: per task, Spearman and Kendall of SC / PQ / O, the human ceiling beside."""
    answers = result["answers"]
    out = [
        f"VIEScore / ImagenHub ({result['judge']}): {answers['used']} answers used, "
        f"{answers['refused_by_parser']} refused by our parser; judge (human ceiling)"
    ]
    header = f"{'task':<30}" + "".join(f"{c[:5] + ' ' + m:>18}" for c in stats.CORRELATIONS for m in METRICS)
    out.append(header)
    for task, entry in result["tasks"].items():
        out.append(_row(task.removeprefix("ImagenHub_"), entry, lambda figure: figure["value"]))
    out.append(_row("all seven tasks", result["overall"], lambda figure: figure))
    published = result["published"]
    out.append(
        f"published (paper abstract): judge Spearman ~{published['overall_spearman_judge']}, "
        f"human-to-human ~{published['overall_spearman_human']}"
    )
    return out


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}"
