"""One scoring run, any protocol: load data and prompts, check the protocol, judge, write, summarise.

This is what ``interleave-thinker eval score`` calls; tests and the benchmark call it too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interleave_thinker.core.config import EvalOptions
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.eval import score_rise, score_ueval, score_wise
from interleave_thinker.eval.datasets import EvalItem, load_items
from interleave_thinker.eval.judging import JudgeClient, JudgeTransport, load_transport
from interleave_thinker.eval.outputs import Limits
from interleave_thinker.eval.prompts import RISE_REPO, UEVAL_REPO, WISE_REPO, EvalPromptStore
from interleave_thinker.eval.scoring import (
    ItemResult,
    RunFolder,
    ScoredHook,
    judge_metadata,
    run_metadata,
    score_items,
)
from interleave_thinker.runtime.outlock import folder_lock

if TYPE_CHECKING:
    from interleave_thinker.backends.specs import BackendOptions

BENCHMARK_OF = {"wise": "wise", "wise-legacy": "wise", "rise": "rise", "ueval": "ueval"}
DEFAULT_ATTEMPTS = {"wise": score_wise.ATTEMPTS, "wise-legacy": score_wise.ATTEMPTS, "rise": 1}
DEFAULT_ATTEMPTS["ueval"] = score_ueval.ATTEMPTS
REPOS = {"wise": WISE_REPO, "wise-legacy": WISE_REPO, "rise": RISE_REPO, "ueval": UEVAL_REPO}


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
    ueval_mode: str = "cached"
    judge_cache: Path | None = None
    backend_options: BackendOptions | None = None
    """The settings' device and transport for the judge (``--config``); None = defaults."""
    limits: EvalOptions = field(default_factory=EvalOptions)
    """The settings' ``eval.*``: what one image may weigh, how many judge calls an item and a run make."""


def _check(options: ScoreOptions) -> None:
    if options.protocol not in BENCHMARK_OF:
        raise ConfigError(f"Unknown protocol {options.protocol!r}; choose one of {', '.join(BENCHMARK_OF)}.")
    if options.scorer_version not in score_rise.SCORER_VERSIONS:
        raise ConfigError(f"--scorer-version {options.scorer_version!r}: use current or pre-2026-04-13.")
    if options.scorer_version != "current" and options.protocol != "rise":
        raise ConfigError("--scorer-version pre-2026-04-13 exists only for rise (RISEBench's accuracy fix).")
    if options.ueval_mode not in score_ueval.MODES:
        raise ConfigError(f"--ueval-mode {options.ueval_mode!r}: use cached or direct.")
    if options.judge_attempts is not None and options.judge_attempts < 1:
        raise ConfigError("--judge-attempts must be at least 1.")
    if options.protocol != "ueval" and not options.outputs.is_dir():
        raise InputError(f"--outputs {options.outputs}: no such folder.")


@dataclass(frozen=True)
class Scorer:
    """A protocol's per-item function, summariser, extra metadata and what binds a stored score."""

    score: Callable[[EvalItem], ItemResult]
    summarize: Callable[[list[dict[str, Any]]], dict[str, Any]]
    extra: dict[str, Any]
    digest: Callable[[EvalItem], str]


def _scorer(options: ScoreOptions, items: list[EvalItem], prompts: Any, client: JudgeClient) -> Scorer:
    attempts = options.judge_attempts or DEFAULT_ATTEMPTS[options.protocol]
    limits = Limits.from_options(options.limits)
    if options.protocol in score_wise.PROTOCOLS:
        protocol = score_wise.PROTOCOLS[options.protocol]
        score_wise.check_data(protocol, items)
        one = functools.partial(score_wise.score_item, protocol, prompts, client, options.outputs)
        return Scorer(
            lambda item: one(item, attempts, limits),
            functools.partial(score_wise.summarize, protocol),
            {},
            functools.partial(score_wise.output_digest, options.outputs, limits),
        )
    if options.protocol == "rise":
        columns: set[str] = set().union(*(item.raw.keys() for item in items))
        for item in items:  # bad samples (category, references) fail now, before any judge call
            score_rise.plan_judges(item, columns, prompts)
        scorer = functools.partial(
            score_rise.score_item, prompts, client, options.outputs, columns, options.scorer_version
        )
        return Scorer(
            lambda item: scorer(item, limits),
            score_rise.summarize,
            {"data_columns": sorted(columns)},
            functools.partial(score_rise.output_digest, options.outputs, limits),
        )
    submission, folder = score_ueval.load_submission(options.outputs)
    ueval = functools.partial(
        score_ueval.score_item, prompts, client, submission, folder, options.ueval_mode, attempts
    )
    return Scorer(
        lambda item: ueval(item, limits),
        score_ueval.summarize,
        {"ueval_mode": options.ueval_mode},
        functools.partial(score_ueval.output_digest, submission, folder, limits),
    )


def run_score(
    options: ScoreOptions, transport: JudgeTransport | None = None, on_scored: ScoredHook | None = None
) -> dict[str, Any]:
    """Score ``options.outputs``; returns the summary written to ``summary.json``. ``on_scored(done, total)``
    follows the items (see :func:`score_items`)."""
    _check(options)
    items = load_items(BENCHMARK_OF[options.protocol], options.data)
    prompts = EvalPromptStore().load(options.protocol)
    with folder_lock(options.out):  # two runs on one --out would both pay the judge
        return _run_locked(options, items, prompts, transport, on_scored)


def _run_locked(
    options: ScoreOptions,
    items: list[EvalItem],
    prompts: Any,
    transport: JudgeTransport | None,
    on_scored: ScoredHook | None,
) -> dict[str, Any]:
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
        scorer = _scorer(options, items, prompts, client)
        meta = run_metadata(
            options.protocol,
            options.scorer_version,
            judge_metadata(options.protocol, options.judge, client.model),
            prompts,
            REPOS[options.protocol],
            data=options.data,
            outputs=str(options.outputs),
            judge_attempts=options.judge_attempts or DEFAULT_ATTEMPTS[options.protocol],
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
        order = [item.id for item in items]
        wanted = set(order)
        rows = [row for key, row in folder.done().items() if key in wanted]
        return folder.write_summary(scorer.summarize(rows), client, order, rescored)
    finally:
        client.close()
