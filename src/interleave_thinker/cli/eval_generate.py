"""What `eval generate` and `eval run` share: the benchmark choices, item selection, and generation
under the folder lock (a finished run loads no model)."""

from __future__ import annotations

import enum
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.cli.batch import start_fresh
from interleave_thinker.cli.options import quiet_diffusers
from interleave_thinker.cli.progress import LoadingDisplay, counter_bar
from interleave_thinker.core.errors import InputError
from interleave_thinker.eval import benchmarks

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig
    from interleave_thinker.eval.generate import GenerationRun
    from interleave_thinker.runtime.pipeline import Pipeline
    from interleave_thinker.runtime.scheduler import BatchSettings
    from interleave_thinker.runtime.store import RunStore

console = Console(stderr=True)
logger = logging.getLogger("interleave_thinker.eval")
BenchmarkName = enum.Enum("BenchmarkName", [(n, n) for n in benchmarks.names()], type=str)  # type: ignore[misc]
"""The registry's benchmarks, as the CLI's choices."""
Mode = Literal["agentic", "base"]
ModeOption = Annotated[Mode, typer.Option(help="agentic: planner + critic; base: the generator alone.")]
BenchmarkArgument = Annotated[BenchmarkName, typer.Argument(help="The benchmark (see docs/evaluation.md).")]
IdsOption = Annotated[
    list[str] | None,
    typer.Option("--ids", help="Only these item ids (repeat the flag, or comma-separate); before --limit."),
]


def split_ids(values: list[str] | None) -> tuple[str, ...] | None:
    """``--ids a,b --ids c`` -> ``("a", "b", "c")``; None when the flag was not given."""
    if not values:
        return None
    ids = tuple(part.strip() for value in values for part in value.split(",") if part.strip())
    if not ids:
        raise InputError("--ids: no id given; name item ids, e.g. --ids 1,2,3.")
    return ids


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


def plan_generation(
    benchmark: str,
    cfg: PipelineConfig,
    data: str,
    out: Path,
    mode: str,
    *,
    limit: int | None = None,
    ids: tuple[str, ...] | None = None,
    shard: str | None = None,
) -> GenerationRun:
    """The items to generate (``--ids``, then ``--limit``, then ``--shard``), the specs checked."""
    from interleave_thinker.backends.specs import check_specs
    from interleave_thinker.eval.datasets import choose_items
    from interleave_thinker.eval.generate import GenerationRun
    from interleave_thinker.runtime.batch_inputs import parse_shard

    bench = benchmarks.get(benchmark)
    loaded = bench.load(data)
    items = choose_items(loaded, ids=ids, limit=limit, shard=parse_shard(shard) if shard else None)
    run = GenerationRun(bench, mode, data, out, items, cfg, total=len(loaded))
    check_specs(cfg, roles=("planner", "critic", "generator") if mode == "agentic" else ("generator",))
    return run


def generate_locked(
    run: GenerationRun,
    cfg: PipelineConfig,
    limits: dict[str, int],
    concurrency: int,
    micro_batch: list[str] | None,
    *,
    quiet: bool,
    resume: bool = True,
    fresh: bool = False,
) -> dict[str, Any]:
    """Open (or continue) the run store under the folder lock and generate what is unfinished; a
    finished run writes its layout again and loads no model."""
    from interleave_thinker.eval.generate import finish_without_models, open_store, unfinished
    from interleave_thinker.runtime.outlock import folder_lock

    with folder_lock(run.out):  # one process per --out, as `batch`
        start_fresh(run.out, fresh)
        store = open_store(run, resume=resume)
        if not unfinished(run, store):
            console.print(
                f"all {len(run.items)} items already finished in {escape(str(run.out))}; no model loaded"
            )
            return finish_without_models(run, store)
        return _generate(run, store, cfg, limits, concurrency, micro_batch, quiet)


def _generate(
    run: GenerationRun,
    store: RunStore,
    cfg: PipelineConfig,
    limits: dict[str, int],
    concurrency: int,
    micro_batch: list[str] | None,
    quiet: bool,
) -> dict[str, Any]:
    from interleave_thinker.eval.generate import load_pipeline
    from interleave_thinker.runtime.scheduler import BatchSettings

    # 2. Load the models and run (diffusers, which loads torch, only when a local generator needs it).
    quiet_diffusers(cfg.generator)
    with LoadingDisplay(console, f"loading models ({run.mode} mode)"):  # a line too when not a terminal
        pipeline = load_pipeline(run)
    scheduling = BatchSettings(concurrency=concurrency, limits=limits, micro_batch=set(micro_batch or []))
    return _run_with_progress(run, store, pipeline, scheduling, quiet)


def say_generated(record: dict[str, Any]) -> None:
    """Where the outputs are and what is missing."""
    missing = record["missing"]
    shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
    console.print(
        f"{record['written']} of {record['items']} items have an output; {len(missing)} missing"
        + (f" ({escape(shown)})" if missing else "")
    )
