"""`interleave-thinker eval score`: score outputs in a benchmark's official layout with its official protocol."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.cli.eval_generate import IdsOption, split_ids
from interleave_thinker.cli.options import LimitOption, SettingsFlags, field_defaults, with_settings
from interleave_thinker.cli.progress import counter_bar
from interleave_thinker.cli.scheduled import start_fresh
from interleave_thinker.cli.scoring import JUDGE_REQUIRED, judge_or_preset
from interleave_thinker.cli.specs import check_spec
from interleave_thinker.core.storage import check_out_folder
from interleave_thinker.eval import benchmarks
from interleave_thinker.eval.score_run import ScoreOptions

if TYPE_CHECKING:
    from interleave_thinker.core.config import PipelineConfig

console = Console(stderr=True)
JudgeAttemptsOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help=f"Attempts per question on unparsable replies (default: official; {benchmarks.option_help('judge_attempts')}).",
    ),
]
ProtocolName = enum.Enum("ProtocolName", [(n, n) for n in benchmarks.protocol_names()], type=str)  # type: ignore[misc]
"""The registry's scoring protocols, as the CLI's choices."""
ScorerVersion = Literal["current", "pre-2026-04-13"]
RequestMode = Literal["cached", "direct"]
RequestModeOption = Annotated[
    RequestMode, typer.Option(benchmarks.mode_flag(), help=benchmarks.option_help("request_mode") + ".")
]
ScorerVersionOption = Annotated[
    ScorerVersion, typer.Option(help=benchmarks.option_help("scorer_version") + ".")
]
JudgeConcurrencyOption = Annotated[int, typer.Option(min=1, help="Judge calls in flight at most.")]
SCORING = field_defaults(ScoreOptions)
"""The scoring flags' defaults: the fields' of the scoring run's options (one source)."""
MAX_SHOWN_FAILURES = 20
DataOption = Annotated[
    str | None,
    typer.Option(
        help=f"The benchmark's official local files, or hf:ID[:split] ({benchmarks.option_help('data')})."
    ),
]
JudgeOption = Annotated[
    str | None,
    typer.Option(
        help="Judge backend spec, e.g. openai:http://host:8000/v1#MODEL (not for an offline --scorer; with --preset tiny: the stand-in tiny:judge)."
    ),
]
ScorerOption = Annotated[
    str,
    typer.Option(help=benchmarks.option_help("scorer") + "."),
]
OutOption = Annotated[
    Path | None,
    typer.Option(
        help="Scoring folder: scores.jsonl, summary.json, replies, cache (default: OUTPUTS/scores-PROTOCOL)."
    ),
]

FreshScoresOption = Annotated[
    bool,
    typer.Option(
        "--fresh-scores",
        help="Score again into the same scoring folder: what it holds moves aside to <folder>.old-<time> "
        "(nothing is deleted), e.g. to rescore with another judge.",
    ),
]


@with_settings()
def score(
    settings: SettingsFlags,
    protocol: Annotated[
        ProtocolName,
        typer.Argument(
            help=f"The scoring protocol: {benchmarks.option_help('protocol')} (docs/evaluation.md)."
        ),
    ],
    outputs: Annotated[
        Path,
        typer.Option(help=f"Outputs in the official layout: {benchmarks.option_help('outputs')}."),
    ],
    judge: JudgeOption = None,
    scorer: ScorerOption = "vlm",
    data: DataOption = None,
    out: OutOption = None,
    scorer_version: ScorerVersionOption = SCORING["scorer_version"],
    judge_concurrency: JudgeConcurrencyOption = SCORING["judge_concurrency"],
    judge_attempts: JudgeAttemptsOption = None,
    request_mode: RequestModeOption = SCORING["request_mode"],
    judge_cache: Annotated[
        Path | None,
        typer.Option(help="Share a judge-reply cache folder between runs (default OUT/judge_cache)."),
    ] = None,
    limit: LimitOption = None,
    ids: IdsOption = None,
    quiet: Annotated[
        bool, typer.Option(help="No progress bar (the summary is printed all the same).")
    ] = False,
    fresh_scores: FreshScoresOption = False,
) -> None:
    """Score with the official protocol; prints the summary, writes scores.jsonl and summary.json.

    The judge runs on the settings' device and transport (`model.*`, `remote.*`); the judge prompts are
    the benchmark's own, obtained at run time, so `prompts.*` does not apply."""
    if scorer == "vlm":
        judge = judge_or_preset(judge, settings)
    if scorer != "vlm" or judge is None:
        _score_offline(protocol.value, scorer, judge, outputs, out)
        return
    check_spec("--judge", judge, "vlm")
    cfg = settings.resolve()
    options = score_options(protocol.value, outputs, data, judge, out, cfg, scorer_version, judge_concurrency)
    check_out_folder(options.out)
    options = dataclasses.replace(
        options,
        judge_attempts=judge_attempts,
        request_mode=request_mode,
        judge_cache=judge_cache,
        limit=limit,
        ids=split_ids(ids),
    )
    start_fresh(options.out, fresh_scores)
    summary = score_with_progress(options, quiet)
    typer.echo(json.dumps(_headline(summary), indent=2))
    exit_if_nothing_scored(summary, options.out)


def _score_offline(protocol: str, scorer: str, judge: str | None, outputs: Path, out: Path | None) -> None:
    """``--scorer NAME`` other than vlm: the consistency sequences scored here, without a model."""
    from interleave_thinker.core.errors import ConfigError
    from interleave_thinker.eval import consistency_scorers
    from interleave_thinker.eval.score_run import default_out

    if scorer == consistency_scorers.VLM:
        raise ConfigError(JUDGE_REQUIRED)
    if protocol != consistency_scorers.PROTOCOL:
        raise ConfigError(
            f"--scorer {scorer} scores consistency only; {protocol} is scored by its judge (--judge)."
        )
    if judge is not None:
        raise ConfigError(f"--judge is not used by --scorer {scorer} (it needs no model): leave it out.")
    out = out or default_out(protocol, outputs)
    summary = consistency_scorers.score_runs(outputs, out, consistency_scorers.offline_scorer(scorer))
    console.print(escape(f"scorer {summary['judge']['spec']}: {summary['scorer']}"), highlight=False)
    console.print(counts_line(summary))
    typer.echo(json.dumps(_headline(summary), indent=2))
    exit_if_nothing_scored(summary, out)


def score_options(
    protocol: str,
    outputs: Path,
    data: str | None,
    judge: str,
    out: Path | None,
    cfg: PipelineConfig,
    scorer_version: str,
    judge_concurrency: int,
) -> ScoreOptions:
    """A scoring run on the settings' device, transport (``model.*``, ``remote.*``) and ``eval.*`` bounds;
    ``data`` and ``out`` left out are the benchmark's defaults (:func:`resolve_data`, :func:`default_out`)."""
    from interleave_thinker.backends.specs import BackendOptions
    from interleave_thinker.eval.score_run import ScoreOptions, default_out, resolve_data

    data = resolve_data(protocol, outputs, data)
    out = out or default_out(protocol, outputs)
    options = ScoreOptions(protocol, outputs, data, judge, out, scorer_version, judge_concurrency)
    return dataclasses.replace(options, backend_options=BackendOptions.from_config(cfg), limits=cfg.eval)


def score_with_progress(options: ScoreOptions, quiet: bool) -> dict[str, Any]:
    """Score under a counted bar, then say what was scored (the counts, failures, the judge's note)."""
    from interleave_thinker.eval.score_run import run_score

    progress = counter_bar(console, quiet=quiet)
    task = progress.add_task(escape(f"scoring {options.protocol} with {options.judge}"), total=None)

    def on_scored(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    with progress:
        summary = run_score(options, on_scored=on_scored)
    _report(summary, options.out)
    return summary


def counts_line(summary: dict[str, Any]) -> str:
    """``3 of 3 scored (a 3-item slice of 1000), 0 failed, 0 missing outputs``."""
    counts = summary["counts"]
    part = summary.get("slice")
    of = f" (a {part['items']}-item slice of {part['of']})" if isinstance(part, dict) else ""
    return (
        f"{counts['scored']} of {counts['items']} scored{of}, {counts['failed']} failed, "
        f"{counts['missing_outputs']} missing outputs"
    )


def _report(summary: dict[str, Any], out: Path) -> None:
    """The counts, the failures and the judge as given (its name was not verified)."""
    judge = summary["judge"]
    note = judge.get("note")
    if note:
        console.print(f"[yellow]{escape(note)}[/yellow]")
    console.print(
        escape(f"judge {judge['spec']} (serving '{judge['model']}'); {judge['verification']}"),
        highlight=False,
    )
    console.print(
        f"{counts_line(summary)}; "
        f"{summary['judge_calls']['this_run']} judge calls, {summary['judge_calls']['cache_hits']} cache hits"
    )
    failed = summary.get("failed_items") or []
    for entry in failed[:MAX_SHOWN_FAILURES]:
        console.print(escape(f"failed {entry['id']}: {entry['reason']}"), highlight=False, soft_wrap=True)
    if len(failed) > MAX_SHOWN_FAILURES:
        console.print(escape(f"... and {len(failed) - MAX_SHOWN_FAILURES} more: see {out / 'summary.json'}"))
    rescored = summary.get("scored_inputs", {}).get("rescored_changed", 0)
    if rescored:
        console.print(f"{rescored} stored scores were replaced: their data or output changed since")


def exit_if_nothing_scored(summary: dict[str, Any], out: Path) -> None:
    """Exit 1 when nothing was scored: a summary of nothing is not a result."""
    counts = summary["counts"]
    if not counts["scored"]:
        console.print(
            escape(
                f"error: no output was scored ({counts['failed']} judgements failed, "
                f"{counts['missing_outputs']} outputs missing); see {out / 'summary.json'} and the replies there."
            )
        )
        raise typer.Exit(1)


def _headline(summary: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "protocol",
        "scorer_version",
        "overall",
        "average",
        "slice",
        "categories",
        "text_avg_rate",
        "image_avg_rate",
        "counts",
    )
    return {k: summary[k] for k in keys if k in summary}
