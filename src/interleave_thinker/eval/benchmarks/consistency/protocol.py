"""``consistency``: how well a sequence keeps its subjects, style and scene, on any folder of runs.

Our own measure, not a published protocol (there is no official judge and no published number): a VLM
judge rates each pair of consecutive accepted images with our rubric, ``prompts/consistency/`` (our
words), whose texts are pinned here by SHA-256 and recorded with every result. Scale, aggregation and
what is judged: :mod:`interleave_thinker.eval.benchmarks.consistency.scorer`.

Data: the runs themselves. ``eval score consistency --outputs RUNS`` reads every ``requests/<id>/`` of
a `batch` or `eval generate` folder (``--data`` defaults to ``--outputs``); a prompts file (JSONL of
``{"id", "prompt", "category"?}``) may be given as ``--data`` instead, so ``eval run consistency``
generates the sequences and scores them. ``eval report`` shows it as a column beside a benchmark's
scores of the same outputs.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import interleave_thinker.eval.benchmarks.consistency.scorer as scs
from interleave_thinker.agents.reply_formats import scores
from interleave_thinker.core.errors import TemplateError
from interleave_thinker.core.pinned_texts import sha256_text
from interleave_thinker.eval.benchmark import Benchmark, Protocol, ReportRules, ScoreContext, Scorer, fmt
from interleave_thinker.eval.datasets import EvalItem, load_questions
from interleave_thinker.eval.judge_formats import register_system_format
from interleave_thinker.eval.layouts import Layout
from interleave_thinker.eval.prompts import PromptSet

NAME = "consistency"
FILES = {scs.SYSTEM: "system.txt", scs.PAIR: "pair.txt"}
PINNED = {
    scs.SYSTEM: "81b95e97637670913135a8d1ef7ca14288926b08ec0d80d8d95c3ee8caab6eff",
    scs.PAIR: "ec41dc151fd801d24b0ebe09f715474650ad3d160d5221200ec1a07d5b598b1e",
}
"""The rubric's digests: a changed text is refused until pinned again, so one name means one rubric."""
register_system_format(
    "consistency pair",
    PINNED[scs.SYSTEM],
    (
        '{"identity": ',
        scores(),
        ', "style": ',
        scores(),
        ', "scene": ',
        scores(),
        ', "reason": "a stand-in"}',
    ),
)
PASS_MARK = 7.0
"""A sequence scoring at least this (of 10) counts as consistent in the report's paired gallery."""
COLUMN = "consistency (ours, 0-10)"


def prompts() -> PromptSet:
    """Our rubric from ``prompts/consistency/``, each text checked against its pinned digest."""
    folder = resources.files("interleave_thinker.prompts") / NAME
    texts = {}
    for role, file in FILES.items():
        text = (folder / file).read_bytes().decode("utf-8")
        if sha256_text(text) != PINNED[role]:
            raise TemplateError(
                f"prompts/{NAME}/{file} has SHA-256 {sha256_text(text)}, not the pinned {PINNED[role]}: "
                f"restore it, or pin the new digest in {__name__}.PINNED (scores made with the old rubric "
                "are then not comparable)."
            )
        texts[role] = text
    return PromptSet(texts, f"interleave-thinker's own rubric (prompts/{NAME}/, pinned in {__name__})")


def load(data: str) -> list[EvalItem]:
    """A folder of runs (one item per run folder), else a prompts file to generate sequences from."""
    path = Path(data)
    if path.is_dir():
        return scs.load_runs(path, NAME)
    return load_questions(data, NAME, "category")


def _scorer(ctx: ScoreContext) -> Scorer:
    return Scorer(
        functools.partial(scs.score_item, ctx.prompts, ctx.client, ctx.outputs, ctx.attempts, ctx.limits),
        scs.summarize,
        {"rubric": scs.RUBRIC, "scale": "0-10", "aggregation": scs.AGGREGATION},
        functools.partial(scs.output_digest, ctx.outputs, ctx.limits, ctx.prompts),
    )


def cell(entry: Any) -> str:
    """``7.50 (identity 8.00 · style 7.00 · scene 7.50; n=2 sequences, 3 pairs)``."""
    if not isinstance(entry, dict):
        return fmt(entry)
    parts = " · ".join(f"{key} {fmt(entry.get(key), 1, 2)}" for key in scs.CRITERIA)
    n, pairs = entry.get("n", "?"), entry.get("pairs", "?")
    return f"{fmt(entry.get('score'), 1, 2)} ({parts}; n={n} sequences, {pairs} pairs)"


def passed(row: dict[str, Any]) -> bool:
    score = row.get("score")
    return isinstance(score, int | float) and score >= PASS_MARK


PROTOCOL = Protocol(
    name=NAME,
    official_judge=None,
    judge_settings=scs.SETTINGS,
    attempts=3,
    prompts=prompts,
    scorer=_scorer,
    report=ReportRules(cell=cell, passed=passed, column=COLUMN),
)

BENCHMARK = Benchmark(
    name=NAME,
    load=load,
    layout=Layout(),
    protocols=(PROTOCOL,),
    data_from_outputs=True,
    help={
        "outputs": "consistency a `batch` or `eval generate` folder of runs",
        "data": "consistency: default --outputs",
        "scorer": "consistency only: vlm (the judge with our rubric, needs --judge) or an offline scorer that "
        "needs no model: perceptual (colour hashes, the `perceptual` extra)",
    },
)
