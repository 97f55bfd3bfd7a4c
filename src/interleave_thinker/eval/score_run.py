"""One scoring run, any protocol: load data and prompts, check the protocol, judge, write, summarise.

This is what ``interleave-thinker eval score`` calls; tests and the benchmark call it too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interleave_thinker.core.config import EvalOptions
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.eval import benchmarks
from interleave_thinker.eval.benchmark import Benchmark, Protocol, ScoreContext
from interleave_thinker.eval.datasets import EvalItem, choose_items
from interleave_thinker.eval.judging import JudgeClient, JudgeTransport, load_transport
from interleave_thinker.eval.outputs import Limits
from interleave_thinker.eval.prompts import PromptSet
from interleave_thinker.eval.scoring import (
    RunFolder,
    ScoredHook,
    judge_metadata,
    run_metadata,
    score_items,
)

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

GENERATION = "eval.json"


@dataclass
class ScoreOptions:
    protocol: str
    outputs: Path
    data: str
    judge: str
    out: Path
    scorer_version: str = "current"
    judge_concurrency: int = 32
    judge_attempts: int | None = None
    request_mode: str = "cached"
    judge_cache: Path | None = None
    backend_options: BackendOptions | None = None
    """The settings' device and transport for the judge (``--config``); None = defaults."""
    limits: EvalOptions = field(default_factory=EvalOptions)
    """The settings' ``eval.*``: what one image may weigh, how many judge calls an item and a run make."""
    limit: int | None = None
    """Score the first N items only (``--limit``): a slice, scored and reported as one."""
    ids: tuple[str, ...] | None = None
    """Score these item ids only (``--ids``); with neither, the ids a sliced ``eval generate`` recorded
    in the outputs' ``eval.json`` (else every item)."""


@dataclass(frozen=True)
class Selection:
    """The items to score and how they were chosen (a slice is reported as one)."""

    items: list[EvalItem]
    total: int
    how: str | None

    @property
    def sliced(self) -> bool:
        return len(self.items) < self.total

    def record(self) -> dict[str, Any] | None:
        if not self.sliced:
            return None
        return {"items": len(self.items), "of": self.total, "chosen_by": self.how}


def resolve_data(protocol: str, outputs: Path, data: str | None) -> str:
    """``--data`` as given; left out, ``--outputs`` for a benchmark whose items are its outputs."""
    if data is not None:
        return data
    benchmark, _ = benchmarks.find_protocol(protocol)
    if not benchmark.data_from_outputs:
        raise ConfigError(
            f"--data is required for {protocol}: the benchmark's official files (a local path or hf:ID[:split])."
        )
    return str(outputs)


def default_out(protocol: str, outputs: Path) -> Path:
    """Where a scoring run writes when ``--out`` is left out: ``scores-<protocol>/`` beside the outputs
    (where `eval run` puts it)."""
    return (outputs if outputs.is_dir() else outputs.parent) / f"scores-{protocol}"


def _check(options: ScoreOptions) -> tuple[Benchmark, Protocol]:
    benchmark, protocol = benchmarks.find_protocol(options.protocol)
    versions = {v for p in benchmarks.protocols() for v in p.scorer_versions}
    if options.scorer_version not in versions:
        raise ConfigError(
            f"--scorer-version {options.scorer_version!r}: use {' or '.join(sorted(versions))}."
        )
    if options.scorer_version not in protocol.scorer_versions:
        owners = [p.name for p in benchmarks.protocols() if options.scorer_version in p.scorer_versions]
        raise ConfigError(
            f"--scorer-version {options.scorer_version} exists only for {', '.join(owners)} "
            f"(this is {protocol.name})."
        )
    moded = [p for p in benchmarks.protocols() if p.modes]
    modes = {m for p in moded for m in p.modes}
    if moded and options.request_mode not in modes:
        flag = moded[0].mode_flag or "request mode"
        raise ConfigError(f"{flag} {options.request_mode!r}: use {' or '.join(sorted(modes))}.")
    if options.judge_attempts is not None and options.judge_attempts < 1:
        raise ConfigError("--judge-attempts must be at least 1.")
    if options.limit is not None and options.limit < 1:
        raise ConfigError("--limit must be at least 1.")
    if not benchmark.layout.submission and not options.outputs.is_dir():
        raise InputError(f"--outputs {options.outputs}: no such folder.")
    return benchmark, protocol


def _generated_ids(outputs: Path) -> list[str] | None:
    """The ids a sliced ``eval generate`` recorded beside the outputs (None: not a slice, or no record)."""
    folder = outputs if outputs.is_dir() else outputs.parent
    path = folder / GENERATION
    if not path.is_file() or path.stat().st_size > 64 * 2**20:
        return None
    try:
        ids = json.loads(path.read_text(encoding="utf-8")).get("ids")
    except (ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        return None
    return [str(i) for i in ids] if isinstance(ids, list) else None


def choose(options: ScoreOptions, items: list[EvalItem]) -> Selection:
    """``--ids``, then ``--limit`` (as ``eval generate`` selects), else a generation's recorded slice."""
    total = len(items)
    if options.ids is not None or options.limit is not None:
        chosen = choose_items(items, ids=options.ids, limit=options.limit)
        flags = [f"--ids ({len(options.ids)})"] if options.ids is not None else []
        flags += [f"--limit {options.limit}"] if options.limit is not None else []
        return Selection(chosen, total, " ".join(flags))
    recorded = _generated_ids(options.outputs)
    if recorded is None:
        return Selection(items, total, None)
    keep = set(recorded)
    chosen = [item for item in items if item.id in keep]
    if not chosen:
        raise InputError(
            f"{options.outputs}: its {GENERATION} names {len(keep)} generated ids, none of them in --data "
            f"{options.data}: score with the data it was generated from, or choose items with --ids/--limit."
        )
    return Selection(chosen, total, f"the ids in {GENERATION}")


def run_score(
    options: ScoreOptions, transport: JudgeTransport | None = None, on_scored: ScoredHook | None = None
) -> dict[str, Any]:
    """Score ``options.outputs``; returns the summary written to ``summary.json``. ``on_scored(done, total)``
    follows the items (see :func:`score_items`)."""
    from interleave_thinker.runtime.outlock import folder_lock  # filelock: not loaded when the CLI starts

    benchmark, protocol = _check(options)
    selection = choose(options, benchmark.load(options.data))
    prompts = protocol.prompts()
    with folder_lock(options.out):  # two runs on one --out would both pay the judge
        return _run_locked(options, protocol, selection, prompts, transport, on_scored)


def _run_locked(
    options: ScoreOptions,
    protocol: Protocol,
    selection: Selection,
    prompts: PromptSet,
    transport: JudgeTransport | None,
    on_scored: ScoredHook | None,
) -> dict[str, Any]:
    items, attempts = selection.items, options.judge_attempts or protocol.attempts
    transport = transport or load_transport(options.judge, options.judge_concurrency, options.backend_options)
    client = JudgeClient(
        transport,
        cache_dir=options.judge_cache or options.out / "judge_cache",
        log_path=options.out / "replies.jsonl",
        capacity=options.judge_concurrency,
        calls_per_item=options.limits.judge_calls_per_item,
        calls_per_run=options.limits.judge_calls_per_run,
    )
    try:
        context = ScoreContext(
            items,
            prompts,
            client,
            options.outputs,
            attempts,
            Limits.from_options(options.limits),
            options.scorer_version,
            options.request_mode,
            selection.sliced,
        )
        scorer = protocol.scorer(context)
        meta = run_metadata(
            protocol.name,
            options.scorer_version,
            judge_metadata(protocol.official_judge, options.judge, client.model),
            prompts,
            protocol.code,
            data=options.data,
            outputs=str(options.outputs),
            judge_attempts=attempts,
            limits=options.limits.model_dump(mode="json"),
            **scorer.extra,
        )
        folder = RunFolder(options.out, meta)
        rescored = score_items(
            items,
            lambda item: item.id,
            scorer.score,
            folder,
            options.judge_concurrency,
            on_scored,
            scorer.digest,
        )
        wanted = set(order := [item.id for item in items])
        rows = [row for key, row in folder.done().items() if key in wanted]
        summary = {**scorer.summarize(rows), "slice": selection.record()}
        return folder.write_summary(summary, client, order, rescored)
    finally:
        client.close()
