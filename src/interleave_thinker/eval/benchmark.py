"""What a benchmark is to the rest of ``eval/``: one frozen :class:`Benchmark` with its :class:`Protocol`\\ s.

A benchmark names its data reader, its output layout, its scoring protocols (official judge and its
settings, prompts, scorer versions, how to score an item and summarise a run, how the report shows and
judges a row) and the published numbers it is compared with. Generation, scoring and the report ask the
object, never the name: adding a benchmark is one module in :mod:`interleave_thinker.eval.benchmarks`
plus one line in its registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.eval.judging import JudgeClient
from interleave_thinker.eval.layouts import Layout
from interleave_thinker.eval.outputs import Limits
from interleave_thinker.eval.prompts import PromptSet, Repo
from interleave_thinker.eval.published import Published
from interleave_thinker.eval.scoring import ItemResult


@dataclass(frozen=True)
class ScoreContext:
    """Everything a protocol's scorer may use for one scoring run."""

    items: list[EvalItem]
    prompts: PromptSet
    client: JudgeClient
    outputs: Path
    attempts: int
    limits: Limits
    scorer_version: str = "current"
    request_mode: str = "cached"
    """How each question is asked, one of the protocol's :attr:`Protocol.modes` (ignored by a protocol without)."""
    sliced: bool = False
    """Only part of the data is scored (``--limit``/``--ids``/``--shard``): overalls are the slice's."""


@dataclass(frozen=True)
class Scorer:
    """A protocol's per-item function, summariser, extra metadata and what binds a stored score."""

    score: Callable[[EvalItem], ItemResult]
    summarize: Callable[[list[dict[str, Any]]], dict[str, Any]]
    extra: dict[str, Any]
    digest: Callable[[EvalItem], str]


def fmt(value: Any, scale: float = 1.0, digits: int = 4) -> str:
    """A number for the report's table ("–" when there is none)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "–"
    return f"{value * scale:.{digits}f}"


def plain_cell(entry: Any) -> str:
    if not isinstance(entry, dict):
        return fmt(entry)
    return f"{fmt(entry.get('score'))} (n={entry.get('n', '?')})"


def plain_passed(row: dict[str, Any]) -> bool:
    score = row.get("score")
    return isinstance(score, int | float) and score >= 0.5


@dataclass(frozen=True)
class ReportRules:
    """How ``eval report`` shows a protocol's summary and decides whether one item passed."""

    cell: Callable[[Any], str] = plain_cell
    """One category's entry (or the overall one) in the protocol's published unit."""
    overall: Callable[[dict[str, Any]], str] | None = None
    """The "Overall" cell from the whole summary; None: ``cell(summary["overall"])``."""
    passed: Callable[[dict[str, Any]], bool] = plain_passed
    """Whether a scored row (status ok) passed: picks the paired gallery's items."""
    categories_key: str = "categories"
    column: str | None = None
    """Set for a measure of any run (not a benchmark of its own): ``eval report`` shows it as a column of
    this title beside another protocol's scores of the same outputs."""


@dataclass(frozen=True)
class Protocol:
    """One way of scoring a benchmark: the official judge and settings, prompts, scorer, report rules."""

    name: str
    official_judge: str | None
    """The judge the protocol's published numbers were measured with (None: there is none)."""
    judge_settings: dict[str, Any]
    """The request settings sent with every question (documentation and ``run.json``)."""
    attempts: int
    """Official attempts per question on an unparsable reply."""
    prompts: Callable[[], PromptSet]
    scorer: Callable[[ScoreContext], Scorer]
    code: Repo | None = None
    """The official scorer's repository at the commit reproduced (None: our own protocol)."""
    scorer_versions: tuple[str, ...] = ("current",)
    report: ReportRules = field(default_factory=ReportRules)
    modes: tuple[str, ...] = ()
    """The request shapes its questions may be asked in (the first is the official default); empty: one."""
    mode_flag: str | None = None
    """The flag that picks one of :attr:`modes`, as the CLI spells it (for messages)."""


@dataclass(frozen=True)
class Benchmark:
    """A benchmark: its items, where generation writes its outputs, how they are scored and compared."""

    name: str
    load: Callable[[str], list[EvalItem]]
    """Items from ``--data`` (a local path or ``hf:ID[:split]``), validated."""
    layout: Layout
    protocols: tuple[Protocol, ...]
    """The first is the default of ``eval run``."""
    published: tuple[Published, ...] = ()
    data_from_outputs: bool = False
    """The items are read from the outputs themselves (a folder of runs): ``--data`` may be left out."""
    help: dict[str, str] = field(default_factory=dict)
    """This benchmark's part of a CLI option's help, by option (``outputs``, ``scorer_version``, ...): the
    CLI joins the registry's parts, so it names no benchmark itself."""
