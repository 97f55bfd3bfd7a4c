"""One scoring run, any protocol: load data and prompts, check the protocol, judge, write, summarise.

This is what ``interleave-thinker eval score`` calls; tests and the benchmark call it too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.eval import score_rise, score_ueval, score_wise
from interleave_thinker.eval.datasets import EvalItem, load_items
from interleave_thinker.eval.judging import JudgeClient, JudgeTransport, load_transport
from interleave_thinker.eval.prompts import RISE_REPO, UEVAL_REPO, WISE_REPO, EvalPromptStore
from interleave_thinker.eval.scoring import (
    ItemResult,
    RunFolder,
    ScoredHook,
    judge_metadata,
    run_metadata,
    score_items,
)

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


def _scorer(
    options: ScoreOptions, items: list[EvalItem], prompts: Any, client: JudgeClient
) -> tuple[
    Callable[[EvalItem], ItemResult], Callable[[list[dict[str, Any]]], dict[str, Any]], dict[str, Any]
]:
    """The per-item function, the summariser and extra metadata of the protocol."""
    attempts = options.judge_attempts or DEFAULT_ATTEMPTS[options.protocol]
    if options.protocol in score_wise.PROTOCOLS:
        protocol = score_wise.PROTOCOLS[options.protocol]
        score_wise.check_data(protocol, items)
        one = functools.partial(score_wise.score_item, protocol, prompts, client, options.outputs)
        return (lambda item: one(item, attempts)), functools.partial(score_wise.summarize, protocol), {}
    if options.protocol == "rise":
        columns: set[str] = set().union(*(item.raw.keys() for item in items))
        for item in items:  # bad samples (category, references) fail now, before any judge call
            score_rise.plan_judges(item, columns, prompts)
        scorer = functools.partial(
            score_rise.score_item, prompts, client, options.outputs, columns, options.scorer_version
        )
        return scorer, score_rise.summarize, {"data_columns": sorted(columns)}
    submission, folder = score_ueval.load_submission(options.outputs)
    scorer = functools.partial(
        score_ueval.score_item, prompts, client, submission, folder, options.ueval_mode, attempts
    )
    return scorer, score_ueval.summarize, {"ueval_mode": options.ueval_mode}


def run_score(
    options: ScoreOptions, transport: JudgeTransport | None = None, on_scored: ScoredHook | None = None
) -> dict[str, Any]:
    """Score ``options.outputs``; returns the summary written to ``summary.json``. ``on_scored(done, total)``
    follows the items (see :func:`score_items`)."""
    _check(options)
    items = load_items(BENCHMARK_OF[options.protocol], options.data)
    prompts = EvalPromptStore().load(options.protocol)
    transport = transport or load_transport(options.judge, options.judge_concurrency, options.backend_options)
    client = JudgeClient(
        transport,
        cache_dir=options.judge_cache or options.out / "judge_cache",
        log_path=options.out / "replies.jsonl",
        capacity=options.judge_concurrency,
    )
    try:
        score_one, summarize, extra = _scorer(options, items, prompts, client)
        meta = run_metadata(
            options.protocol,
            options.scorer_version,
            judge_metadata(options.protocol, options.judge, client.model),
            prompts,
            REPOS[options.protocol],
            data=options.data,
            outputs=str(options.outputs),
            judge_attempts=options.judge_attempts or DEFAULT_ATTEMPTS[options.protocol],
            **extra,
        )
        folder = RunFolder(options.out, meta)
        score_items(items, lambda item: item.id, score_one, folder, options.judge_concurrency, on_scored)
        order = [item.id for item in items]
        wanted = set(order)
        rows = [row for key, row in folder.done().items() if key in wanted]
        return folder.write_summary(summarize(rows), client, order)
    finally:
        client.close()
