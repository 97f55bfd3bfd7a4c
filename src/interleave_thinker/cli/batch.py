"""`interleave-thinker batch` (many requests, resumable) and `interleave-thinker report` (rebuild outputs)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from interleave_thinker.cli.options import SchedulingFlags, SettingsFlags, with_scheduling_flags
from interleave_thinker.cli.scheduled import BatchInputOption, RequestsJob, end_run, run_scheduled, used_specs
from interleave_thinker.core.errors import InputError

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig
    from interleave_thinker.core.types import Trace
    from interleave_thinker.runtime.cluster import ClusterRunner
    from interleave_thinker.runtime.scheduler import BatchOutcome, BatchRunner, BatchSettings
    from interleave_thinker.runtime.store import RunStore

SETTINGS_KEYS = ("planner", "critic", "generator", "loop", "generation")
"""The options a resumed batch must share with the batch it continues."""


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


@with_scheduling_flags()
def batch(
    settings: SettingsFlags,
    scheduling: SchedulingFlags,
    input: BatchInputOption,
    out: Annotated[
        Path, typer.Option(help="Batch folder: requests/<id>/, journal, summary, results, report.")
    ],
) -> None:
    """Run many requests concurrently; a restarted batch skips finished requests and resumes the rest."""
    from interleave_thinker.backends.specs import check_specs

    # 1. Check everything cheap before loading a model.
    cfg = settings.resolve()
    job = BatchJob(cfg, input, out, scheduling)
    check_specs(cfg)  # an unknown kind, a missing checkpoint or an unreachable hub: one line, now
    # 2. Load the models and run; 3. outputs from the traces on disk (earlier runs' finished ones too).
    outcome, store = run_scheduled(out, len(job.items), scheduling, job)
    summary = _write_outputs(store, outcome)
    end_run(summary, outcome.skipped, outcome.stopped, out / "report.html", took=f" in {outcome.wall_s:.1f}s")


class BatchJob(RequestsJob["tuple[BatchOutcome, RunStore]"]):
    """`batch` on the scheduler: the pipeline of the settings over the input's requests."""

    def __init__(self, cfg: PipelineConfig, input: str, out: Path, flags: SchedulingFlags) -> None:
        from interleave_thinker.runtime.store import RunStore

        super().__init__(cfg, input, out, flags)
        self.store = RunStore(out)
        self.loading = f"loading models ({cfg.preset or 'custom'} preset)"
        self.generator = cfg.generator
        self.runner: BatchRunner | ClusterRunner | None = None

    def open(self, resume: bool, retry_failed: bool) -> int | None:
        from interleave_thinker.runtime.batch_inputs import batch_manifest

        record = {k: self.cfg.model_dump(mode="json")[k] for k in SETTINGS_KEYS}
        manifest = batch_manifest(self.source, self.items, record)
        self.store.open(manifest, resume=resume, accept_changed=self.accept_changed)
        return None  # a batch loads its models even when nothing is left: its outputs need the run's figures

    def served(self) -> tuple[PipelineConfig, dict[str, str]]:
        return self.cfg, used_specs(self.cfg)

    def load(self, settings: BatchSettings) -> None:
        from interleave_thinker.runtime.scheduler import batch_runner

        make = functools.partial(batch_runner, self.cfg, self.store.root, settings)
        self.runner = self.build_runner(make, self.store, settings)

    def pending(self) -> int:
        assert self.runner is not None
        return len(self.runner.todo(self.items))

    def detail(self) -> str:
        assert self.runner is not None
        return " calls " + " ".join(f"{role}:{s.calls}" for role, s in self.runner.stats.items())

    def run(self, on_done: Callable[[str, str], None]) -> tuple[BatchOutcome, RunStore]:
        assert self.runner is not None
        self.runner.on_done = on_done
        try:
            return self.runner.run(self.items), self.store
        finally:
            self.runner.close()


def _write_outputs(store: RunStore, outcome: BatchOutcome) -> dict[str, Any]:
    """summary.json, results.json and report.html, with this run's figures added to the earlier runs'."""
    from interleave_thinker.runtime.reports import SUMMARY, accumulate, write_reports

    ordered = in_order(store.traces(), store.manifest().get("ids", []))
    backends = {role: s.summary(outcome.wall_s) for role, s in outcome.stats.items()}
    totals = accumulate(read_summary(store.root / SUMMARY), backends, outcome.wall_s)
    nodes = {"nodes": outcome.nodes} if outcome.nodes else None
    return write_reports(
        store.root, ordered, totals["backends"], totals["wall_s"], totals["runs"], extra=nodes
    )


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
