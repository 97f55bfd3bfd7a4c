"""`interleave-thinker eval`: generate benchmark outputs in the official layouts, score them, compare runs."""

from __future__ import annotations

import logging
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from interleave_thinker.cli import eval_score
from interleave_thinker.cli.batch import ROLES, parse_limits
from interleave_thinker.cli.options import (
    ConfigOption,
    CriticOnLastAttemptOption,
    CriticOption,
    DeviceOption,
    FallbackOption,
    GeneratorOption,
    MaxAttemptsOption,
    PlannerOption,
    PresetOption,
    SeedOption,
    TextStepsOption,
    build_config,
    quiet_diffusers,
)
from interleave_thinker.core.errors import InputError

if TYPE_CHECKING:
    from interleave_thinker.eval.generate import GenerationRun
    from interleave_thinker.runtime.pipeline import Pipeline
    from interleave_thinker.runtime.scheduler import BatchSettings
    from interleave_thinker.runtime.store import RunStore

app = typer.Typer(
    help="Benchmarks: generate outputs in the official layouts, score them, compare runs.",
    no_args_is_help=True,
)
app.command("score")(eval_score.score)
console = Console(stderr=True)
logger = logging.getLogger("interleave_thinker.eval")


class GenBenchmark(StrEnum):
    ueval = "ueval"
    wise = "wise"
    rise = "rise"


class Mode(StrEnum):
    agentic = "agentic"
    base = "base"


def _progress(quiet: bool, total: int, finished: int) -> tuple[Progress, TaskID]:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )
    return progress, progress.add_task("items", total=total, completed=finished)


def _run_with_progress(
    run: GenerationRun, store: RunStore, pipeline: Pipeline, settings: BatchSettings, quiet: bool
) -> dict[str, Any]:
    from interleave_thinker.eval.generate import execute

    already = store.finished()
    progress, task = _progress(quiet, len(run.items), sum(1 for i in run.items if i.id in already))
    counts = {"succeeded": 0, "failed": 0}

    def on_done(item_id: str, status: str) -> None:
        counts[status if status in counts else "failed"] += 1
        ok, failed = counts["succeeded"], counts["failed"]
        progress.update(task, advance=1, description=f"items (ok {ok}, failed {failed})")
        if quiet:
            logger.warning("item %s %s", item_id, status)

    with progress:
        return execute(run, store, pipeline, settings, on_done)


@app.command("generate")
def generate(
    benchmark: Annotated[GenBenchmark, typer.Argument(help="ueval, wise or rise.")],
    data: Annotated[
        str, typer.Option(help="The benchmark's official local files (folder or file), or hf:ID[:split].")
    ],
    out: Annotated[Path, typer.Option(help="Run folder: official layout, requests/<id>/, eval.json.")],
    mode: Annotated[
        Mode, typer.Option(help="agentic: planner + critic; base: the generator alone.")
    ] = Mode.agentic,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N items.")] = None,
    shard: Annotated[str | None, typer.Option(help="I/N: every N-th item starting at I (0-based).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Items in flight at once.")] = 16,
    per_backend_limit: Annotated[
        list[str] | None, typer.Option(help="ROLE=N calls in flight for one backend.")
    ] = None,
    micro_batch: Annotated[
        list[str] | None, typer.Option(help="ROLE whose local model batches calls across items.")
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue a run in --out: skip finished items.")] = True,
    quiet: Annotated[bool, typer.Option(help="Log lines instead of a progress bar.")] = False,
    preset: PresetOption = None,
    config: ConfigOption = None,
    planner: PlannerOption = None,
    critic: CriticOption = None,
    generator: GeneratorOption = None,
    max_attempts: MaxAttemptsOption = None,
    seed: SeedOption = None,
    device: DeviceOption = None,
    planner_fallback: FallbackOption = None,
    text_steps: TextStepsOption = None,
    critic_on_last_attempt: CriticOnLastAttemptOption = None,
) -> None:
    """Generate a benchmark's outputs (resumable; a trace per item) and write its official layout."""
    from interleave_thinker.eval.datasets import load_items, parse_shard, select_items
    from interleave_thinker.eval.generate import GenerationRun, load_pipeline, open_store
    from interleave_thinker.runtime.scheduler import BatchSettings

    # 1. Check everything cheap before loading a model.
    items = select_items(
        load_items(benchmark.value, data), limit=limit, shard=parse_shard(shard) if shard else None
    )
    limits = parse_limits(per_backend_limit or [])
    for role in micro_batch or []:
        if role not in ROLES:
            raise InputError(f"--micro-batch {role!r}: choose from {', '.join(ROLES)}.")
    cfg = build_config(
        preset, config, planner, critic, generator, max_attempts, seed, device,
        planner_fallback, text_steps, critic_on_last_attempt,
    )  # fmt: skip
    run = GenerationRun(benchmark.value, mode.value, data, out, items, cfg)
    store = open_store(run, resume=resume)

    # 2. Load the models and run.
    quiet_diffusers()
    with console.status(f"loading models ({mode.value} mode)"):
        pipeline = load_pipeline(run)
    settings = BatchSettings(concurrency=concurrency, limits=limits, micro_batch=set(micro_batch or []))
    record = _run_with_progress(run, store, pipeline, settings, quiet)

    # 3. Say where the outputs are and what is missing.
    missing = record["missing"]
    shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
    console.print(
        f"{record['written']} of {record['items']} items have an output; {len(missing)} missing"
        + (f" ({shown})" if missing else "")
    )
    typer.echo(str(out))


@app.command("report")
def report(
    dirs: Annotated[
        list[Path], typer.Argument(help="Scoring folders of `eval score` (first = the reference run).")
    ],
    out: Annotated[Path, typer.Option(help="The HTML page to write.")],
) -> None:
    """Scored runs side by side (per category and overall), published numbers, paired galleries; a
    Markdown table on stdout."""
    from interleave_thinker.eval.report import write_report

    typer.echo(write_report(list(dirs), out))
    console.print(f"wrote {out}")
