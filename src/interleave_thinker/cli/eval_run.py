"""`interleave-thinker eval run BENCH`: generate, score and report in one command (lmms-eval's
``--mode all``), each part resumable as when run alone.

Everything lands in ``--out``: the generation run folder (as `eval generate`), the scoring folder
``scores-<protocol>/`` (as `eval score`) and ``report.html`` (as `eval report`). A second call
continues where the first stopped: finished items are not generated again (no model is loaded when
none is left) and stored scores are reused.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.cli.eval_generate import (
    BenchmarkArgument,
    DataOption,
    IdsOption,
    ModeOption,
    generate_locked,
    plan_generation,
    split_ids,
)
from interleave_thinker.cli.eval_score import (
    SCORING,
    FreshScoresOption,
    JudgeAttemptsOption,
    JudgeConcurrencyOption,
    ProtocolName,
    RequestModeOption,
    ScorerVersionOption,
    exit_if_nothing_scored,
    score_options,
    score_with_progress,
)
from interleave_thinker.cli.options import (
    SchedulingFlags,
    SettingsFlags,
    with_scheduling_flags,
)
from interleave_thinker.cli.scheduled import start_fresh
from interleave_thinker.cli.scoring import JUDGE_REQUIRED, judge_or_preset
from interleave_thinker.cli.specs import check_spec
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.eval import benchmarks

console = Console(stderr=True)
REPORT = "report.html"


def _protocol(bench: Any, name: str | None) -> Any:
    """The protocol ``--protocol`` names (default: the benchmark's first), refused when it does not score
    ``bench``."""
    chosen = bench.protocols[0] if name is None else benchmarks.find_protocol(name)[1]
    if chosen not in bench.protocols:
        names = ", ".join(p.name for p in bench.protocols)
        raise ConfigError(f"--protocol {chosen.name} does not score {bench.name}; choose {names}.")
    return chosen


@with_scheduling_flags()
def run(
    benchmark: BenchmarkArgument,
    settings: SettingsFlags,
    scheduling: SchedulingFlags,
    data: DataOption,
    out: Annotated[Path, typer.Option(help="Run folder: outputs, scores-<protocol>/, report.html.")],
    protocol: Annotated[
        ProtocolName | None, typer.Option(help="Scoring protocol (default: the benchmark's first).")
    ] = None,
    mode: ModeOption = "agentic",
    ids: IdsOption = None,
    judge_concurrency: JudgeConcurrencyOption = SCORING["judge_concurrency"],
    judge_attempts: JudgeAttemptsOption = None,
    scorer_version: ScorerVersionOption = SCORING["scorer_version"],
    request_mode: RequestModeOption = SCORING["request_mode"],
    fresh_scores: FreshScoresOption = False,
    judge: Annotated[
        str | None,
        typer.Option(
            help="Judge backend spec, e.g. openai:http://host:8000/v1#MODEL (with --preset tiny: the "
            "stand-in tiny:judge)."
        ),
    ] = None,
) -> None:
    """Generate, score and report a benchmark (or a slice of it: --limit/--ids are scored as a slice)."""
    from interleave_thinker.eval.report import write_report

    # 1. Everything cheap first: specs, the protocol, the items.
    judge = judge_or_preset(judge, settings)
    if judge is None:
        raise ConfigError(JUDGE_REQUIRED)
    check_spec("--judge", judge, "vlm")
    bench = benchmarks.get(benchmark.value)
    chosen = _protocol(bench, protocol.value if protocol else None)
    chosen.prompts()  # judge prompts that cannot be had stop the run now, not after hours of generation
    cfg = settings.resolve()
    selected = split_ids(ids)
    limit = scheduling.limit
    gen = plan_generation(bench.name, cfg, data, out, mode, scheduling, selected)
    if scheduling.shard:  # a shard is scored as the slice of the items it generated
        limit, selected = None, tuple(item.id for item in gen.items)

    # 2. Generate (resumable; a finished run loads no model).
    generate_locked(gen, scheduling)

    # 3. Score exactly the generated items (a slice stays a slice).
    outputs = out / "submission.json" if bench.layout.submission else out
    where = out / f"scores-{chosen.name}"
    start_fresh(where, fresh_scores)  # the generation stays; only the scores start over
    options = score_options(chosen.name, outputs, data, judge, where, cfg, scorer_version, judge_concurrency)
    options = dataclasses.replace(
        options, judge_attempts=judge_attempts, request_mode=request_mode, limit=limit, ids=selected
    )
    summary = score_with_progress(options, scheduling.quiet)

    # 4. Report.
    typer.echo(write_report([options.out], out / REPORT))
    typer.echo(json.dumps({k: summary[k] for k in ("protocol", "slice") if k in summary}))
    console.print(escape(f"wrote {out / REPORT}"))
    exit_if_nothing_scored(summary, options.out)
