"""The batch scheduler: many requests in flight, every backend kept busy up to its own limit.

An asyncio loop admits up to ``concurrency`` requests; each runs the ordinary, synchronous step loop
(the code `run` uses, so the steps of one request stay ordered) in its own greenlet on that loop, not in
a thread: where a request waits (a served backend's reply, a retry's backoff, a backend's slot), its
greenlet suspends and the loop runs the others (:mod:`interleave_thinker.core.green`). A thousand
requests in flight against served backends cost a thousand small greenlets and one loop thread (plus
the few writer threads of :mod:`interleave_thinker.runtime.file_writes`). Every backend call passes a
per-backend limiter (:mod:`interleave_thinker.runtime.limits`) that bounds it, may micro-batch it with
calls from other requests, and runs a local model's forward pass in a small executor (its limit's
worth of threads), so the loop never stops for a model.

Each request is one failure boundary: whatever it raises (a reply that cannot be stored, a full disk,
a bug), that request is recorded as failed with a one-line reason and the batch goes on. A resumed
batch runs failed requests again unless told to keep them (``retry_failed``), and succeeded ones whose
files on disk fail the store's check.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from interleave_thinker.backends.protocols import ImageBackend, VLMBackend
from interleave_thinker.backends.specs import is_local
from interleave_thinker.backends.wrapping import declared_capacity
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import PlanningError
from interleave_thinker.core.green import finish_loop, run_green
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import TRACE_FILE, read_trace, trace_json
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.documents import write_documents
from interleave_thinker.runtime.failures import failure_reason, one_line
from interleave_thinker.runtime.fallbacks import FallbackBound
from interleave_thinker.runtime.limits import BackendStats, LimitedImage, LimitedVLM
from interleave_thinker.runtime.pipeline import Pipeline
from interleave_thinker.runtime.resume import pending, reopen_if_journaled_failed, restore_pages
from interleave_thinker.runtime.store import RunStore, failed_trace

logger = logging.getLogger(__name__)


@dataclass
class BatchSettings:
    concurrency: int = 16
    limits: dict[str, int] = field(default_factory=dict)
    micro_batch: set[str] = field(default_factory=set)
    max_wait: float = 0.005
    retry_failed: bool = True
    speculate_share: float = 1.0
    """Share of the generator's slots that calls made ahead (``loop.speculate``) may hold at once."""


def default_limit(spec: str, remote_concurrency: int, micro_batch: bool) -> int:
    if is_local(spec):
        return 8 if micro_batch else 1
    return remote_concurrency


def limited_pipeline(pipe: Pipeline, settings: BatchSettings) -> tuple[Pipeline, dict[str, BackendStats]]:
    """The same pipeline with each backend behind a limiter, the opt-in ones (judge, sequence reviewer)
    included; roles given one backend object share its limiter (planner and critic of one model)."""
    config = pipe.config
    stats: dict[str, BackendStats] = {}
    limited: dict[int, VLMBackend] = {}

    def vlm(role: str, backend: VLMBackend, spec: str) -> VLMBackend:
        if id(backend) in limited:
            return limited[id(backend)]
        batch = role in settings.micro_batch
        limit = settings.limits.get(role, default_limit(spec, config.remote.concurrency, batch))
        stats[role] = BackendStats(role, limit)
        limited[id(backend)] = LimitedVLM(backend, stats[role], micro_batch=batch, max_wait=settings.max_wait)
        return limited[id(backend)]

    planner = vlm("planner", pipe.planner_backend, config.planner)
    critic = vlm("critic", pipe.critic_backend, config.critic)
    judge = pipe.judge.on(vlm("judge", pipe.judge.backend, config.judge or "")) if pipe.judge else None
    reviewer = pipe.reviewer and vlm("reviewer", pipe.reviewer, config.loop.repair_reviewer or "")
    batch = "generator" in settings.micro_batch
    capacity = declared_capacity(pipe.generator)  # a pool file's slots=N, summed
    limit = settings.limits.get(
        "generator", capacity or default_limit(config.generator, config.remote.concurrency, batch)
    )
    if capacity and limit > capacity:
        logger.warning(
            "--per-backend-limit generator=%d is above the %d slots its pool file declares; using %d.",
            limit,
            capacity,
            capacity,
        )
        limit = capacity
    stats["generator"] = BackendStats("generator", limit)
    generator: ImageBackend = LimitedImage(
        pipe.generator,
        stats["generator"],
        micro_batch=batch,
        max_wait=settings.max_wait,
        speculate_share=settings.speculate_share,
    )
    return Pipeline(
        planner=planner,
        critic=critic,
        generator=generator,
        config=config,
        templates=pipe.templates,
        judge=judge,
        reviewer=reviewer,
    ), stats


@dataclass
class BatchOutcome:
    finished: dict[str, str]
    skipped: int
    wall_s: float
    stats: dict[str, BackendStats]
    threads_peak: int = 0
    """The most threads this process had as a request ended (sampled then): a handful whatever the
    concurrency, since requests are greenlets, not threads."""
    nodes: dict[str, dict[str, int]] = field(default_factory=dict)
    """A cluster run's counts per node (``--ray``): workers, succeeded, failed, and requests reassigned
    to other nodes after the node was lost; empty in one process."""
    stopped: str | None = None
    """Why this run ended past ``agents.max_fallback_share`` (stopped early, or over its requests at the
    end); None when it stayed within."""


class BatchRunner:
    def __init__(
        self,
        pipeline: Pipeline,
        store: RunStore,
        settings: BatchSettings,
        on_done: Callable[[str, str], None] | None = None,
    ) -> None:
        self.pipeline, self.stats = limited_pipeline(pipeline, settings)
        self.store = store
        self.settings = settings
        self.on_done = on_done or (lambda request_id, status: None)
        self.bound = FallbackBound(pipeline.config.agents.max_fallback_share)
        self.unusable: Callable[[Trace], str | None] | None = None
        """A rule that fails a request the pipeline called succeeded (`data generate`: fallbacks only)."""

    def run(self, items: list[BatchItem]) -> BatchOutcome:
        return asyncio.run(self.arun(items))

    def todo(self, items: list[BatchItem]) -> list[BatchItem]:
        """The requests still to run: not in the journal, or failed there (when failed ones are retried)."""
        return pending(items, self.store.finished(), retry_failed=self.settings.retry_failed)

    async def arun(self, items: list[BatchItem]) -> BatchOutcome:
        todo = self.todo(items)
        waiting = {item.id for item in todo}
        for item in items:
            if item.id not in waiting:
                self._restore_pages(item)
        slots = asyncio.Semaphore(self.settings.concurrency)
        finished: dict[str, str] = {}
        threads = [threading.active_count()]
        start = time.perf_counter()

        async def one(item: BatchItem) -> None:
            async with slots:
                if self.bound.stopped is not None:
                    return  # not started: left in the journal's to-do for the next run
                try:
                    status = await run_green(self._run_one, item)
                except Exception as exc:  # _run_one's own guard failed: still only this request
                    logger.error("request %s: %s", one_line(item.id, 80), failure_reason(exc))
                    status = "failed"
            finished[item.id] = status
            threads.append(threading.active_count())
            try:
                self.on_done(item.id, status)
            except Exception as exc:  # a progress display must not stop the batch
                logger.warning("progress: %s", failure_reason(exc))

        try:
            await asyncio.gather(*(one(item) for item in todo))
        finally:
            await finish_loop()  # the served backends' connections opened on this loop
        wall = time.perf_counter() - start
        outcome = BatchOutcome(finished, len(items) - len(todo), wall, self.stats, max(threads))
        outcome.stopped = self.bound.final()
        return outcome

    def _run_one(self, item: BatchItem) -> str:
        """Run one request inside its failure boundary; record its status (and why it failed) in the journal."""
        status, error = self.execute(item)
        try:
            self.store.mark(item.id, status, error)
        except Exception as exc:  # e.g. a full disk: the run's summary still counts it
            logger.error("journal line for %s not written: %s", one_line(item.id, 80), failure_reason(exc))
        return status

    def execute(self, item: BatchItem) -> tuple[str, str | None]:
        """Run one request inside its failure boundary, journal aside: ``(status, why it failed)``.

        A cluster worker calls this and its driver writes the journal line (one writer per batch)."""
        try:
            status, error = self._attempt(item)
        except Exception as exc:  # the failure boundary of one request
            status, error = "failed", failure_reason(exc)
            self._record_failure(item, error)
        if status == "failed":
            logger.warning("request %s failed: %s", one_line(item.id, 80), error)
        return status, error

    def close(self) -> None:
        """Close the backends (a served one's connections, a local model's threads)."""
        self.pipeline.close()

    def _attempt(self, item: BatchItem) -> tuple[str, str | None]:
        if item.problem is not None:
            return "failed", item.problem
        out = self.store.request_dir(item.id)
        entry = self.store.entry(item.id) or {}
        reopen_if_journaled_failed(out, entry.get("status"), self.store.damage(item.id), entry.get("error"))
        try:
            result = self.pipeline(
                item.prompt, list(item.images), out_dir=out, request_id=item.id, task=item.task, resume=True
            )
        except PlanningError as exc:
            return "failed", one_line(str(exc))
        self.bound.add(result.trace)
        reason = self.unusable(result.trace) if self.unusable and result.trace.status == "succeeded" else None
        if reason is not None:
            result.trace.status, result.trace.error = "failed", reason
            write_atomic(out / TRACE_FILE, trace_json(result.trace))
            write_documents(result.trace, out)
        return result.trace.status, result.trace.error

    def _record_failure(self, item: BatchItem, reason: str) -> None:
        """Mark the request's trace failed with ``reason``: the one on disk when readable, else a new one."""
        if item.problem is not None:
            return
        try:  # the folder may be what failed (a link out of OUT): then the journal alone says why
            path = self.store.request_dir(item.id) / TRACE_FILE
            trace = read_trace(path)
            if trace is None or trace.request.id not in (None, item.id):
                trace = failed_trace(item.id, item.prompt, reason, item.task)
            trace.status, trace.error = (
                "failed",
                one_line(f"{item.where}: {reason}" if item.where else reason),
            )
            write_atomic(path, trace_json(trace))
            write_documents(trace, path.parent)
        except Exception as exc:  # the journal line (and the summary) still say why
            logger.error("trace of %s not written: %s", one_line(item.id, 80), failure_reason(exc))

    def _restore_pages(self, item: BatchItem) -> None:
        restore_finished(self.store, item, self.pipeline.config.notice)


def restore_finished(store: RunStore, item: BatchItem, notice: str | None) -> None:
    """Write the pages of a finished request again when a kill came before they were written."""
    if item.problem is not None:
        return
    try:
        restore_pages(store.request_dir(item.id), notice)
    except Exception as exc:
        logger.warning("pages of %s not rebuilt: %s", one_line(item.id, 80), failure_reason(exc))


def batch_runner(cfg: PipelineConfig, out: Path, settings: BatchSettings) -> BatchRunner:
    """The runner of `batch`: the pipeline of ``cfg`` over the run store in ``out`` (a cluster worker
    builds its own with this)."""
    return BatchRunner(Pipeline.from_config(cfg), RunStore(out), settings)
