"""`interleave-thinker batch` (many requests, resumable) and `interleave-thinker report` (rebuild outputs)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from interleave_thinker.cli.options import (
    ConcurrencyOption,
    LimitOption,
    MicroBatchOption,
    PerBackendLimitOption,
    QuietOption,
    SettingsFlags,
    ShardOption,
    quiet_diffusers,
    with_settings,
)
from interleave_thinker.cli.progress import LoadingDisplay, counter_bar
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InputError

if TYPE_CHECKING:
    from interleave_thinker.core.types import Trace
    from interleave_thinker.runtime.batch_inputs import BatchItem
    from interleave_thinker.runtime.scheduler import BatchOutcome
    from interleave_thinker.runtime.store import RunStore

console = Console(stderr=True)
logger = logging.getLogger("interleave_thinker.batch")
ROLES = ("planner", "critic", "generator")
SETTINGS_KEYS = ("planner", "critic", "generator", "loop", "generation")
"""The options a resumed batch must share with the batch it continues."""
FreshOption = Annotated[
    bool,
    typer.Option(
        "--fresh",
        help="Start over: move what --out holds aside to <out>.old-<time> (nothing is deleted).",
    ),
]


def start_fresh(out: Path, fresh: bool) -> None:
    """``--fresh``: the earlier work in ``out`` moves aside (never deleted), and the command starts over."""
    from interleave_thinker.runtime.resume import move_aside

    moved = move_aside(out) if fresh else None
    if moved is not None:
        message = f"--fresh: moved the earlier contents of {out} to {moved}"
        console.print(message, highlight=False, markup=False, soft_wrap=True)


def in_order(traces: dict[str, Trace], ids: list[str]) -> dict[str, Trace]:
    """Every trace, those of the manifest in its order first (shards merged into one folder add theirs)."""
    ordered = {i: traces[i] for i in ids if i in traces}
    ordered.update((i, traces[i]) for i in sorted(traces) if i not in ordered)
    return ordered


def read_summary(path: Path) -> dict[str, Any] | None:
    """An earlier ``summary.json`` (its run figures are added to, not replaced); None when absent or unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def parse_limits(values: list[str], micro_batch: list[str] | None = None) -> dict[str, int]:
    """``--per-backend-limit ROLE=N`` values (and the roles of ``--micro-batch``), checked."""
    for role in micro_batch or []:
        if role not in ROLES:
            raise InputError(f"--micro-batch {role!r}: choose from {', '.join(ROLES)}.")
    limits: dict[str, int] = {}
    for value in values:
        role, sep, number = value.partition("=")
        if not sep or role not in ROLES or not number.isdigit() or int(number) < 1:
            raise InputError(
                f"--per-backend-limit {value!r}: write ROLE=N with ROLE in {', '.join(ROLES)} and N >= 1."
            )
        limits[role] = int(number)
    return limits


@with_settings(pipeline=True)
def batch(
    settings: SettingsFlags,
    input: Annotated[
        str, typer.Option("--input", help="JSONL, JSON list, CSV, Parquet, or hf:DATASET[:split].")
    ],
    out: Annotated[
        Path, typer.Option(help="Batch folder: requests/<id>/, journal, summary, results, report.")
    ],
    concurrency: ConcurrencyOption = 16,
    per_backend_limit: PerBackendLimitOption = None,
    micro_batch: MicroBatchOption = None,
    shard: ShardOption = None,
    limit: LimitOption = None,
    resume: Annotated[bool, typer.Option(help="Continue a batch in --out: skip finished requests.")] = True,
    retry_failed: Annotated[
        bool,
        typer.Option(
            help="When resuming, run the requests that failed again (--no-retry-failed keeps them)."
        ),
    ] = True,
    quiet: QuietOption = False,
    fresh: FreshOption = False,
) -> None:
    """Run many requests concurrently; a restarted batch skips finished requests and resumes the rest."""
    from interleave_thinker.backends.specs import check_specs
    from interleave_thinker.runtime.batch_inputs import parse_shard, read_batch_input, select
    from interleave_thinker.runtime.outlock import folder_lock

    # 1. Check everything cheap before loading a model.
    cfg = settings.resolve()
    items = select(read_batch_input(input), shard=parse_shard(shard) if shard else None, limit=limit)
    limits = parse_limits(per_backend_limit or [], micro_batch or [])
    check_specs(cfg)  # an unknown kind, a missing checkpoint or an unreachable hub: one line, now
    with folder_lock(out):
        start_fresh(out, fresh)
        _run_batch(
            input, out, items, cfg, limits, micro_batch or [], concurrency, resume, retry_failed, quiet
        )


def _run_batch(
    input: str,
    out: Path,
    items: list[BatchItem],
    cfg: PipelineConfig,
    limits: dict[str, int],
    micro_batch: list[str],
    concurrency: int,
    resume: bool,
    retry_failed: bool,
    quiet: bool,
) -> None:
    """The batch itself, run while this process holds ``out``."""
    from interleave_thinker.runtime.pipeline import Pipeline
    from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
    from interleave_thinker.runtime.store import RunStore

    store = RunStore(out)
    settings_record = {k: cfg.model_dump(mode="json")[k] for k in SETTINGS_KEYS}
    store.open({"input": input, "ids": [i.id for i in items], "settings": settings_record}, resume=resume)

    # 2. Load the models and run (diffusers, which loads torch, only when a local generator needs it).
    with LoadingDisplay(console, f"loading models ({cfg.preset or 'custom'} preset)", quiet=quiet):
        quiet_diffusers(cfg.generator)  # imports torch and diffusers: part of the time shown
        pipe = Pipeline.from_config(cfg)
    settings = BatchSettings(
        concurrency=concurrency, limits=limits, micro_batch=set(micro_batch), retry_failed=retry_failed
    )
    progress = counter_bar(console, quiet=quiet)
    counts = {"succeeded": 0, "failed": 0}
    runner = BatchRunner(pipe, store, settings)
    task = progress.add_task("requests", total=len(items), completed=len(items) - len(runner.todo(items)))

    def on_done(request_id: str, status: str) -> None:
        counts[status if status in counts else "failed"] += 1
        calls = " ".join(f"{role}:{s.calls}" for role, s in runner.stats.items())
        done = f"requests (ok {counts['succeeded']}, failed {counts['failed']}) calls {calls}"
        progress.update(task, advance=1, description=done)
        if quiet:
            level = logging.INFO if status == "succeeded" else logging.WARNING  # only failures shown
            logger.log(level, "request %s %s", request_id, status)

    runner.on_done = on_done
    try:
        with progress:
            outcome = runner.run(items)
    finally:
        runner.pipeline.close()

    # 3. Outputs from the traces on disk (the finished ones of earlier runs included).
    summary = _write_outputs(store, outcome)
    console.print(
        f"{summary['requests']['succeeded']} succeeded, {summary['requests']['failed']} failed "
        f"({outcome.skipped} already finished) in {outcome.wall_s:.1f}s"
    )
    typer.echo(str(out / "report.html"))


def _write_outputs(store: RunStore, outcome: BatchOutcome) -> dict[str, Any]:
    """summary.json, results.json and report.html, with this run's figures added to the earlier runs'."""
    from interleave_thinker.runtime.reports import SUMMARY, accumulate, write_reports

    ordered = in_order(store.traces(), store.manifest().get("ids", []))
    backends = {role: s.summary(outcome.wall_s) for role, s in outcome.stats.items()}
    totals = accumulate(read_summary(store.root / SUMMARY), backends, outcome.wall_s)
    return write_reports(store.root, ordered, totals["backends"], totals["wall_s"], totals["runs"])


def report(
    dirs: Annotated[list[Path], typer.Argument(help="Batch folders to rebuild outputs for.")],
    out: Annotated[
        Path | None,
        typer.Option(help="Also write one merged summary/results/report of all DIRS (e.g. shards) here."),
    ] = None,
) -> None:
    """Rebuild summary.json, results.json and report.html of batch folders from their saved traces."""
    from interleave_thinker.runtime.reports import CARRIED_KEYS, SUMMARY, write_reports
    from interleave_thinker.runtime.store import REQUESTS, RunStore

    merged: dict[str, Trace] = {}
    folders: dict[str, str] = {}
    for folder in dirs:
        store = RunStore(folder)
        traces = store.traces()
        if not traces:
            raise InputError(f"{folder} holds no requests/*/trace.json; is it a batch folder?")
        ordered = in_order(traces, store.manifest().get("ids", []))
        previous = read_summary(folder / SUMMARY) or {}
        carried = {key: previous[key] for key in CARRIED_KEYS if key in previous}
        figures = (previous.get("backends"), previous.get("wall_s"), previous.get("runs"))
        summary = write_reports(folder, ordered, *figures, extra=carried)
        typer.echo(
            f"{folder / 'report.html'}: {summary['requests']['total']} requests, success rate {summary['success_rate']:.1%}"
        )
        for request_id, trace in ordered.items():
            if request_id in merged:
                raise InputError(
                    f"id {request_id!r} is in {folders[request_id]} and in {folder}; ids must be unique."
                )
            merged[request_id] = trace
            folders[request_id] = str(folder / REQUESTS / request_id)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        relative = {i: os.path.relpath(path, out) for i, path in folders.items()}
        summary = write_reports(out, merged, folders=relative)
        typer.echo(f"{out / 'report.html'}: {summary['requests']['total']} requests from {len(dirs)} folders")
