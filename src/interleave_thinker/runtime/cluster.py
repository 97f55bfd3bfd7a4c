"""The batch scheduler across the nodes of a Ray cluster (``--ray ADDRESS``); imported only with ``--ray``.

The driver (the command's own process) reads the input, holds the run folder's lock and writes the
journal; it never loads a model. Its workers are Ray actors pinned to nodes: with served backends one
orchestrating worker per node (no resources claimed, no torch imported), with a local model one worker
per GPU (``num_gpus=1``; one per node with ``num_cpus=1`` on a cluster without GPUs). Each worker builds
the ordinary :class:`~interleave_thinker.runtime.scheduler.BatchRunner` once and runs every request it
is handed with :meth:`~interleave_thinker.runtime.scheduler.BatchRunner.execute`, in a greenlet on the
actor's event loop, exactly as one process would: same pipeline, same per-backend limits (now per
worker), same step-granular trace in ``OUT/requests/<id>/``.

One owner per request: the driver hands a request to one worker and to no other until Ray reports that
worker dead (its node lost; a worker reported unreachable is ended first); then the request goes to a
survivor, which continues the trace on the shared ``OUT`` after its last complete step
(:func:`~interleave_thinker.runtime.resume.resume_recorder`), so a finished step's calls are never made
again. The driver writes the journal line when a worker answers, so a driver killed and started again
with the same command skips what was journaled and resumes the rest. The workers are named after the
folder (``OUT``'s lock is the driver's alone): a driver started on it first ends the workers a killed
driver left running, and waits until Ray has them gone, before it starts its own.

A worker sends the backend statistics and the judgements (``agents.max_fallback_share``) counted since
its last answer with each answer, so the summary counts a lost node's calls too, and the driver stops
handing out requests past the tolerated share as one process stops starting them.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interleave_thinker.backends.specs import is_local
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.core.green import finish_loop, run_green
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.failures import failure_reason, one_line
from interleave_thinker.runtime.fallbacks import FallbackBound
from interleave_thinker.runtime.limits import BackendStats
from interleave_thinker.runtime.scheduler import BatchOutcome, BatchRunner, BatchSettings, restore_finished
from interleave_thinker.runtime.store import RunStore

try:
    import ray
    from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:  # pragma: no cover - the extra installed in dev
    raise ConfigError("--ray needs Ray: pip install 'interleave-thinker[ray]'") from None

logger = logging.getLogger(__name__)
INSTALL_HINT = "pip install 'interleave-thinker[ray]'"
Mark = tuple[int, int, int, float, int]
Judged = Counter[tuple[str, str]]
Answer = tuple[str, str | None, dict[str, dict[str, Any]], Judged]
"""A worker's answer: the request's status and error, then the statistics and judgements since its last."""
NAMESPACE = "interleave-thinker"
"""The Ray namespace of the workers' names (``run-<digest of OUT>-<n>``)."""
GONE_S = 120.0
"""How long a driver waits for Ray to end the workers a killed driver left on its folder."""


def connect(address: str, object_store_mb: int) -> tuple[bool, str | None]:
    """Join (or with ``local`` start) the cluster: ``(started here, dashboard URL or None)``.

    A cluster this process already joined (a test's, a notebook's) is used as it is."""
    if ray.is_initialized():
        return False, _dashboard(None)
    options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": True}
    if address == "local":
        options |= {"object_store_memory": object_store_mb * 1024 * 1024, "include_dashboard": False}
    try:
        context = ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(
            f"--ray {address}: no Ray cluster there ({one_line(str(exc), 160)}); start one with "
            "`ray start --head`, or use --ray local."
        ) from None
    return address == "local", _dashboard(context)


def _dashboard(context: Any) -> str | None:
    """The dashboard's address as ``ray.init`` gave it (None without one: a node of plain ``ray``)."""
    url = str(getattr(context, "dashboard_url", "") or "")
    if not url:
        return None
    return url if url.startswith("http") else f"http://{url}"


class Worker:
    """One worker of the cluster: the batch runner of one node (or one GPU), built once."""

    def __init__(self, make_runner: Callable[[], BatchRunner], local_models: bool) -> None:
        if local_models:  # the driver draws the one progress bar; a worker's loading bars would interleave
            from diffusers.utils import logging as diffusers_logging

            diffusers_logging.disable_progress_bar()
        self.runner = make_runner()
        self.marks: dict[str, Mark] = dict.fromkeys(self.runner.stats, (0, 0, 0, 0.0, 0))
        self.judged: Judged = Counter()

    def ready(self) -> tuple[str, dict[str, int]]:
        """The node this worker runs on and its per-backend limits (the models are loaded by now)."""
        return ray.get_runtime_context().get_node_id(), {r: s.limit for r, s in self.runner.stats.items()}

    async def run(self, item: BatchItem) -> Answer:
        status, error = await run_green(self.runner.execute, item)
        deltas = {}
        for role, stats in self.runner.stats.items():
            deltas[role], self.marks[role] = stats.since(self.marks[role])
        judged = self.runner.bound.counted()
        since, self.judged = judged - self.judged, judged
        return status, error, deltas, since

    async def close(self) -> None:
        try:
            await finish_loop()  # the served backends' connections opened on this actor's loop
        finally:
            self.runner.close()


@dataclass
class _Slot:
    """The driver's view of one worker: its actor, node and the requests it owns now."""

    actor: Any
    node: str
    owns: set[str] = field(default_factory=set)
    alive: bool = True


class ClusterRunner:
    """:class:`BatchRunner`'s face over a Ray cluster: ``todo``, ``run``, ``stats``, ``on_done``, ``close``."""

    def __init__(
        self,
        make_runner: Callable[[], BatchRunner],
        store: RunStore,
        settings: BatchSettings,
        *,
        address: str,
        specs: list[str],
        max_fallback_share: float,
        object_store_mb: int = 128,
        notice: str | None = None,
        on_done: Callable[[str, str], None] | None = None,
    ) -> None:
        self.store, self.settings, self.notice = store, settings, notice
        self.on_done = on_done or (lambda request_id, status: None)
        self.started, self.dashboard = connect(address, object_store_mb)
        self.nodes: dict[str, dict[str, int]] = {}
        self.stats: dict[str, BackendStats] = {}
        self.bound = FallbackBound(max_fallback_share)
        self.slots = self._start(make_runner, any(is_local(spec) for spec in specs))

    # 1. workers ----------------------------------------------------------------------------------------

    def _start(self, make_runner: Callable[[], BatchRunner], local_models: bool) -> list[_Slot]:
        labels = {
            n["NodeID"]: f"{n['NodeManagerAddress']}/{n['NodeID'][:8]}" for n in ray.nodes() if n["Alive"]
        }
        prefix = worker_names(self.store.root)
        _end_earlier(prefix)
        actors = []
        for number, (node_id, resources) in enumerate(_placements(local_models)):
            strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
            remote = ray.remote(Worker).options(
                name=f"{prefix}-{number}",
                namespace=NAMESPACE,
                scheduling_strategy=strategy,
                max_concurrency=self.settings.concurrency + 4,
                **resources,
            )
            actors.append(remote.remote(make_runner, local_models))
        slots = []
        for actor in actors:
            try:
                node_id, limits = ray.get(actor.ready.remote())
            except RayActorError as exc:  # its node went away while it loaded: the others go on
                logger.warning("a Ray worker was lost while loading: %s", failure_reason(exc))
                continue
            except RayTaskError as exc:  # loading failed (a model, a spec): the same on every node
                self._stop(actors)
                raise BackendError(
                    f"a Ray worker could not load its models: {one_line(str(exc), 400)}"
                ) from None
            slots.append(_Slot(actor, labels.get(node_id, node_id[:8])))
            for role, limit in limits.items():
                self.stats.setdefault(role, BackendStats(role, 0)).limit += limit  # the cluster's bound
        if not slots:
            raise BackendError("no Ray worker could start; check `ray status` for live nodes with resources.")
        for slot in slots:
            self.nodes.setdefault(slot.node, {"workers": 0, "succeeded": 0, "failed": 0, "reassigned": 0})
            self.nodes[slot.node]["workers"] += 1
        return slots

    # 2. the requests -----------------------------------------------------------------------------------

    def todo(self, items: list[BatchItem]) -> list[BatchItem]:
        from interleave_thinker.runtime.resume import pending

        return pending(items, self.store.finished(), retry_failed=self.settings.retry_failed)

    def run(self, items: list[BatchItem]) -> BatchOutcome:
        todo = self.todo(items)
        waiting = {item.id for item in todo}
        for item in items:
            if item.id not in waiting:
                restore_finished(self.store, item, self.notice)
        queue: deque[BatchItem] = deque(todo)
        flying: dict[Any, tuple[_Slot, BatchItem]] = {}
        finished: dict[str, str] = {}
        start = time.perf_counter()
        while (queue and self.bound.stopped is None) or flying:
            for slot in self.slots:  # past the tolerated fallbacks none is started: left for the next run
                while slot.alive and queue and len(slot.owns) < self.settings.concurrency:
                    if self.bound.stopped is not None:
                        break
                    item = queue.popleft()
                    slot.owns.add(item.id)
                    flying[slot.actor.run.remote(item)] = (slot, item)
            if not flying:
                raise BackendError(
                    f"every Ray worker was lost; {len(queue)} requests are left: run the same command again "
                    "to resume them."
                )
            done, _ = ray.wait(list(flying), num_returns=1)
            for ref in done:
                slot, item = flying.pop(ref)
                slot.owns.discard(item.id)
                answer = self._answer(ref, slot, item)
                if answer is None:  # its worker is gone: a survivor continues it
                    queue.appendleft(item)
                    continue
                finished[item.id] = answer
                self._done(item.id, answer)
        wall = time.perf_counter() - start
        outcome = BatchOutcome(finished, len(items) - len(todo), wall, self.stats, nodes=self.nodes)
        outcome.stopped = self.bound.final()
        return outcome

    def _answer(self, ref: Any, slot: _Slot, item: BatchItem) -> str | None:
        """The request's status (journaled, counted), or None when its worker was lost."""
        try:
            status, error, deltas, judged = ray.get(ref)
        except RayActorError as exc:
            if slot.alive:
                slot.alive = False
                logger.warning("Ray worker on %s lost; its requests continue on the other nodes.", slot.node)
                if isinstance(exc, ActorUnavailableError):  # maybe still running: end it, one owner only
                    _kill(slot.actor)
            self.nodes[slot.node]["reassigned"] += 1
            return None
        except RayTaskError as exc:  # execute has its own failure boundary; this is Ray's
            status, error, deltas, judged = "failed", one_line(str(exc), 400), {}, Counter()
        for role, delta in deltas.items():
            self.stats.setdefault(role, BackendStats(role, 0)).add(delta)
        self.bound.merge(judged)
        self.nodes[slot.node][status if status in ("succeeded", "failed") else "failed"] += 1
        try:
            self.store.mark(item.id, status, error)
        except Exception as exc:  # e.g. a full disk: the run's summary still counts it
            logger.error("journal line for %s not written: %s", one_line(item.id, 80), failure_reason(exc))
        return status

    def _done(self, item_id: str, status: str) -> None:
        try:
            self.on_done(item_id, status)
        except Exception as exc:  # a progress display must not stop the batch
            logger.warning("progress: %s", failure_reason(exc))

    # 3. the end ----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every live worker's backends, end the workers, and a cluster started here."""
        try:
            self._stop([slot.actor for slot in self.slots if slot.alive])
        finally:
            if self.started:
                ray.shutdown()

    @staticmethod
    def _stop(actors: list[Any]) -> None:
        for actor in actors:
            try:
                ray.get(actor.close.remote(), timeout=60)
            except Exception as exc:  # a lost or stuck worker: ended below all the same
                logger.debug("closing a Ray worker: %s", failure_reason(exc))
            _kill(actor)


def _kill(actor: Any) -> None:
    """End a worker for good (Ray ends its process, or its raylet does once the node is back)."""
    try:
        ray.kill(actor, no_restart=True)
    except Exception as exc:  # already gone
        logger.debug("ending a Ray worker: %s", failure_reason(exc))


def worker_names(root: Path) -> str:
    """The workers' name prefix of the run folder ``root``: the same for every driver started on it."""
    return "run-" + hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]


def _end_earlier(prefix: str) -> None:
    """End the workers an earlier driver of this folder left (killed, its job not yet ended by Ray) and wait
    until Ray has them gone: two workers never write one request."""
    earlier = [
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry.get("namespace") == NAMESPACE and str(entry.get("name", "")).startswith(prefix + "-")
    ]
    for name in earlier:
        logger.warning("ending Ray worker %s, left by an earlier driver of this folder", name)
        if (actor := _actor(name)) is not None:
            _kill(actor)
    deadline = time.monotonic() + GONE_S
    while earlier := [name for name in earlier if _actor(name) is not None]:
        if time.monotonic() > deadline:
            raise BackendError(
                f"Ray workers of an earlier run of this folder are still alive after {GONE_S:.0f}s "
                f"({', '.join(earlier)}); check `ray list actors --namespace {NAMESPACE}`, then run again."
            )
        time.sleep(0.05)


def _actor(name: str) -> Any:
    """The live worker called ``name``, or None."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def _placements(local_models: bool) -> list[tuple[str, dict[str, float]]]:
    """Where the workers go: ``(node id, resources)`` per worker, over the live nodes."""
    placed: list[tuple[str, dict[str, float]]] = []
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        resources = node["Resources"]
        if not local_models:
            placed.append((node["NodeID"], {"num_cpus": 0}))
        elif (gpus := int(resources.get("GPU", 0))) > 0:
            placed += [(node["NodeID"], {"num_gpus": 1, "num_cpus": 0})] * gpus
        elif resources.get("CPU", 0) >= 1:
            placed.append((node["NodeID"], {"num_cpus": 1}))
    return placed
