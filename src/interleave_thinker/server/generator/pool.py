"""The worker pool of the generator service: a bounded queue in the web process, one process per device.

Why a feeder thread per worker instead of a queue shared by the processes: the web process then knows
exactly which job each worker holds, so a worker that dies fails precisely its own request (and is
restarted), queue depth and in-flight counts are exact, and a job whose client gave up is dropped
before it reaches a worker. Jobs go over a ``spawn``-context pipe per worker (no fork of a process
with threads, CUDA contexts or an event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from interleave_thinker.core.errors import BackendError
from interleave_thinker.server.generator.settings import ServiceSettings
from interleave_thinker.server.generator.worker import worker_main

logger = logging.getLogger(__name__)

Reply = dict[str, Any]


class QueueFull(Exception):
    """Every worker is busy and the queue holds ``queue_size`` requests (or the service is stopping)."""


class JobTimeout(Exception):
    """The request's deadline passed before a worker answered."""


class ClientGone(Exception):
    """The client closed its connection before a worker answered."""


DISCONNECT_POLL_S = 0.25


@dataclass(eq=False)
class Job:
    message: dict[str, Any]
    future: asyncio.Future[Reply]
    loop: asyncio.AbstractEventLoop
    submitted: float = field(default_factory=time.monotonic)
    dispatched: float | None = None
    abandoned: bool = False
    released: bool = False
    """Whether the job no longer counts as queued (dispatched, dropped or failed at shutdown)."""

    def resolve(self, reply: Reply) -> None:
        """Called from a feeder thread; hands the reply to the event loop that waits for it."""

        def settle() -> None:
            if not self.future.done():
                self.future.set_result(reply)

        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self.loop.call_soon_threadsafe(settle)


class WorkerSlot:
    """One worker process plus the thread that feeds it jobs and restarts it when it dies."""

    def __init__(self, pool: WorkerPool, index: int, device: str) -> None:
        self.pool = pool
        self.index = index
        self.device = device
        self.state = "starting"
        self.pid: int | None = None
        self.backend_name: str | None = None
        """The loaded backend's name (``diffusers:<checkpoint>``), listed as the model's root."""
        self.error: str | None = None
        self.started = 0
        """Jobs the process acknowledged and began: a job killed before that is retried, not failed."""
        self.completed = 0
        self.failed = 0
        self.restarts = 0
        self.loaded = threading.Event()
        self._process: BaseProcess | None = None
        self._loading: BaseProcess | None = None
        self._conn: Connection | None = None
        self.thread = threading.Thread(target=self._run, name=f"generator-worker-{index}", daemon=True)

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "device": self.device,
            "pid": self.pid,
            "state": self.state,
            "started": self.started,
            "completed": self.completed,
            "failed": self.failed,
            "restarts": self.restarts,
            "error": self.error,
        }

    # --- process life cycle -------------------------------------------------------------------
    def _spawn(self) -> bool:
        """Start the process and wait until it loaded the backend; False (and ``error``) when it could not."""
        settings = self.pool.settings
        context = multiprocessing.get_context("spawn")
        parent_end, child_end = context.Pipe()
        args = (
            settings.generator,
            self.device,
            settings.threads_for(self.device),
            settings.max_pixels,
            child_end,
            settings.dtype,
        )
        process = context.Process(target=worker_main, args=args, name=f"generator-worker-{self.index}")
        process.start()
        child_end.close()
        self.pid, self._loading = process.pid, process
        logger.info(
            "worker %d: loading %s on %s (pid %s)", self.index, settings.generator, self.device, process.pid
        )
        try:
            hello = parent_end.recv()
        except (EOFError, OSError):
            process.join(5)
            hello = {
                "event": "failed",
                "error": f"the process exited with code {process.exitcode} while loading",
            }
        self._loading = None
        if hello.get("event") != "ready":
            self.error = str(hello.get("error"))
            parent_end.close()
            self._end(process)
            return False
        self._process, self._conn, self.error = process, parent_end, None
        self.backend_name = str(hello.get("name") or "")[:500] or None
        logger.info("worker %d: ready (%s on %s)", self.index, hello.get("name"), self.device)
        return True

    @staticmethod
    def _end(process: BaseProcess, grace: float = 5.0) -> int | None:
        process.join(grace)
        if process.is_alive():  # workers ignore SIGTERM on purpose, so only SIGKILL ends a stuck one
            process.kill()
            process.join(grace)
        code = process.exitcode
        if code is not None:  # close() refuses a process that is somehow still running
            process.close()
        return code

    def _reap(self, grace: float = 1.0) -> int | None:
        """Forget a dead (or to-be-ended) process and return its exit code; only the feeder thread calls it."""
        code = None
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            code = self._end(self._process, grace)
        self._process, self._conn = None, None
        return code

    def _stop_process(self) -> None:
        """Ask the idle worker to exit; kill it if it does not."""
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send(None)
        self._reap(grace=5.0)
        self.state = "stopped"

    def kill(self) -> None:
        """From another thread: end a worker stuck in a job; its feeder then sees the pipe close."""
        for process in (self._process, self._loading):
            if process is not None:
                with contextlib.suppress(ValueError):  # closed meanwhile by the feeder
                    process.kill()

    # --- feeding ------------------------------------------------------------------------------
    def _run(self) -> None:
        loaded = self._spawn()
        self.loaded.set()
        if not loaded:
            self.state = "failed"
            return
        failures = 0
        while True:
            if self._process is None:
                if self.pool.stopping.is_set():
                    return
                self.state = "restarting"
                self.restarts += 1
                if not self._spawn():
                    failures += 1
                    self.state = "failed"
                    logger.error("worker %d: restart failed: %s", self.index, self.error)
                    self.pool.stopping.wait(min(30.0, 2.0**failures))
                    continue
                failures = 0
            self.state = "idle"
            job = self.pool.next_job()
            if job is None:
                self._stop_process()
                return
            self.state = "busy"
            self._handle(job)

    def alive(self) -> bool:
        """Whether the worker process is up (a SIGKILLed idle worker is noticed here, not at its next job)."""
        process = self._process
        try:
            return process is not None and process.is_alive()
        except ValueError:  # closed meanwhile by the feeder
            return False

    def _handle(self, job: Job) -> None:
        assert self._conn is not None
        try:
            if not self.alive():
                raise OSError("the worker is not running")
            self._conn.send(job.message)
            started = self._conn.recv()  # the worker's acknowledgement, before any work
        except (EOFError, OSError):  # died while idle: the job never started, so another try is safe
            logger.warning("worker %d (pid %s) was dead when given a job; retrying it", self.index, self.pid)
            self._reap()
            self.state = "restarting"
            self.pool.requeue(job)
            return
        reply: Reply
        if started.get("event") == "started":
            self.started += 1
        try:
            reply = started if started.get("event") != "started" else self._conn.recv()
        except (EOFError, OSError):
            pid, code = self.pid, self._reap()
            reply = {
                "ok": False,
                "kind": "crash",
                "error": f"generator worker {self.index} (pid {pid}, {self.device}) died while generating "
                f"(exit code {code}); it is being restarted",
            }
            logger.error("%s", reply["error"])
        if reply.get("ok"):
            self.completed += 1
        else:
            self.failed += 1
        self.state = "idle" if self._process is not None else "restarting"
        self.pool.finish(job, reply)


class WorkerPool:
    """Admission (``workers + queue_size`` requests at most), dispatch, timeouts and shutdown."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.capacity = settings.workers + settings.queue_size
        self.stopping = threading.Event()
        self.started = False
        self.queued = 0
        self.in_flight = 0
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self.slots = [WorkerSlot(self, i, device) for i, device in enumerate(settings.devices)]

    def start(self, abort: Callable[[], bool] = lambda: False) -> bool:
        """Spawn every worker and wait until each loaded; False (pool stopped) when ``abort()`` turns true
        meanwhile, e.g. on SIGTERM. Blocking: call it from a thread inside an event loop."""
        self.started = True
        for slot in self.slots:
            slot.thread.start()
        for slot in self.slots:
            while not slot.loaded.wait(0.2):
                if abort():
                    self.stop(grace=0.0)
                    return False
        failed = [slot for slot in self.slots if slot.state == "failed"]
        if failed:
            self.stop()
            slot = failed[0]
            raise BackendError(
                f"Generator worker {slot.index} on {slot.device} could not load "
                f"'{self.settings.generator}': {slot.error}"
            )
        return True

    async def submit(
        self,
        message: dict[str, Any],
        timeout: float,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> tuple[Reply, Job]:
        """Queue one job and wait for its reply; :class:`QueueFull`, :class:`JobTimeout` or
        :class:`ClientGone` (``gone()`` turned true) otherwise. A job given up on leaves the queue's
        count at once, so its place goes to the next client, and never reaches a worker."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.stopping.is_set():
                raise QueueFull("the service is shutting down")
            if self.queued + self.in_flight >= self.capacity:
                raise QueueFull(
                    f"all {self.settings.workers} workers are busy and {self.queued} requests are queued "
                    f"(--queue-size {self.settings.queue_size})"
                )
            self.queued += 1
        job = Job(message, loop.create_future(), loop)
        self._jobs.put(job)
        deadline = loop.time() + timeout
        try:
            while not job.future.done():
                left = deadline - loop.time()
                if left <= 0:
                    raise JobTimeout(f"no reply within {timeout:.3g}s")
                await asyncio.wait({job.future}, timeout=min(DISCONNECT_POLL_S, left))
                if not job.future.done() and gone is not None and await gone():
                    raise ClientGone("the client closed the connection")
            return job.future.result(), job
        finally:
            if not job.future.done():
                with self._lock:
                    job.abandoned = True
                    self._release(job)

    def _release(self, job: Job) -> None:
        """Stop counting ``job`` as queued (once); call with the lock held."""
        if not job.released:
            job.released = True
            self.queued -= 1

    def next_job(self) -> Job | None:
        """Blocking; the next job whose client still waits, or None when the pool stops."""
        while True:
            job = self._jobs.get()
            if job is None:
                return None
            with self._lock:
                self._release(job)
                if job.abandoned:
                    continue
                self.in_flight += 1
                job.dispatched = time.monotonic()
            return job

    def finish(self, job: Job, reply: Reply) -> None:
        with self._lock:
            self.in_flight -= 1
        job.resolve(reply)

    def requeue(self, job: Job) -> None:
        with self._lock:
            self.in_flight -= 1
            if job.abandoned:
                return
            self.queued += 1
            job.released = False
        self._jobs.put(job)

    def stop(self, grace: float = 10.0) -> None:
        """Stop taking jobs, fail the ones still queued, let workers finish their current job, end them."""
        with self._lock:
            self.stopping.set()
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                with self._lock:
                    self._release(job)
                job.resolve({"ok": False, "kind": "shutdown", "error": "the service is shutting down"})
        for _ in self.slots:
            self._jobs.put(None)
        deadline = time.monotonic() + grace
        for slot in self.slots:
            if slot.thread.is_alive():
                slot.thread.join(max(0.0, deadline - time.monotonic()))
        for slot in self.slots:
            if slot.thread.is_alive():  # still generating (or loading) after the grace period
                slot.kill()
                slot.thread.join(5.0)

    def ready_workers(self) -> int:
        """Workers up and serving; a process that died is not counted even before its feeder notices."""
        return sum(slot.state in ("idle", "busy") and slot.alive() for slot in self.slots)

    def describe(self) -> dict[str, Any]:
        with self._lock:
            queued, in_flight = self.queued, self.in_flight
        return {
            "queue_depth": queued,
            "in_flight": in_flight,
            "capacity": self.capacity,
            "workers": [slot.describe() for slot in self.slots],
        }
