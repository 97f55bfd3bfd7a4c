"""One way to run a command's items on the batch scheduler: `batch`, `data generate`, `eval generate`
and `eval run` differ in what they load and write, never in how they schedule.

:func:`run_scheduled` holds the folder lock, applies ``--fresh``, ``--resume`` and ``--retry-failed``,
builds the scheduler's settings from the same :class:`SchedulingFlags`, and draws one progress bar; a
:class:`ScheduledJob` says what the command opens, loads and runs.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

import typer
from rich.console import Console

from interleave_thinker.cli.options import SchedulingFlags, quiet_diffusers
from interleave_thinker.cli.progress import LoadingDisplay, counter_bar
from interleave_thinker.core.errors import RunFailedError

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig
    from interleave_thinker.runtime.batch_inputs import BatchItem
    from interleave_thinker.runtime.cluster import ClusterRunner
    from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
    from interleave_thinker.runtime.store import RunStore

console = Console(stderr=True)
R = TypeVar("R")
OnDone = Callable[[str, str], None]
BatchInputOption = Annotated[
    str,
    typer.Option(
        "--input",
        help="Requests: JSONL (as `data prompts` writes), JSON list, CSV, Parquet, or hf:DATASET[:split].",
    ),
]
"""``--input`` of the commands that run a file of requests (`batch`, `data generate`): one reader, one help."""


class ScheduledJob(Generic[R]):
    """What one command does over its run folder; :func:`run_scheduled` calls it in this order."""

    loading = "loading models"
    """What the loading display says."""
    noun = "requests"
    """What the progress bar counts."""
    log_name = "interleave_thinker.batch"
    """The logger of ``--quiet``'s failure lines (the command's own name, as users grep for it)."""
    generator: str | None = None
    """The generator spec whose diffusers progress bars are silenced before loading (None: nothing to silence)."""
    accept_changed = False
    """``--accept-changed-input``, set from the flags before :meth:`open`: the store runs a request whose
    input changed again instead of refusing the resume."""

    def open(self, resume: bool, retry_failed: bool) -> int | None:
        """Open (or continue) the run store, no model loaded; the items still to run (None: known after load)."""
        return None

    def finish_unloaded(self) -> R | None:
        """With nothing left to run: the result without loading a model (None: load and run anyway)."""
        return None

    def load(self, settings: BatchSettings) -> None:
        """Load the models and build the scheduler with ``settings``."""
        raise NotImplementedError

    def pending(self) -> int:
        """The items still to run, once loaded."""
        raise NotImplementedError

    def run(self, on_done: OnDone) -> R:
        """Run the items still to run; ``on_done(id, status)`` as each finishes."""
        raise NotImplementedError

    def detail(self) -> str:
        """More to show on the progress bar (e.g. the calls of each backend)."""
        return ""

    def served(self) -> tuple[PipelineConfig, dict[str, str]] | None:
        """The settings and the backends (role -> spec) the run will call, for the preflight (None: none)."""
        return None


class RequestsJob(ScheduledJob[R]):
    """A job over the requests of ``--input`` (`batch`, `data generate`): the settings, the requests this
    process runs (``--shard``, ``--limit``, read before anything loads) and the run folder."""

    def __init__(self, cfg: PipelineConfig, input: str, out: Path, flags: SchedulingFlags) -> None:
        from interleave_thinker.runtime.batch_inputs import read_batch_input, select

        self.cfg, self.source, self.out = cfg, input, out
        self.items: list[BatchItem] = select(
            read_batch_input(input), shard=flags.shard_spec(), limit=flags.limit
        )
        flags.limits()

    def build_runner(
        self, make_runner: Callable[[], BatchRunner], store: RunStore, settings: BatchSettings
    ) -> BatchRunner | ClusterRunner:
        """This process's runner, or the cluster's with ``--ray`` (:func:`scheduled_runner`)."""
        return scheduled_runner(make_runner, store, settings, self.cfg)


def run_scheduled(out: Path, total: int, flags: SchedulingFlags, job: ScheduledJob[R]) -> R:
    """Run ``job``'s ``total`` items in ``out`` under the folder lock, as the flags say (one process per folder)."""
    from interleave_thinker.core.storage import check_out_folder
    from interleave_thinker.runtime.outlock import folder_lock

    check_out_folder(out)  # a file in the way, no permission, read-only: exit 2 before anything loads
    with folder_lock(out), stops_say_what_is_kept(out, job.noun):
        start_fresh(out, flags.fresh)
        job.accept_changed = flags.accept_changed_input
        left = job.open(flags.resume, flags.retry_failed)
        if left == 0 and (result := job.finish_unloaded()) is not None:
            return result
        settings = flags.batch_settings()
        if (served := job.served()) is not None:
            preflight(*served)
        with LoadingDisplay(console, job.loading, quiet=flags.quiet):
            if job.generator is not None:
                quiet_diffusers(job.generator)  # imports torch and diffusers: part of the time shown
            job.load(settings)
        return _with_progress(job, total, flags.quiet)


def used_specs(cfg: PipelineConfig, *, agentic: bool = True, judge: bool = False) -> dict[str, str]:
    """role -> spec of every backend a run of ``cfg`` calls: planner and critic (``agentic``), the
    generator, the judge (``judge``: every attempt scored, or ``loop.select_best: judge``) and the sequence
    review's own backend."""
    specs = {"planner": cfg.planner, "critic": cfg.critic} if agentic else {}
    specs["generator"] = cfg.generator
    if cfg.judge and (judge or (agentic and cfg.loop.select_best == "judge")):
        specs["judge"] = cfg.judge
    reviewer = cfg.loop.repair_reviewer
    if agentic and cfg.loop.repair_budget > 0 and reviewer and reviewer != cfg.critic:
        specs["review"] = reviewer
    return specs


def preflight(cfg: PipelineConfig, specs: dict[str, str]) -> None:
    """One cheap call to each served backend of ``specs`` before anything loads (``remote.preflight``,
    ``--no-preflight``); a failure is one line naming the role, the spec and what it answered."""
    if not cfg.remote.preflight:
        return
    from interleave_thinker.agents.preflight import check_served, served
    from interleave_thinker.backends.specs import BackendOptions

    if not any(served(spec) for spec in specs.values()):
        return
    size = (cfg.generation.width, cfg.generation.height)
    checked = check_served(specs, BackendOptions.from_config(cfg), size)
    console.print(f"preflight: {', '.join(checked)} answered", highlight=False, markup=False)


def _with_progress(job: ScheduledJob[R], total: int, quiet: bool) -> R:
    progress = counter_bar(console, quiet=quiet)
    task = progress.add_task(job.noun, total=total, completed=total - job.pending())
    counts = {"succeeded": 0, "failed": 0}

    def on_done(item_id: str, status: str) -> None:
        counts[status if status in counts else "failed"] += 1
        shown = f"{job.noun} (ok {counts['succeeded']}, failed {counts['failed']}){job.detail()}"
        progress.update(task, advance=1, description=shown)
        if quiet:
            level = logging.INFO if status == "succeeded" else logging.WARNING  # --quiet: failures only
            logging.getLogger(job.log_name).log(
                level, "%s %s %s", job.noun.removesuffix("s"), item_id, status
            )

    with progress:
        return job.run(on_done)


def scheduled_runner(
    make_runner: Callable[[], BatchRunner], store: RunStore, settings: BatchSettings, cfg: PipelineConfig
) -> BatchRunner | ClusterRunner:
    """The runner of a command: ``make_runner()`` in this process, or with ``--ray`` (``scale.ray_address``)
    one built by each worker of the cluster, the driver here (``ray`` imported only then)."""
    address = cfg.scale.ray_address
    if address is None:
        return make_runner()
    from interleave_thinker.runtime.cluster import ClusterRunner

    specs = [cfg.planner, cfg.critic, cfg.generator, *([cfg.judge] if cfg.judge else [])]
    runner = ClusterRunner(
        make_runner,
        store,
        settings,
        address=address,
        specs=specs,
        object_store_mb=cfg.scale.object_store_mb,
        max_fallback_share=cfg.agents.max_fallback_share,
        notice=cfg.notice,
    )
    shown = runner.dashboard or "none (the head node runs `ray[default]` for one)"
    console.print(
        f"Ray cluster {address}: {len(runner.slots)} workers on {len(runner.nodes)} nodes; dashboard {shown}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return runner


@contextmanager
def stops_say_what_is_kept(out: Path, noun: str) -> Iterator[None]:
    """SIGTERM and Ctrl-C stop at once and say in one line what was kept and how to resume.

    SIGTERM exits at once (143), as SIGKILL would: each finished item is a fsynced journal line and every
    file is written atomically, so a resume takes up exactly what was done (a torn journal line is cut
    back then). Ctrl-C unwinds (130)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        sys.stderr.write(stop_line(out, noun, "SIGTERM") + "\n")
        sys.stderr.flush()
        os._exit(143)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.write(stop_line(out, noun, "Ctrl-C") + "\n")
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_line(out: Path, noun: str, how: str) -> str:
    """``stopped by SIGTERM: 12 finished requests are kept in OUT; run the same command again to resume.``"""
    from interleave_thinker.core.run_folder import JOURNAL
    from interleave_thinker.core.untrusted import rows_by_id

    try:
        kept = sum(1 for row in rows_by_id(out / JOURNAL).values() if row.get("status") == "succeeded")
    except OSError:
        kept = 0
    return (
        f"stopped by {how}: {kept} succeeded {noun} kept in {out} (an unfinished one resumes after its last "
        "complete step); run the same command again to resume."
    )


def start_fresh(out: Path, fresh: bool) -> None:
    """``--fresh``: the earlier work in ``out`` moves aside (never deleted), and the command starts over."""
    from interleave_thinker.runtime.resume import move_aside

    moved = move_aside(out) if fresh else None
    if moved is not None:
        message = f"--fresh: moved the earlier contents of {out} to {moved}"
        console.print(message, highlight=False, markup=False, soft_wrap=True)


def outcome_line(summary: dict[str, Any], skipped: int) -> str:
    """The first line of a scheduled command's outcome: requests succeeded, failed and already finished."""
    requests = summary["requests"]
    return f"{requests['succeeded']} succeeded, {requests['failed']} failed ({skipped} already finished)"


def end_run(
    summary: dict[str, Any],
    skipped: int,
    stopped: str | None,
    output: Path,
    *,
    took: str = "",
    details: Iterable[str] = (),
) -> None:
    """How every batch-like command ends, in one order: :func:`outcome_line` (with ``took``) and the
    ``details`` on stderr, the ``output`` file's path on stdout (what a script reads), then
    :func:`close_run`."""
    console.print(outcome_line(summary, skipped) + took)
    for line in details:
        console.print(line)
    typer.echo(str(output))
    close_run(summary, stopped)


def close_run(summary: dict[str, Any], stopped: str | None = None) -> None:
    """The last lines of a scheduled command: its fallbacks when any; then stop with an error when this run
    passed ``agents.max_fallback_share`` (``stopped``, the scheduler's word), or when the folder has
    requests and none succeeded."""
    from interleave_thinker.runtime.fallbacks import fallback_line
    from interleave_thinker.runtime.opt_in import opt_in_line

    for line in (opt_in_line(summary.get("opt_in") or {}), fallback_line(summary.get("fallbacks") or {})):
        if line is not None:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    if stopped is not None:
        raise RunFailedError(stopped)
    requests = summary.get("requests") or {}
    if requests.get("total") and not requests.get("succeeded"):
        reasons = summary.get("failure_reasons") or {}
        first = next(iter(reasons), "see the traces")
        raise RunFailedError(
            f"No request succeeded ({requests.get('failed', 0)} failed; most frequent reason: {first}). "
            "Fix the cause and run the same command again: finished requests are kept."
        )
