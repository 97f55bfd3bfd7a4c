"""Generate a benchmark's outputs with the agents (``agentic``) or the generator alone (``base``).

One run folder ``OUT`` holds everything: the batch run store (``requests/<id>/trace.json`` and images,
``journal.jsonl``, ``batch.json``; resumable like ``interleave-thinker batch``), the benchmark's official
layout (see :mod:`interleave_thinker.eval.layouts`) and ``eval.json`` (benchmark, mode, data, backends,
settings, which items have an output and which are missing, and the ``ids`` of a slice), which ``eval
report`` and ``eval score`` read. A run with nothing left to do loads no model (:func:`unfinished`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interleave_thinker.agents.messages import count_image_markers
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.paths import write_atomic
from interleave_thinker.core.run_folder import TRACE_FILE, load_trace
from interleave_thinker.eval.base_mode import base_config, base_pipeline
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.eval.layouts import write_item_image, write_layout
from interleave_thinker.runtime.batch_inputs import BatchItem, batch_manifest
from interleave_thinker.runtime.failures import one_line
from interleave_thinker.runtime.fallbacks import fallback_counts
from interleave_thinker.runtime.opt_in import opt_in_counts
from interleave_thinker.runtime.pipeline import Pipeline
from interleave_thinker.runtime.resume import pending, restore_pages
from interleave_thinker.runtime.scheduler import BatchOutcome, BatchRunner, BatchSettings
from interleave_thinker.runtime.store import RunStore

if TYPE_CHECKING:
    from interleave_thinker.eval.benchmark import Benchmark
    from interleave_thinker.runtime.cluster import ClusterRunner

logger = logging.getLogger(__name__)
EVAL_MANIFEST = "eval.json"
MODES = ("agentic", "base")


@dataclass(frozen=True)
class GenerationRun:
    """What to generate and where; ``config`` is the agentic config (base mode derives its own).
    ``total`` is the number of items in ``data`` before ``--limit``/``--ids``/``--shard`` chose ``items``."""

    benchmark: Benchmark
    mode: str
    data: str
    out: Path
    items: list[EvalItem]
    config: PipelineConfig
    total: int | None = None

    @property
    def effective_config(self) -> PipelineConfig:
        return base_config(self.config) if self.mode == "base" else self.config


def request_text(item: EvalItem) -> str:
    """The benchmark prompt (never WISE's ``Explanation``), input images marked first as guidance requests."""
    missing = len(item.images) - count_image_markers(item.prompt)
    return "<image>" * missing + item.prompt if missing > 0 else item.prompt


def batch_items(items: list[EvalItem]) -> list[BatchItem]:
    """Requests for the scheduler, one per item, with the item's id as the request folder."""
    return [
        BatchItem(id=i.id, prompt=request_text(i), images=i.images, task=i.category, where=i.where)
        for i in items
    ]


def settings_record(run: GenerationRun) -> dict[str, Any]:
    """What a resumed run must share with the first one (else RunStore refuses to mix them)."""
    cfg = run.effective_config.model_dump(mode="json")
    record = {k: cfg[k] for k in ("planner", "critic", "generator", "loop", "generation")}
    record["eval"] = {"benchmark": run.benchmark.name, "mode": run.mode}
    return record


def open_store(run: GenerationRun, *, resume: bool, accept_changed: bool = False) -> RunStore:
    """Check the mode and open (or continue) the run store; nothing heavy is loaded yet."""
    if run.mode not in MODES:
        raise InputError(f"--mode {run.mode!r}: choose agentic or base.")
    store = RunStore(run.out)
    manifest = batch_manifest(run.data, batch_items(run.items), settings_record(run))
    store.open(manifest, resume=resume, accept_changed=accept_changed)
    for leftover in [*run.out.glob(".*.tmp"), *run.out.glob("images/*/.*.tmp")]:
        leftover.unlink()  # a layout file whose write a kill interrupted (the rename never happened)
    return store


def unfinished(run: GenerationRun, store: RunStore, *, retry_failed: bool = False) -> int:
    """Items still to run (as the scheduler will choose them): 0 means nothing to load a model for."""
    return len(pending(batch_items(run.items), store.finished(), retry_failed=retry_failed))


def finish_without_models(run: GenerationRun, store: RunStore) -> dict[str, Any]:
    """A finished run again: pages a kill left unwritten, the layout and ``eval.json``; no model loaded."""
    for item in run.items:
        try:
            restore_pages(store.request_dir(item.id), run.effective_config.notice)
        except Exception as exc:  # as the scheduler does: a page not rebuilt does not stop the layout
            logger.warning("pages of %s not rebuilt: %s", item.id, exc)
    return finish(run, store)


def load_pipeline(run: GenerationRun) -> Pipeline:
    return base_pipeline(run.effective_config) if run.mode == "base" else Pipeline.from_config(run.config)


def eval_runner(run: GenerationRun, root: Path, settings: BatchSettings) -> BatchRunner:
    """The runner of one generation over the run store in ``root`` (a cluster worker builds its own)."""
    return BatchRunner(load_pipeline(run), RunStore(root), settings)


def execute(
    run: GenerationRun,
    store: RunStore,
    runner: BatchRunner | ClusterRunner,
    on_done: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """Run every item not yet finished with ``runner`` (this process's, or a cluster's), write the
    official layout, and return the ``eval.json`` record."""
    by_id = {item.id: item for item in run.items}

    def done(item_id: str, status: str) -> None:
        # The layout grows as items finish, so a killed run already has its finished outputs in place.
        trace_path = store.request_dir(item_id) / TRACE_FILE
        layout = run.benchmark.layout
        if not layout.submission and status == "succeeded" and trace_path.is_file():
            trace = load_trace(trace_path)
            write_item_image(layout, run.out, store, by_id[item_id], trace)
        if on_done is not None:
            on_done(item_id, status)

    runner.on_done = done
    try:
        outcome = runner.run(batch_items(run.items))
    finally:
        runner.close()
    return finish(run, store, outcome)


def finish(run: GenerationRun, store: RunStore, outcome: BatchOutcome | None = None) -> dict[str, Any]:
    """Write the full layout and ``eval.json`` from the traces on disk (earlier runs' included)."""
    traces = store.traces()
    mine = [traces[item.id] for item in run.items if item.id in traces]
    statuses = Counter(trace.status for trace in mine)
    failures = Counter(one_line(t.error or "unknown", 160) for t in mine if t.status == "failed")
    layout = write_layout(run.benchmark.layout, run.out, store, run.items, traces, mode=run.mode)
    cfg = run.effective_config
    total = run.total if run.total is not None else len(run.items)
    record: dict[str, Any] = {
        "benchmark": run.benchmark.name,
        "mode": run.mode,
        "data": run.data,
        "protocol": run.items[0].protocol if run.items else None,
        "backends": {"planner": cfg.planner, "critic": cfg.critic, "generator": cfg.generator},
        "generation": cfg.generation.model_dump(mode="json"),
        "loop": cfg.loop.trace_settings(),
        "preset": run.config.preset,
        "items": len(run.items),
        "items_in_data": total,
        "ids": [item.id for item in run.items] if len(run.items) < total else None,
        "written": len(layout["written"]),
        "missing": layout["missing"],
        "wall_s": round(outcome.wall_s, 3) if outcome is not None else None,
        "skipped_already_finished": outcome.skipped if outcome is not None else None,
        "requests": {"total": len(mine), "succeeded": statuses["succeeded"], "failed": statuses["failed"]},
        "failure_reasons": dict(failures.most_common(5)),
        "fallbacks": fallback_counts(mine),
        "opt_in": opt_in_counts(mine),
    }
    if outcome is not None and outcome.stopped is not None:
        record["stopped"] = outcome.stopped
    write_atomic(run.out / EVAL_MANIFEST, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return record
