"""UEval: 1000 questions answered with text and images (a submission JSON), judged rubric by rubric by
gemini-2.5-pro; the single average is the leaderboard's (``score_ueval.AVERAGE_FORMULA``)."""

from __future__ import annotations

import functools
from typing import Any

import interleave_thinker.eval.benchmarks.ueval.scorer as score_ueval
from interleave_thinker.agents.reply_formats import Choice
from interleave_thinker.eval.benchmark import Benchmark, Protocol, ReportRules, ScoreContext, Scorer, fmt
from interleave_thinker.eval.benchmarks.ueval.data import load as load_data
from interleave_thinker.eval.benchmarks.ueval.prompts import PROMPTS, REPO
from interleave_thinker.eval.judge_formats import register_prompt_format
from interleave_thinker.eval.layouts import Layout
from interleave_thinker.eval.prompts import EvalPromptStore
from interleave_thinker.eval.published import PAPER, Published

MODE_FLAG = "--ueval-mode"
"""The flag of a rubric protocol's request shape (``score_ueval.MODES``)."""
REPLY = ('{"criteria_met": ', Choice(("true", "false")), ', "explanation": "a stand-in judge"}')
"""A rubric judgement of a tiny stand-in judge (``agents/reply_formats.py``): met or not is the value."""


def rubric_scorer(ctx: ScoreContext, prefix: str = "ueval_") -> Scorer:
    """UEval's scorer (also that of any rubric benchmark whose prompt roles are named ``prefix...``)."""
    submission, folder = score_ueval.load_submission(ctx.outputs)
    register_prompt_format("rubric", ctx.prompts, REPLY)  # read by tiny stand-in judges only
    one = functools.partial(
        score_ueval.score_item, ctx.prompts, ctx.client, submission, folder, ctx.request_mode, ctx.attempts
    )
    return Scorer(
        lambda item: one(item, ctx.limits, prefix),
        score_ueval.summarize,
        {"ueval_mode": ctx.request_mode},
        functools.partial(score_ueval.output_digest, submission, folder, ctx.limits),
    )


def rubric_cell(entry: Any) -> str:
    """Text and image rates in percent, with the task's score when it has one."""
    if not isinstance(entry, dict):
        return fmt(entry)
    text, image = fmt(entry.get("text_avg_rate"), 100, 1), fmt(entry.get("image_avg_rate"), 100, 1)
    n = entry.get("n", entry.get("num_items", "?"))
    head = f"{fmt(entry['score'], 1, 1)} · " if "score" in entry else ""
    return f"{head}text {text} · image {image} (n={n})"


def rubric_overall(summary: dict[str, Any]) -> str:
    """The single average (the published numbers' unit), then the two official rates."""
    return f"average {fmt(summary.get('average'), 1, 1)} · {rubric_cell(summary)}"


RUBRIC_REPORT = ReportRules(cell=rubric_cell, overall=rubric_overall, categories_key="tasks")

PROTOCOL = Protocol(
    name="ueval",
    official_judge="gemini-2.5-pro",
    judge_settings={},  # the official script passes none: the API's defaults
    attempts=score_ueval.ATTEMPTS,
    prompts=lambda: EvalPromptStore().load(PROMPTS, "ueval"),
    scorer=rubric_scorer,
    code=REPO,
    report=RUBRIC_REPORT,
    modes=score_ueval.MODES,
    mode_flag=MODE_FLAG,
)

BENCHMARK = Benchmark(
    name="ueval",
    load=load_data,
    layout=Layout(),
    protocols=(PROTOCOL,),
    help={
        "outputs": "UEval the submission JSON (or a folder with results.json)",
        "judge_attempts": "UEval 500",
        "request_mode": "UEval and other rubric benchmarks: cached (official default, with system instruction) "
        "or direct requests",
    },
    published=(
        Published(("ueval",), "FLUX.2-klein alone", "UEval average", "18.2", PAPER),
        Published(("ueval",), "InterleaveThinker + FLUX.2-klein", "UEval average", "66.3", PAPER),
    ),
)
