"""`data generate`: teacher trajectories on the batch scheduler, every attempt judged as it is made.

Why the batch scheduler and not a loop of our own: resume (per step, after a kill), concurrency,
per-backend limits and the failure boundary per request are the batch command's; a teacher run is a
batch whose pipeline has a judge and metered backends. What it adds: ``execution_record.json``
beside each trace (written when the request finishes, and again for every finished request at the
end, from the trace alone, so a resumed run writes the same records), and the per-role call, token
and image counts (and, with prices in the config, the estimated cost) in ``summary.json``: the sum of
the ledgers every run of the folder wrote as its calls were made (``datagen/usage_ledger.py``), so the
calls of a killed run are counted too.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interleave_thinker.agents.judge import Judge
from interleave_thinker.backends.protocols import VLMBackend
from interleave_thinker.backends.specs import (
    VLM_BACKENDS,
    BackendOptions,
    check_specs,
    load_image_backend,
    load_vlm_backend,
    parse_spec,
)
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.core.run_folder import SUMMARY, TRACE_FILE, read_trace
from interleave_thinker.datagen.execution_record import write_execution_record
from interleave_thinker.datagen.generate_usage import MeteredImage, MeteredVLM, Usage, estimate_cost
from interleave_thinker.datagen.usage_ledger import UsageLedger, recorded_usage
from interleave_thinker.runtime.batch_inputs import BatchItem, batch_manifest
from interleave_thinker.runtime.failures import failure_reason, one_line
from interleave_thinker.runtime.fallbacks import fallbacks_only
from interleave_thinker.runtime.pipeline import Pipeline
from interleave_thinker.runtime.reports import accumulate, write_reports
from interleave_thinker.runtime.scheduler import BatchOutcome, BatchRunner, BatchSettings
from interleave_thinker.runtime.store import RunStore

if TYPE_CHECKING:
    from interleave_thinker.runtime.cluster import ClusterRunner

logger = logging.getLogger(__name__)
SETTINGS_KEYS = ("planner", "critic", "generator", "judge", "loop", "generation")
"""The settings a resumed `data generate` must share with the run it continues."""


@dataclass
class GenerateSettings:
    """How the teacher batch is scheduled (the scheduler's settings, as every scheduled command's), whether
    it resumes its folder, and the judge's reply bound."""

    batch: BatchSettings = field(default_factory=BatchSettings)
    resume: bool = True
    judge_max_new_tokens: int = Judge.DEFAULT_MAX_NEW_TOKENS
    accept_changed: bool = False
    """Run again a request whose input changed since the batch started, instead of refusing the resume."""


def check_judge(cfg: PipelineConfig) -> str:
    """The judge spec of the settings (``--judge`` or config ``judge``), checked before anything loads."""
    if not cfg.judge:
        raise ConfigError(
            "data generate needs a judge: give --judge SPEC (e.g. 'gemini:gemini-2.5-pro') or the config "
            "key 'judge'; every attempt is scored as it is made."
        )
    parse_spec(cfg.judge, VLM_BACKENDS)
    return cfg.judge


def load_teachers(
    cfg: PipelineConfig, judge_tokens: int, usage: dict[str, Usage]
) -> tuple[Pipeline, VLMBackend]:
    """The pipeline with backends metered into ``usage`` (per role) and a judge; equal specs share one
    loaded model."""
    judge_spec = check_judge(cfg)
    check_specs(cfg)
    templates = cfg.prompts.store().load()
    options = BackendOptions.from_config(cfg)
    loaded: dict[str, VLMBackend] = {}
    for role, spec in (("planner", cfg.planner), ("critic", cfg.critic), ("judge", judge_spec)):
        if spec not in loaded:
            loaded[spec] = load_vlm_backend(spec, options, role=role)
    judge_backend = MeteredVLM(loaded[judge_spec], usage["judge"])
    pipe = Pipeline(
        planner=MeteredVLM(loaded[cfg.planner], usage["planner"]),
        critic=MeteredVLM(loaded[cfg.critic], usage["critic"]),
        generator=MeteredImage(load_image_backend(cfg.generator, options), usage["generator"]),
        config=cfg,
        templates=templates,
        judge=Judge(judge_backend, templates, max_new_tokens=judge_tokens),
    )
    return pipe, judge_backend


def write_record(store: RunStore, request_id: str) -> None:
    """The request's ``execution_record.json`` from its trace, when the request has finished."""
    folder = store.request_dir(request_id)
    try:
        trace = read_trace(folder / TRACE_FILE)
        if trace is not None and trace.status != "running":
            write_execution_record(folder, trace)
    except Exception as exc:  # one record must not stop the batch; the end-of-run pass tries again
        logger.warning(
            "execution record of %s not written: %s", one_line(request_id, 80), failure_reason(exc)
        )


class TeacherRunner(BatchRunner):
    """The teachers' runner of one process: its own usage ledger (the summary sums every ledger of the
    folder), and the judge closed with the pipeline."""

    def __init__(self, cfg: PipelineConfig, root: Path, settings: GenerateSettings) -> None:
        self.ledger = UsageLedger.open(root)
        pipe, self.judge_backend = load_teachers(cfg, settings.judge_max_new_tokens, self.ledger.roles)
        super().__init__(pipe, RunStore(root), settings.batch)
        self.unusable = fallbacks_only  # nothing to train on is no success

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.judge_backend.close()  # type: ignore[attr-defined]


class TeacherRun:
    """One `data generate` invocation over a batch folder: open, run, write records and the summary.

    ``build`` turns the runner's recipe into the runner (default: this process's; `--ray`: a cluster's)."""

    def __init__(
        self,
        cfg: PipelineConfig,
        items: list[BatchItem],
        out: Path,
        source: str,
        settings: GenerateSettings,
        build: Callable[[Callable[[], BatchRunner], RunStore], BatchRunner | ClusterRunner] | None = None,
    ) -> None:
        self.cfg, self.items, self.settings = cfg, items, settings
        self.store = RunStore(out)
        record = {k: cfg.model_dump(mode="json")[k] for k in SETTINGS_KEYS}
        self.store.open(
            batch_manifest(source, items, record),
            resume=settings.resume,
            accept_changed=settings.accept_changed,
        )
        make = functools.partial(TeacherRunner, cfg, self.store.root, settings)
        self.runner = build(make, self.store) if build is not None else make()
        self.outcome: BatchOutcome | None = None

    def pending(self) -> int:
        return len(self.runner.todo(self.items))

    def run(self, on_done: Callable[[str, str], None] | None = None) -> dict[str, Any]:
        """Run the requests still to do; returns the summary (also in ``summary.json``)."""

        def done(request_id: str, status: str) -> None:
            write_record(self.store, request_id)
            if on_done is not None:
                on_done(request_id, status)

        self.runner.on_done = done
        try:
            self.outcome = outcome = self.runner.run(self.items)
        finally:
            self.runner.close()
        for item in self.items:
            write_record(self.store, item.id)
        return self._summary(outcome)

    def _summary(self, outcome: BatchOutcome) -> dict[str, Any]:
        """The batch summary: this run's figures added to the earlier runs', the counts of every run's ledger."""
        root = self.store.root
        previous = _previous_summary(root / SUMMARY)
        traces = self.store.traces()
        order = [i for i in self.store.manifest().get("ids", []) if i in traces]
        ordered = {i: traces[i] for i in [*order, *sorted(set(traces) - set(order))]}
        backends = {role: s.summary(outcome.wall_s) for role, s in outcome.stats.items()}
        totals = accumulate(previous, backends, outcome.wall_s)
        usage = recorded_usage(root)
        extra = {"usage": usage, "estimated_cost": estimate_cost(usage, self.cfg.prices)}
        return write_reports(root, ordered, totals["backends"], totals["wall_s"], totals["runs"], extra=extra)


def _previous_summary(path: Path) -> dict[str, Any]:
    """The summary an earlier run of this batch wrote (its counts are added to), or {}."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
