"""`interleave-thinker eval generate BENCH`, and what `eval run` shares with it: the benchmark choices,
item selection, and generation under the folder lock (a finished run loads no model)."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.cli.options import SchedulingFlags, SettingsFlags, with_scheduling_flags
from interleave_thinker.cli.scheduled import (
    ScheduledJob,
    close_run,
    run_scheduled,
    scheduled_runner,
    used_specs,
)
from interleave_thinker.core.errors import InputError
from interleave_thinker.eval import benchmarks

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig
    from interleave_thinker.eval.generate import GenerationRun
    from interleave_thinker.runtime.cluster import ClusterRunner
    from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
    from interleave_thinker.runtime.store import RunStore

console = Console(stderr=True)
BenchmarkName = enum.Enum("BenchmarkName", [(n, n) for n in benchmarks.names()], type=str)  # type: ignore[misc]
"""The registry's benchmarks, as the CLI's choices."""
Mode = Literal["agentic", "base"]
ModeOption = Annotated[Mode, typer.Option(help="agentic: planner + critic; base: the generator alone.")]
BenchmarkArgument = Annotated[BenchmarkName, typer.Argument(help="The benchmark (see docs/evaluation.md).")]
DataOption = Annotated[
    str,
    typer.Option(help="The benchmark's data: its official local files (folder or file), or hf:ID[:split]."),
]
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


def plan_generation(
    benchmark: str,
    cfg: PipelineConfig,
    data: str,
    out: Path,
    mode: str,
    scheduling: SchedulingFlags,
    ids: tuple[str, ...] | None = None,
) -> GenerationRun:
    """The items to generate (``--ids``, then ``--limit``, then ``--shard``), the specs and the
    per-backend limits checked: everything cheap, before a model loads."""
    from interleave_thinker.backends.specs import check_specs
    from interleave_thinker.eval.datasets import choose_items
    from interleave_thinker.eval.generate import GenerationRun

    bench = benchmarks.get(benchmark)
    loaded = bench.load(data)
    items = choose_items(loaded, ids=ids, limit=scheduling.limit, shard=scheduling.shard_spec())
    run = GenerationRun(bench, mode, data, out, items, cfg, total=len(loaded))
    check_specs(cfg, roles=("planner", "critic", "generator") if mode == "agentic" else ("generator",))
    scheduling.limits()
    return run


def generate_locked(run: GenerationRun, scheduling: SchedulingFlags) -> dict[str, Any]:
    """Open (or continue) the run store under the folder lock and generate what is unfinished (a
    finished run writes its layout again and loads no model); say what has an output."""
    record = run_scheduled(run.out, len(run.items), scheduling, EvalJob(run))
    say_generated(record)
    close_run(record, record.get("stopped"))
    return record


@with_scheduling_flags()
def generate(
    benchmark: BenchmarkArgument,
    settings: SettingsFlags,
    scheduling: SchedulingFlags,
    data: DataOption,
    out: Annotated[Path, typer.Option(help="Run folder: official layout, requests/<id>/, eval.json.")],
    mode: ModeOption = "agentic",
    ids: IdsOption = None,
) -> None:
    """Generate a benchmark's outputs (resumable; a trace per item) and write its official layout."""
    run = plan_generation(benchmark.value, settings.resolve(), data, out, mode, scheduling, split_ids(ids))
    generate_locked(run, scheduling)
    typer.echo(str(run.out))


class EvalJob(ScheduledJob[dict[str, Any]]):
    """`eval generate` on the scheduler: the benchmark's items, written in its official layout."""

    noun = "items"
    log_name = "interleave_thinker.eval"

    def __init__(self, run: GenerationRun) -> None:
        self.gen = run
        self.loading = f"loading models ({run.mode} mode)"
        self.generator = run.config.generator
        self.store: RunStore | None = None
        self.runner: BatchRunner | ClusterRunner | None = None
        self.retry_failed = True

    def open(self, resume: bool, retry_failed: bool) -> int | None:
        from interleave_thinker.eval.generate import open_store, unfinished

        self.store, self.retry_failed = (
            open_store(self.gen, resume=resume, accept_changed=self.accept_changed),
            retry_failed,
        )
        return unfinished(self.gen, self.store, retry_failed=retry_failed)

    def finish_unloaded(self) -> dict[str, Any] | None:
        from interleave_thinker.eval.generate import finish_without_models

        assert self.store is not None
        where = escape(str(self.gen.out))
        console.print(f"all {len(self.gen.items)} items already finished in {where}; no model loaded")
        return finish_without_models(self.gen, self.store)

    def served(self) -> tuple[PipelineConfig, dict[str, str]]:
        cfg = self.gen.effective_config
        return cfg, used_specs(cfg, agentic=self.gen.mode == "agentic")

    def load(self, settings: BatchSettings) -> None:
        from interleave_thinker.eval.generate import eval_runner

        assert self.store is not None
        make = functools.partial(eval_runner, self.gen, self.store.root, settings)
        self.runner = scheduled_runner(make, self.store, settings, self.gen.effective_config)

    def pending(self) -> int:
        from interleave_thinker.eval.generate import unfinished

        assert self.store is not None
        return unfinished(self.gen, self.store, retry_failed=self.retry_failed)

    def run(self, on_done: Callable[[str, str], None]) -> dict[str, Any]:
        from interleave_thinker.eval.generate import execute

        assert self.store is not None and self.runner is not None
        return execute(self.gen, self.store, self.runner, on_done)


def say_generated(record: dict[str, Any]) -> None:
    """Where the outputs are and what is missing."""
    missing = record["missing"]
    shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
    console.print(
        f"{record['written']} of {record['items']} items have an output; {len(missing)} missing"
        + (f" ({escape(shown)})" if missing else "")
    )
