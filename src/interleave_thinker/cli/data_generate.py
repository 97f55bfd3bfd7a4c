"""`interleave-thinker data generate`: teacher trajectories, every attempt judged, resumable like `batch`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from interleave_thinker.cli.batch import FreshOption, parse_limits, start_fresh
from interleave_thinker.cli.options import (
    ConcurrencyOption,
    LimitOption,
    MicroBatchOption,
    PerBackendLimitOption,
    QuietOption,
    SettingsFlags,
    ShardOption,
    with_settings,
)
from interleave_thinker.cli.progress import LoadingDisplay, counter_bar
from interleave_thinker.cli.scoring import JudgeTokensOption
from interleave_thinker.cli.specs import check_spec

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig
    from interleave_thinker.datagen.generate import GenerateSettings
    from interleave_thinker.runtime.batch_inputs import BatchItem

console = Console(stderr=True)
logger = logging.getLogger("interleave_thinker.data_generate")


@with_settings(pipeline=True)
def generate(
    settings: SettingsFlags,
    input: Annotated[
        str, typer.Option("--input", help="Prompts: JSONL (as `data prompts` writes), JSON, CSV.")
    ],
    out: Annotated[
        Path, typer.Option(help="Batch folder: requests/<id>/ with trace.json and execution_record.json.")
    ],
    judge: Annotated[
        str | None,
        typer.Option(help="VLM spec of the judge scoring every attempt (SC/PQ) \\[default: config 'judge']."),
    ] = None,
    concurrency: ConcurrencyOption = 16,
    per_backend_limit: PerBackendLimitOption = None,
    micro_batch: MicroBatchOption = None,
    shard: ShardOption = None,
    limit: LimitOption = None,
    resume: Annotated[bool, typer.Option(help="Continue a run in --out: skip finished requests.")] = True,
    retry_failed: Annotated[
        bool, typer.Option(help="When resuming, run failed requests again (--no-retry-failed keeps them).")
    ] = True,
    fresh: FreshOption = False,
    judge_max_new_tokens: JudgeTokensOption = 1024,
    quiet: QuietOption = False,
) -> None:
    """Teacher trajectories for training data: plan, generate, criticise and judge every attempt.

    Writes our traces and, beside each, the release's execution_record.json; summary.json counts the
    calls, tokens and images of every backend (and the estimated cost, with prices in the config).
    """
    from interleave_thinker.datagen.generate import GenerateSettings, check_judge
    from interleave_thinker.runtime.batch_inputs import parse_shard, read_batch_input, select
    from interleave_thinker.runtime.outlock import folder_lock

    # 1. Check everything cheap before loading a model.
    if judge:
        check_spec("--judge", judge, "vlm")
    cfg = settings.resolve()
    if judge:
        cfg.judge = judge
    check_judge(cfg)
    items = select(read_batch_input(input), shard=parse_shard(shard) if shard else None, limit=limit)
    options = GenerateSettings(
        concurrency=concurrency,
        limits=parse_limits(per_backend_limit or [], micro_batch or []),
        micro_batch=set(micro_batch or []),
        retry_failed=retry_failed,
        resume=resume,
        judge_max_new_tokens=judge_max_new_tokens,
    )
    with folder_lock(out):
        start_fresh(out, fresh)
        summary, skipped = _run(cfg, items, out, input, options, quiet)
    _report(summary, skipped)
    typer.echo(str(out / "summary.json"))


def _report(summary: dict[str, Any], skipped: int) -> None:
    """3. The outcome and the counts of every backend, over every run of this folder."""
    from interleave_thinker.datagen.generate_usage import usage_lines

    console.print(
        f"{summary['requests']['succeeded']} succeeded, {summary['requests']['failed']} failed "
        f"({skipped} already finished)"
    )
    for line in usage_lines(summary["usage"], summary["estimated_cost"]):
        console.print(line)


def _run(
    cfg: PipelineConfig,
    items: list[BatchItem],
    out: Path,
    source: str,
    options: GenerateSettings,
    quiet: bool,
) -> tuple[dict[str, Any], int]:
    """2. Load the teachers and the judge, run with a progress bar; the summary and the requests skipped."""
    from interleave_thinker.datagen.generate import TeacherRun

    with LoadingDisplay(console, "loading the teachers and the judge", quiet=quiet):
        run = TeacherRun(cfg, items, out, source, options)
    progress = counter_bar(console, quiet=quiet)
    task = progress.add_task("requests", total=len(items), completed=len(items) - run.pending())

    def on_done(request_id: str, status: str) -> None:
        progress.update(task, advance=1, description=f"requests (last: {status})")
        if quiet:
            level = logging.INFO if status == "succeeded" else logging.WARNING  # only failures shown
            logger.log(level, "request %s %s", request_id, status)

    with progress:
        summary = run.run(on_done)
    return summary, run.outcome.skipped if run.outcome else 0
