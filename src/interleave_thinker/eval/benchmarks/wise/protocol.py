"""WISE: 1000 prompts, one image each at ``OUT/{prompt_id}.png``; two protocols, WISE_Verified (``wise``,
the repository's current default) and the original WiScore (``wise-legacy``)."""

from __future__ import annotations

import functools
from typing import Any

import interleave_thinker.eval.benchmarks.wise.scorer as score_wise
from interleave_thinker.eval.benchmark import Benchmark, Protocol, ReportRules, ScoreContext, Scorer, fmt
from interleave_thinker.eval.benchmark import plain_cell as cell
from interleave_thinker.eval.benchmarks.wise.data import load as load_data
from interleave_thinker.eval.benchmarks.wise.prompts import LEGACY_PROMPTS, REPO, VERIFIED_PROMPTS
from interleave_thinker.eval.layouts import Layout
from interleave_thinker.eval.prompts import EvalPrompts, EvalPromptStore
from interleave_thinker.eval.published import PAPER, Published

WISE_BOTH = ("wise", "wise-legacy")
WISE_METRIC = "WISE overall (which WISE protocol the paper used is not stated in our sources)"


def _scorer(protocol: score_wise.WiseProtocol, ctx: ScoreContext) -> Scorer:
    score_wise.check_data(protocol, ctx.items)
    one = functools.partial(score_wise.score_item, protocol, ctx.prompts, ctx.client, ctx.outputs)
    return Scorer(
        lambda item: one(item, ctx.attempts, ctx.limits),
        functools.partial(score_wise.summarize, protocol, sliced=ctx.sliced),
        {},
        functools.partial(score_wise.output_digest, ctx.outputs, ctx.limits),
    )


def _overall(summary: dict[str, Any]) -> str:
    overall = summary.get("overall")
    if summary.get("overall_on_slice"):
        return cell(overall)
    if overall is None:
        return "incomplete (not all 1000 ids scored)"
    if summary.get("complete") is False:
        return f"{fmt(overall)} (incomplete: not all 1000 ids scored)"
    return cell(overall)


def _protocol(wise: score_wise.WiseProtocol, judge: str, names: EvalPrompts, passed: Any) -> Protocol:
    return Protocol(
        name=wise.name,
        official_judge=judge,
        judge_settings=wise.settings,
        attempts=score_wise.ATTEMPTS,
        prompts=lambda: EvalPromptStore().load(names, wise.name),
        scorer=functools.partial(_scorer, wise),
        code=REPO,
        report=ReportRules(overall=_overall, passed=passed),
    )


VERIFIED = _protocol(
    score_wise.VERIFIED, "Qwen3.5-35B-A3B", VERIFIED_PROMPTS, lambda row: row.get("score") in (1, 1.0)
)
LEGACY = _protocol(
    score_wise.LEGACY, "gpt-4o-2024-05-13", LEGACY_PROMPTS, lambda row: row.get("consistency") == 2
)

BENCHMARK = Benchmark(
    name="wise",
    load=load_data,
    layout=Layout(lambda out, item_id, category, suffix: out / f"{item_id}.{suffix}"),
    protocols=(VERIFIED, LEGACY),
    help={"outputs": "WISE a folder of {prompt_id}.png", "protocol": "wise is WISE_Verified"},
    published=(
        Published(WISE_BOTH, "FLUX.2-klein (4 steps) alone", WISE_METRIC, "0.47", PAPER),
        Published(WISE_BOTH, "InterleaveThinker + FLUX.2-klein (4 steps)", WISE_METRIC, "0.73", PAPER),
        Published(
            ("wise-legacy",),
            "Qwen-Image, judged by gpt-4o-2024-05-13",
            "WiScore overall",
            "0.62",
            "WISE legacy leaderboard (PKU-YuanGroup/WISE); with the undated 'gpt-4o' judge the same images give 0.54",
        ),
    ),
)
