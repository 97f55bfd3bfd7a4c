"""The batch scheduler: many requests in flight, every backend kept busy up to its own limit.

An asyncio loop admits up to ``concurrency`` requests; each runs the ordinary step loop in a worker
thread (so steps of one request stay ordered and the loop code is the one `run` uses), and every
backend call passes a per-backend limiter that may micro-batch it with calls from other requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from interleave_thinker.backends.protocols import ImageBackend, VLMBackend
from interleave_thinker.core.errors import InterleaveThinkerError, PlanningError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.types import Request, Trace
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.limits import BackendStats, LimitedImage, LimitedVLM
from interleave_thinker.runtime.pipeline import Pipeline
from interleave_thinker.runtime.recorder import TRACE_FILE
from interleave_thinker.runtime.store import RunStore

LOCAL_KINDS = ("transformers", "diffusers", "tiny")


@dataclass
class BatchSettings:
    concurrency: int = 16
    limits: dict[str, int] = field(default_factory=dict)
    micro_batch: set[str] = field(default_factory=set)
    max_wait: float = 0.005


def default_limit(spec: str, remote_concurrency: int, micro_batch: bool) -> int:
    if spec.split(":", 1)[0] in LOCAL_KINDS:
        return 8 if micro_batch else 1
    return remote_concurrency


def limited_pipeline(pipe: Pipeline, settings: BatchSettings) -> tuple[Pipeline, dict[str, BackendStats]]:
    """The same pipeline with each backend behind a limiter (planner and critic share one if they share a model)."""
    config = pipe.config
    stats: dict[str, BackendStats] = {}

    def vlm(role: str, backend: VLMBackend, spec: str) -> VLMBackend:
        batch = role in settings.micro_batch
        limit = settings.limits.get(role, default_limit(spec, config.remote.concurrency, batch))
        stats[role] = BackendStats(role, limit)
        return LimitedVLM(backend, stats[role], micro_batch=batch, max_wait=settings.max_wait)

    planner = vlm("planner", pipe.planner_backend, config.planner)
    if pipe.critic_backend is pipe.planner_backend:
        critic = planner
    else:
        critic = vlm("critic", pipe.critic_backend, config.critic)
    batch = "generator" in settings.micro_batch
    limit = settings.limits.get(
        "generator", default_limit(config.generator, config.remote.concurrency, batch)
    )
    stats["generator"] = BackendStats("generator", limit)
    generator: ImageBackend = LimitedImage(
        pipe.generator, stats["generator"], micro_batch=batch, max_wait=settings.max_wait
    )
    limited = Pipeline(
        planner=planner, critic=critic, generator=generator, config=config, templates=pipe.templates
    )
    return limited, stats


@dataclass
class BatchOutcome:
    finished: dict[str, str]
    skipped: int
    wall_s: float
    stats: dict[str, BackendStats]


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

    def run(self, items: list[BatchItem]) -> BatchOutcome:
        return asyncio.run(self.arun(items))

    async def arun(self, items: list[BatchItem]) -> BatchOutcome:
        already = self.store.finished()
        todo = [item for item in items if item.id not in already]
        slots = asyncio.Semaphore(self.settings.concurrency)
        finished: dict[str, str] = {}
        start = time.perf_counter()

        loop = asyncio.get_running_loop()
        # One worker thread per request in flight (the default executor has only a few on small machines).
        with ThreadPoolExecutor(
            max_workers=self.settings.concurrency, thread_name_prefix="request"
        ) as workers:

            async def one(item: BatchItem) -> None:
                async with slots:
                    status = await loop.run_in_executor(workers, self._run_one, item)
                finished[item.id] = status
                self.on_done(item.id, status)

            await asyncio.gather(*(one(item) for item in todo))
        return BatchOutcome(finished, len(items) - len(todo), time.perf_counter() - start, self.stats)

    def _run_one(self, item: BatchItem) -> str:
        out = self.store.request_dir(item.id)
        try:
            result = self.pipeline(
                item.prompt, list(item.images), out_dir=out, request_id=item.id, task=item.task, resume=True
            )
            status = result.trace.status
        except PlanningError:
            status = "failed"
        except InterleaveThinkerError as exc:
            # Bad input for this one request (e.g. a missing image): record it, keep the batch going.
            trace = Trace(
                request=Request(text=item.prompt, images=list(item.images), id=item.id, task=item.task)
            )
            trace.status, trace.error = "failed", f"{item.where}: {exc}"
            write_atomic(out / TRACE_FILE, trace.model_dump_json(indent=2))
            status = "failed"
        self.store.mark(item.id, status)
        return status
