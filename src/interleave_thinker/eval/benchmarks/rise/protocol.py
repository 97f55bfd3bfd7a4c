"""RISEBench: edit an input image by a reasoning instruction; one image each at
``OUT/images/{category}/{index}.png``; scored by up to three GPT-4.1 judges per sample."""

from __future__ import annotations

import functools
from typing import Any

import interleave_thinker.eval.benchmarks.rise.scorer as score_rise
from interleave_thinker.agents.reply_formats import scores
from interleave_thinker.eval.benchmark import Benchmark, Protocol, ReportRules, ScoreContext, Scorer, fmt
from interleave_thinker.eval.benchmarks.rise.data import load as load_data
from interleave_thinker.eval.benchmarks.rise.prompts import PROMPTS, REPO
from interleave_thinker.eval.judge_formats import register_prompt_format
from interleave_thinker.eval.layouts import Layout
from interleave_thinker.eval.prompts import EvalPromptStore
from interleave_thinker.eval.published import PAPER, Published

REPLY = ("Final Score: ", scores(1, 5))
"""A judgement of a tiny stand-in judge (``agents/reply_formats.py``): the score is the value."""


def _scorer(ctx: ScoreContext) -> Scorer:
    columns: set[str] = set().union(*(item.raw.keys() for item in ctx.items))
    for item in ctx.items:  # bad samples (category, references) fail now, before any judge call
        score_rise.plan_judges(item, columns, ctx.prompts)
    register_prompt_format("RISEBench", ctx.prompts, REPLY)  # read by tiny stand-in judges only
    one = functools.partial(
        score_rise.score_item, ctx.prompts, ctx.client, ctx.outputs, columns, ctx.scorer_version
    )
    return Scorer(
        lambda item: one(item, ctx.limits),
        score_rise.summarize,
        {"data_columns": sorted(columns)},
        functools.partial(score_rise.output_digest, ctx.outputs, ctx.limits),
    )


def _cell(entry: Any) -> str:
    if not isinstance(entry, dict):
        return fmt(entry)
    accuracy, score = fmt(entry.get("accuracy"), 100, 1), fmt(entry.get("score"), 1, 2)
    return f"{accuracy}% acc · {score} (n={entry.get('n', '?')})"


PROTOCOL = Protocol(
    name="rise",
    official_judge="gpt-4.1-2025-04-14",
    judge_settings=score_rise.SETTINGS,
    attempts=1,
    prompts=lambda: EvalPromptStore().load(PROMPTS, "rise"),
    scorer=_scorer,
    code=REPO,
    scorer_versions=score_rise.SCORER_VERSIONS,
    report=ReportRules(cell=_cell, passed=lambda row: bool(row.get("accuracy"))),
)

BENCHMARK = Benchmark(
    name="rise",
    load=load_data,
    layout=Layout(
        lambda out, item_id, category, suffix: out / "images" / category / f"{item_id}.{suffix}",
        ("png", "jpg", "jpeg"),
    ),
    protocols=(PROTOCOL,),
    help={
        "outputs": "RISEBench the folder holding images/{category}/{index}.png",
        "scorer_version": "rise only: the accuracy rule before RISEBench's 2026-04-13 fix",
    },
    published=(
        Published(("rise",), "FLUX.2-klein (4 steps) alone", "RISEBench accuracy", "13.3%", PAPER),
        Published(
            ("rise",), "InterleaveThinker + FLUX.2-klein (4 steps)", "RISEBench accuracy", "28.9%", PAPER
        ),
    ),
)
