"""`interleave-thinker batch` (many requests, resumable) and `interleave-thinker report` (rebuild outputs)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

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

console = Console(stderr=True)
logger = logging.getLogger("interleave_thinker.batch")
ROLES = ("planner", "critic", "generator")


def parse_limits(values: list[str]) -> dict[str, int]:
    limits: dict[str, int] = {}
    for value in values:
        role, sep, number = value.partition("=")
        if not sep or role not in ROLES or not number.isdigit() or int(number) < 1:
            raise InputError(
                f"--per-backend-limit {value!r}: write ROLE=N with ROLE in {', '.join(ROLES)} and N >= 1."
            )
        limits[role] = int(number)
    return limits


def batch(
    input: Annotated[
        str, typer.Option("--input", help="JSONL, JSON list, CSV, Parquet, or hf:DATASET[:split].")
    ],
    out: Annotated[
        Path, typer.Option(help="Batch folder: requests/<id>/, journal, summary, results, report.")
    ],
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight at once.")] = 16,
    per_backend_limit: Annotated[
        list[str] | None, typer.Option(help="ROLE=N calls in flight for one backend.")
    ] = None,
    micro_batch: Annotated[
        list[str] | None, typer.Option(help="ROLE whose local model batches calls across requests.")
    ] = None,
    shard: Annotated[
        str | None, typer.Option(help="I/N: run every N-th request starting at I (0-based).")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N requests of the input.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue a batch in --out: skip finished requests.")] = True,
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
    """Run many requests concurrently; a restarted batch skips finished requests and resumes the rest."""
    from interleave_thinker.runtime.batch_inputs import parse_shard, read_batch_input, select
    from interleave_thinker.runtime.pipeline import Pipeline
    from interleave_thinker.runtime.reports import write_reports
    from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
    from interleave_thinker.runtime.store import RunStore

    # 1. Check everything cheap before loading a model.
    items = select(read_batch_input(input), shard=parse_shard(shard) if shard else None, limit=limit)
    limits = parse_limits(per_backend_limit or [])
    for role in micro_batch or []:
        if role not in ROLES:
            raise InputError(f"--micro-batch {role!r}: choose from {', '.join(ROLES)}.")
    cfg = build_config(
        preset,
        config,
        planner,
        critic,
        generator,
        max_attempts,
        seed,
        device,
        planner_fallback,
        text_steps,
        critic_on_last_attempt,
    )
    store = RunStore(out)
    settings_record = {
        k: cfg.model_dump(mode="json")[k] for k in ("planner", "critic", "generator", "loop", "generation")
    }
    store.open({"input": input, "ids": [i.id for i in items], "settings": settings_record}, resume=resume)

    # 2. Load the models and run.
    quiet_diffusers()
    with console.status("loading models"):
        pipe = Pipeline.from_config(cfg)
    settings = BatchSettings(concurrency=concurrency, limits=limits, micro_batch=set(micro_batch or []))
    already = store.finished()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
    )
    counts = {"succeeded": 0, "failed": 0}
    task = progress.add_task("requests", total=len(items), completed=sum(1 for i in items if i.id in already))

    def on_done(request_id: str, status: str) -> None:
        counts[status if status in counts else "failed"] += 1
        calls = " ".join(f"{role}:{s.calls}" for role, s in runner.stats.items())
        progress.update(
            task,
            advance=1,
            description=f"requests (ok {counts['succeeded']}, failed {counts['failed']}) calls {calls}",
        )
        if quiet:
            logger.warning("request %s %s", request_id, status)

    runner = BatchRunner(pipe, store, settings, on_done=on_done)
    try:
        with progress:
            outcome = runner.run(items)
    finally:
        runner.pipeline.close()

    # 3. Outputs from the traces on disk (the finished ones of earlier runs included).
    traces = store.traces()
    ordered = {i: traces[i] for i in store.manifest().get("ids", []) if i in traces}
    backends = {role: s.summary(outcome.wall_s) for role, s in outcome.stats.items()}
    summary = write_reports(out, ordered, backends, outcome.wall_s)
    console.print(
        f"{summary['requests']['succeeded']} succeeded, {summary['requests']['failed']} failed "
        f"({outcome.skipped} already finished) in {outcome.wall_s:.1f}s"
    )
    typer.echo(str(out / "report.html"))


def report(dirs: Annotated[list[Path], typer.Argument(help="Batch folders to rebuild outputs for.")]) -> None:
    """Rebuild summary.json, results.json and report.html of batch folders from their saved traces."""
    from interleave_thinker.runtime.reports import SUMMARY, write_reports
    from interleave_thinker.runtime.store import RunStore

    for folder in dirs:
        store = RunStore(folder)
        traces = store.traces()
        if not traces:
            raise InputError(f"{folder} holds no requests/*/trace.json; is it a batch folder?")
        ids = store.manifest().get("ids") or sorted(traces)
        ordered = {i: traces[i] for i in ids if i in traces}
        previous = folder / SUMMARY
        backends = json.loads(previous.read_text()).get("backends") if previous.is_file() else None
        summary = write_reports(folder, ordered, backends)
        typer.echo(
            f"{folder / 'report.html'}: {summary['requests']['total']} requests, success rate {summary['success_rate']:.1%}"
        )
