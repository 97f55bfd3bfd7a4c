"""Per-backend concurrency limits, call statistics and cross-request micro-batching.

Requests run in greenlets on the batch's event loop (see :mod:`interleave_thinker.core.green`); every
backend call goes through one of these wrappers, which bounds the calls in flight (a semaphore a
greenlet waits on without blocking the loop), records latency and busy time for the batch summary, and,
for local models that batch exactly, gathers concurrent calls into one batched call.

Where a call runs: a served backend whose blocking points are cooperative (``cooperative = True``, every
``httpx`` backend) runs in the request's greenlet, suspended while its reply is on the wire. Any other
backend (a local model's forward pass, an SDK that blocks) runs in a small executor of ``limit``
threads, awaited from the greenlet, so the loop never stops for it; micro-batched calls run on the
batcher's one dispatcher thread. Outside a batch (``run``, the Python API) the wrappers call straight
through.

A served backend's transport has its own slots (``remote.concurrency``); the wrapper sets them to the
same limit (``RemoteBackend.set_concurrency``), so ``--per-backend-limit generator=64`` means 64 calls
on the wire, not 64 waiting for the transport's default 8 (two limiters over one transport, as when
`data generate` meters planner and critic apart, give it the sum of theirs). The served members are
read through any wrapper in between (:class:`~interleave_thinker.backends.wrapping.Wrapper`).
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Unpack

from PIL import Image

from interleave_thinker.backends.protocols import (
    ChatCall,
    ChatOptions,
    ImageBackend,
    ImageBatchMixin,
    ImageRequest,
    Message,
    VLMBackend,
)
from interleave_thinker.backends.wrapping import (
    VLMWrapper,
    Wrapper,
    concurrency_setter,
    innermost,
    is_cooperative,
)
from interleave_thinker.core import green
from interleave_thinker.core.stats import latency_percentiles
from interleave_thinker.runtime.speculation import SPECULATIVE


@dataclass
class BackendStats:
    role: str
    limit: int
    calls: int = 0
    failed: int = 0
    """Calls among ``calls`` that raised (no reply, an error): counted apart, never as answers."""
    batches: int = 0
    busy_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, seconds: float, calls: int = 1) -> None:
        with self._lock:
            self.calls += calls
            self.batches += 1
            self.busy_s += seconds
            self.latencies.extend([seconds] * calls)

    def record_failure(self, seconds: float, calls: int = 1) -> None:
        with self._lock:
            self.calls += calls
            self.failed += calls
            self.busy_s += seconds

    def since(
        self, mark: tuple[int, int, int, float, int]
    ) -> tuple[dict[str, Any], tuple[int, int, int, float, int]]:
        """What was recorded after ``mark`` (``(0, 0, 0, 0.0, 0)`` at first) and the mark of now: a cluster
        worker sends these deltas with each finished request, so a lost node's calls are still counted."""
        with self._lock:
            now = (self.calls, self.failed, self.batches, self.busy_s, len(self.latencies))
            delta = {
                "calls": now[0] - mark[0],
                "failed": now[1] - mark[1],
                "batches": now[2] - mark[2],
                "busy_s": now[3] - mark[3],
                "latencies": self.latencies[mark[4] :],
            }
        return delta, now

    def add(self, delta: dict[str, Any]) -> None:
        """Count a delta of :meth:`since` (from another process) in."""
        with self._lock:
            self.calls += int(delta["calls"])
            self.failed += int(delta["failed"])
            self.batches += int(delta["batches"])
            self.busy_s += float(delta["busy_s"])
            self.latencies.extend(float(x) for x in delta["latencies"])

    def summary(self, wall: float) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "failed": self.failed,
            "batched_calls": self.batches,
            "limit": self.limit,
            **latency_percentiles(self.latencies, "latency_"),
            "utilisation": round(self.busy_s / (wall * self.limit), 4) if wall > 0 else 0.0,
        }


class MicroBatcher:
    """Collects calls from many requests for up to ``max_wait`` seconds (or ``max_batch`` calls) and runs
    each group of compatible calls (equal ``key``) as one batched call on a dispatcher thread."""

    def __init__(
        self, run_batch: Callable[[Any, list[Any]], list[Any]], *, max_batch: int = 8, max_wait: float = 0.005
    ) -> None:
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait = max_wait
        self._queue: queue.Queue[tuple[Hashable, Any, Future[Any]]] = queue.Queue()
        self._thread = threading.Thread(target=self._dispatch, name="micro-batcher", daemon=True)
        self._thread.start()

    def submit(self, key: Hashable, payload: Any) -> Any:
        future: Future[Any] = Future()
        self._queue.put((key, payload, future))
        return green.result(future)

    def _dispatch(self) -> None:
        held: list[tuple[Hashable, Any, Future[Any]]] = []
        while True:
            if not held:
                held.append(self._queue.get())
            deadline = time.monotonic() + self.max_wait
            while len(held) < self.max_batch * 4:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    held.append(self._queue.get(timeout=left))
                except queue.Empty:
                    break
            key = held[0][0]
            group = [item for item in held if item[0] == key][: self.max_batch]
            held = [item for item in held if item not in group]
            group = [item for item in group if item[2].set_running_or_notify_cancel()]  # not cancelled
            if not group:
                continue
            try:
                results = self.run_batch(key, [payload for _, payload, _ in group])
                for (_, _, future), result in zip(group, results, strict=True):
                    future.set_result(result)
            except BaseException as exc:  # the callers see the backend's own error
                for _, _, future in group:
                    if not future.done():
                        future.set_exception(exc)


_SHARES: weakref.WeakKeyDictionary[Any, weakref.WeakSet[_Limited]] = weakref.WeakKeyDictionary()
"""The live limiters over each transport. Why: `data generate` meters planner and critic apart, so one
loaded backend gets two limiters; its transport takes the sum of their limits, not the last one set
(``--per-backend-limit planner=32`` with the critic's default 8 used to leave 8 slots for both)."""
_SHARES_LOCK = threading.Lock()


class _Limited(Wrapper):
    """What both wrappers share: the inner backend, the slots bounding calls in flight, the executor
    for blocking calls, the optional micro-batcher, timing into ``stats``, and ``close``. The members
    of a served backend are forwarded by :class:`Wrapper`."""

    def __init__(self, inner: Any, stats: BackendStats, *, micro_batch: bool, max_wait: float) -> None:
        super().__init__(inner, name=inner.name)
        self.stats = stats
        self._slots = green.Semaphore(stats.limit)
        self._cooperative = is_cooperative(inner)
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._share_transport()
        self._batcher = (
            MicroBatcher(self._run_batch, max_batch=stats.limit, max_wait=max_wait) if micro_batch else None
        )

    def _call(self, fn: Callable[[], Any]) -> Any:
        """One call within a slot, timed; a blocking one off the event loop (see the module doc)."""
        with self._slots:
            start = time.perf_counter()
            try:
                result = fn() if self._cooperative else green.call_blocking(self._threads, fn)
            except Exception:
                self.stats.record_failure(time.perf_counter() - start)
                raise
            self.stats.record(time.perf_counter() - start)
        return result

    def _threads(self) -> Executor:
        """The executor of blocking calls, made at the first one: ``limit`` threads at most, and only
        as many as calls overlap (a served backend never makes it)."""
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.stats.limit, thread_name_prefix=self.stats.role)
            return self._executor

    def _timed_batch(self, fn: Callable[[], list[Any]], calls: int) -> list[Any]:
        start = time.perf_counter()
        try:
            results = fn()
        except Exception:
            self.stats.record_failure(time.perf_counter() - start, calls)
            raise
        self.stats.record(time.perf_counter() - start, calls)
        return results

    def _run_batch(self, key: Any, payloads: list[Any]) -> list[Any]:
        raise NotImplementedError

    def _share_transport(self, leaving: bool = False) -> None:
        """Give a served backend's transport the sum of the limits of the live limiters over it (one
        limiter: its limit, one number end to end)."""
        resize = concurrency_setter(self.inner)
        if resize is None:
            return
        transport = innermost(self.inner)
        with _SHARES_LOCK:
            try:
                limiters = _SHARES.setdefault(transport, weakref.WeakSet())
            except TypeError:  # not weakly referable: this limiter alone sets it
                limiters = weakref.WeakSet()
            if leaving:
                limiters.discard(self)
            else:
                limiters.add(self)
            total = sum(limiter.stats.limit for limiter in limiters)
        if total:
            resize(total)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._share_transport(leaving=True)
        super().close()


class LimitedVLM(_Limited, VLMWrapper):
    def __init__(
        self, inner: VLMBackend, stats: BackendStats, *, micro_batch: bool = False, max_wait: float = 0.005
    ):
        super().__init__(inner, stats, micro_batch=micro_batch, max_wait=max_wait)

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        call = ChatCall(**options)
        if self._batcher is not None and call.temperature == 0:
            return str(self._batcher.submit(call.max_new_tokens, messages))
        return str(
            self._call(lambda: self.forward_chat(messages, call.max_new_tokens, call.temperature, call.seed))
        )

    def _run_batch(self, key: Any, payloads: list[Any]) -> list[Any]:
        """Greedy calls with equal ``max_new_tokens`` (the key) share a batch; left-padded greedy replies
        equal single ones."""
        return self._timed_batch(
            lambda: self.inner.chat_batch(payloads, max_new_tokens=key, temperature=0.0), len(payloads)
        )


class LimitedImage(_Limited, ImageBatchMixin):
    """The generator's limiter; calls made ahead (``loop.speculate``) hold at most ``speculate_share`` of
    its slots at once (at least one), so they never crowd out the calls the loop waits for."""

    def __init__(
        self,
        inner: ImageBackend,
        stats: BackendStats,
        *,
        micro_batch: bool = False,
        max_wait: float = 0.005,
        speculate_share: float = 1.0,
    ):
        super().__init__(inner, stats, micro_batch=micro_batch, max_wait=max_wait)
        ahead = max(1, int(stats.limit * speculate_share))
        self._ahead = green.Semaphore(ahead) if ahead < stats.limit else None

    def generate(self, request: ImageRequest) -> Image.Image:
        if self._ahead is not None and SPECULATIVE.get():
            with self._ahead:
                return self._generate(request)
        return self._generate(request)

    def _generate(self, request: ImageRequest) -> Image.Image:
        if self._batcher is not None and request.image is None:
            result: Image.Image = self._batcher.submit(request.settings, request)
            return result
        output: Image.Image = self._call(lambda: self.inner.generate(request))
        return output

    def _run_batch(self, key: Any, payloads: list[Any]) -> list[Any]:
        return self._timed_batch(lambda: self.inner.generate_batch(payloads), len(payloads))
