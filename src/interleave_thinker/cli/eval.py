"""`interleave-thinker eval`: generate benchmark outputs in the official layouts, score them, compare runs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.cli import eval_score
from interleave_thinker.cli import options as flags
from interleave_thinker.cli.batch import FreshOption, parse_limits, start_fresh
from interleave_thinker.cli.options import SettingsFlags, quiet_diffusers, with_settings
from interleave_thinker.cli.progress import counter_bar

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
GenBenchmark = Literal["ueval", "wise", "rise"]
Mode = Literal["agentic", "base"]


def _run_with_progress(
    run: GenerationRun, store: RunStore, pipeline: Pipeline, settings: BatchSettings, quiet: bool
) -> dict[str, Any]:
    from interleave_thinker.eval.generate import execute

    already = store.finished()
    progress = counter_bar(console, quiet=quiet)
    task = progress.add_task("items", total=len(run.items), completed=sum(i.id in already for i in run.items))
    counts = {"succeeded": 0, "failed": 0}

    def on_done(item_id: str, status: str) -> None:
        counts[status if status in counts else "failed"] += 1
        ok, failed = counts["succeeded"], counts["failed"]
        progress.update(task, advance=1, description=f"items (ok {ok}, failed {failed})")
        if quiet:
            level = logging.INFO if status == "succeeded" else logging.WARNING  # only failures shown
            logger.log(level, "item %s %s", item_id, status)

    with progress:
        return execute(run, store, pipeline, settings, on_done)


@app.command("generate")
@with_settings(pipeline=True)
def generate(
    benchmark: Annotated[GenBenchmark, typer.Argument(help="ueval, wise or rise.")],
    settings: SettingsFlags,
    data: Annotated[
        str, typer.Option(help="The benchmark's official local files (folder or file), or hf:ID[:split].")
    ],
    out: Annotated[Path, typer.Option(help="Run folder: official layout, requests/<id>/, eval.json.")],
    mode: Annotated[
        Mode, typer.Option(help="agentic: planner + critic; base: the generator alone.")
    ] = "agentic",
    limit: flags.LimitOption = None,
    shard: flags.ShardOption = None,
    concurrency: flags.ConcurrencyOption = 16,
    per_backend_limit: flags.PerBackendLimitOption = None,
    micro_batch: flags.MicroBatchOption = None,
    resume: Annotated[bool, typer.Option(help="Continue a run in --out: skip finished items.")] = True,
    quiet: flags.QuietOption = False,
    fresh: FreshOption = False,
) -> None:
    """Generate a benchmark's outputs (resumable; a trace per item) and write its official layout."""
    from interleave_thinker.eval.datasets import load_items
    from interleave_thinker.eval.generate import GenerationRun, load_pipeline, open_store
    from interleave_thinker.runtime.batch_inputs import parse_shard, select
    from interleave_thinker.runtime.scheduler import BatchSettings

    # 1. Check everything cheap before loading a model.
    cfg = settings.resolve()
    items = select(load_items(benchmark, data), limit=limit, shard=parse_shard(shard) if shard else None)
    limits = parse_limits(per_backend_limit or [], micro_batch or [])
    run = GenerationRun(benchmark, mode, data, out, items, cfg)
    start_fresh(out, fresh)
    store = open_store(run, resume=resume)

    # 2. Load the models and run (diffusers, which loads torch, only when a local generator needs it).
    quiet_diffusers(cfg.generator)
    with console.status(f"loading models ({mode} mode)"):
        pipeline = load_pipeline(run)
    scheduling = BatchSettings(concurrency=concurrency, limits=limits, micro_batch=set(micro_batch or []))
    record = _run_with_progress(run, store, pipeline, scheduling, quiet)

    # 3. Say where the outputs are and what is missing.
    missing = record["missing"]
    shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
    console.print(
        f"{record['written']} of {record['items']} items have an output; {len(missing)} missing"
        + (f" ({escape(shown)})" if missing else "")
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
    console.print(escape(f"wrote {out}"))
