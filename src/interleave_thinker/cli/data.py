"""`interleave-thinker data validate|build|stats`: check, build and count training data."""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from interleave_thinker.cli.data_report import (
    MAX_ERRORS,
    JudgePass,
    fail_if_useless,
    print_stats,
    report_failed,
    report_judge,
)
from interleave_thinker.cli.options import SettingsFlags, deprecated, with_flags, with_settings
from interleave_thinker.cli.scoring import JUDGE_TOKENS, JudgeTokensOption, load_judge
from interleave_thinker.cli.specs import check_spec
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.storage import check_out_folder
from interleave_thinker.core.untrusted import MAX_IMAGE_PIXELS

app = typer.Typer(help="Validate, build and count training data.", no_args_is_help=True)
DataKind = Literal["planner_sft", "planner_rl", "critic_sft", "critic_rl", "record"]
SynthRole = Literal["planner", "critic", "judge"]


def summarize(kind: str, examples: list[Any]) -> list[str]:
    """A few lines that tell whether a file holds what it should."""
    from interleave_thinker.agents.critic import parse_verdict
    from interleave_thinker.agents.planner import parse_plan

    lines = [f"{len(examples)} {kind} record(s)"]
    if kind in ("planner_sft", "critic_sft"):
        images = sum(len(e.images) for e in examples)
        with_images = sum(1 for e in examples if e.images)
        lines.append(
            f"images: {images} in {with_images} record(s); turns: {sum(len(e.messages) for e in examples)}"
        )
        if kind == "planner_sft":
            steps = Counter(len(parse_plan(e.messages[-1].content).steps) for e in examples)
            lines.append("plan steps: " + ", ".join(f"{k}: {v}" for k, v in sorted(steps.items())))
        else:
            labels = Counter(parse_verdict(e.messages[-1].content).success for e in examples)
            lines.append(f"verdicts: true {labels[True]}, false {labels[False]}")
    elif kind == "planner_rl":
        scores = [e.plan_score for e in examples if e.plan_score is not None]
        guidance = sum(1 for e in examples if e.images)
        average = f", mean {sum(scores) / len(scores):.2f}" if scores else ""
        lines.append(f"guidance (with images): {guidance}; plan_score in {len(scores)} record(s){average}")
    elif kind == "critic_rl":
        labels = Counter(e.ground_truth.success for e in examples)
        mean = [
            sum(getattr(e.ground_truth, k) for e in examples) / max(1, len(examples))
            for k in ("semantics", "quality")
        ]
        lines.append(
            f"ground truth: true {labels[True]}, false {labels[False]}; mean semantics {mean[0]:.2f}, quality {mean[1]:.2f}"
        )
    else:
        for record in examples:
            numbers = {e.step for e in record.steps}
            ok = sum(1 for e in record.steps if e.success)
            lines.append(
                f"plan steps: {len(record.plan)}; critic calls: {len(record.steps)} over {len(numbers)} step(s), {ok} successful"
            )
    return lines


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="The data file to check.")],
    kind: Annotated[DataKind, typer.Option(help="Which format the file is in.")],
    image_dir: Annotated[
        Path | None, typer.Option(help="Base folder of relative image paths \\[default: the file's folder].")
    ] = None,
) -> None:
    """Check a training-data file: print the record count and a summary, or the first errors (exit 1)."""
    from interleave_thinker.train.data.issues import DatasetError
    from interleave_thinker.train.data.loaders import load_kind

    try:
        examples = load_kind(file, kind, image_dir=image_dir)
    except DatasetError as exc:
        for issue in exc.issues[:MAX_ERRORS]:
            typer.echo(str(issue), err=True)
        if len(exc.issues) > MAX_ERRORS:
            typer.echo(f"... and {len(exc.issues) - MAX_ERRORS} more problem(s)", err=True)
        raise typer.Exit(1) from None
    for line in summarize(kind, examples):
        typer.echo(line)


def _score(
    trajectories: list[Any], judge: str, cfg: PipelineConfig, max_new_tokens: int, quiet: bool = False
) -> tuple[dict[str, tuple[float, float]], JudgePass]:
    """Score the unscored attempts with a progress bar on stderr; replies stay off the terminal."""
    from rich.console import Console

    from interleave_thinker.cli.progress import LoadingDisplay, counter_bar
    from interleave_thinker.train.data.scoring import score_missing, unscored

    pending = len(unscored(trajectories))
    if not pending:
        return {}, JudgePass()
    console = Console(stderr=True)
    with LoadingDisplay(console, f"loading the judge {judge}", quiet=quiet):  # a tiny build shows its bar
        scorer = load_judge(judge, cfg, max_new_tokens)
    progress = counter_bar(console, "judging attempts", quiet=quiet)
    with progress:
        task = progress.add_task("judge", total=pending)
        scores, errors = score_missing(
            trajectories,
            scorer,
            lambda: progress.advance(task),
        )
    return scores, JudgePass(pending, errors)


def _gather(
    source: Path,
    image_dir: Path | None,
    rules_file: Path | None,
    judge: str | None,
    cache: Path | None,
    cfg: PipelineConfig,
    judge_tokens: int = 1024,
    quiet: bool = False,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
) -> tuple[Any, Any, JudgePass, list[dict[str, str]]]:
    from interleave_thinker.core.untrusted import ImageLimits
    from interleave_thinker.train.data.rules import BuildRules
    from interleave_thinker.train.data.scoring import apply_scores, load_cache, save_cache
    from interleave_thinker.train.data.trajectories import find_trajectories

    rules = BuildRules.load(rules_file)
    found = find_trajectories(source, image_dir=image_dir, limits=ImageLimits(max_pixels=max_image_pixels))
    report_failed(found.failed)
    trajectories = found.trajectories
    if cache is not None:
        apply_scores(trajectories, load_cache(cache))
    judged = JudgePass()
    if judge:
        scores, judged = _score(trajectories, judge, cfg, judge_tokens, quiet)
        if cache is not None and scores:
            save_cache(cache, scores)
    return trajectories, rules, judged, found.failed


_PARTIAL = re.compile(r"^\.(.+)\.\d+\.\d+\.tmp$")


@contextmanager
def writing_to(out: Path) -> Iterator[None]:
    """An OS error while the outputs are written is one line naming the file and the fix (not, say,
    ``IsADirectoryError`` on a temporary file's name)."""
    try:
        yield
    except OSError as exc:
        target = Path(exc.filename2 or exc.filename or out)
        partial = _PARTIAL.match(target.name)  # write_atomic's temporary file: name the file it makes
        target = target.with_name(partial.group(1)) if partial else target
        raise InputError(
            f"--out {out}: cannot write {target} ({exc.strerror or type(exc).__name__}); choose a folder "
            "you can write into, or remove what is in the way."
        ) from None


def _settings(settings: SettingsFlags, judge: str | None) -> PipelineConfig:
    """The settings, with the judge spec checked first (before anything heavy is imported)."""
    if judge:
        check_spec("--judge", judge, "vlm")
    return settings.resolve()


SOURCE_HELP = "A run folder, a folder of runs, a batch folder, or a folder of execution records."


def _source(given: dict[str, Path | None]) -> Path:
    source = given["input"] or given["from_"]
    if source is None:
        raise InputError(f"Missing option --input: {SOURCE_HELP[0].lower()}{SOURCE_HELP[1:]}")
    return source


with_input = with_flags(
    {
        "input": (Annotated[Path | None, typer.Option("--input", help=SOURCE_HELP)], None),
        "from_": (
            Annotated[
                Path | None, typer.Option("--from", hidden=True, callback=deprecated("--from", "--input"))
            ],
            None,
        ),
    },
    "source",
    _source,
)
"""``--input`` as in `batch` and `reward`; ``--from`` is its old, hidden spelling."""
ImageDirOpt = Annotated[
    Path | None, typer.Option(help="Base folder of record image paths \\[default: each record's folder].")
]
RulesOpt = Annotated[
    Path | None, typer.Option(help="YAML with filter thresholds and sampling (see docs/training-data.md).")
]
JudgeOpt = Annotated[
    str | None, typer.Option(help="VLM spec of a judge that scores attempts without scores.")
]
SeedOpt = Annotated[int, typer.Option(help="Seed of every random choice (cuts, resampling).")]
MaxPixelsOpt = Annotated[
    int,
    typer.Option(
        min=1,
        help="Most pixels (width x height) of an image read from the runs; a run with a larger one is left out.",
    ),
]


@app.command()
@with_settings()
@with_input
def build(
    settings: SettingsFlags,
    source: Path,
    out: Annotated[Path, typer.Option(help="Output folder (created).")],
    judge: JudgeOpt = None,
    seed: SeedOpt = 0,
    rules: RulesOpt = None,
    image_dir: ImageDirOpt = None,
    no_trl: Annotated[bool, typer.Option("--no-trl", help="Skip the TRL save_to_disk copies.")] = False,
    judge_max_new_tokens: JudgeTokensOption = JUDGE_TOKENS,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    max_image_pixels: MaxPixelsOpt = MAX_IMAGE_PIXELS,
) -> None:
    """Build planner SFT, critic SFT and critic RL data; write ShareGPT, EasyR1 and TRL copies.

    A run or record that cannot be read is left out with its reason (on stderr and in stats.json's
    failed_runs); the exit code is 1 only when no example was built."""
    from interleave_thinker.train.data.builder import build as build_examples
    from interleave_thinker.train.data.builder import write_canvas
    from interleave_thinker.train.data.export import export
    from interleave_thinker.train.data.scoring import save_errors
    from interleave_thinker.train.data.trl_format import datasets_bars

    check_out_folder(out)  # before the judge loads
    cfg = _settings(settings, judge)
    with writing_to(out):
        out.mkdir(parents=True, exist_ok=True)
    trajectories, build_rules, judged, failed = _gather(
        source, image_dir, rules, judge, out, cfg, judge_max_new_tokens, quiet, max_image_pixels
    )
    report_judge(judged, save_errors(out, judged.errors) if judged.asked else None)
    with tempfile.TemporaryDirectory() as tmp:
        canvas = write_canvas(Path(tmp) / "white.png")
        result = build_examples(
            trajectories, cfg.prompts.store().load(), canvas, rules=build_rules, seed=seed
        )
        with datasets_bars(show=not quiet or no_trl), writing_to(out):
            export(result, out, trl=not no_trl, failed=failed)
    print_stats(result.stats)
    typer.echo(f"wrote {out}")
    fail_if_useless(judged, sum(result.stats.examples.values()))


@app.command()
@with_settings()
@with_input
def stats(
    settings: SettingsFlags,
    source: Path,
    judge: JudgeOpt = None,
    seed: SeedOpt = 0,
    rules: RulesOpt = None,
    image_dir: ImageDirOpt = None,
    scores: Annotated[
        Path | None, typer.Option(help="A build folder whose judge_scores.json to reuse.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
    judge_max_new_tokens: JudgeTokensOption = JUDGE_TOKENS,
    max_image_pixels: MaxPixelsOpt = MAX_IMAGE_PIXELS,
) -> None:
    """Count what `data build` would keep, per rule, without writing anything."""
    from interleave_thinker.train.data.builder import build as build_examples
    from interleave_thinker.train.data.builder import write_canvas

    cfg = _settings(settings, judge)
    trajectories, build_rules, judged, _ = _gather(
        source, image_dir, rules, judge, scores, cfg, judge_max_new_tokens, max_image_pixels=max_image_pixels
    )
    report_judge(judged, None)
    with tempfile.TemporaryDirectory() as tmp:
        canvas = write_canvas(Path(tmp) / "white.png")
        result = build_examples(
            trajectories, cfg.prompts.store().load(), canvas, rules=build_rules, seed=seed
        )
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(result.stats), indent=2))
    else:
        print_stats(result.stats)
    fail_if_useless(judged, 1)


__all__ = ["InputError", "app"]


@app.command()
@with_settings()
def synth(
    settings: SettingsFlags,
    role: Annotated[SynthRole, typer.Option(help="Which agent's conversations to generate.")],
    out: Annotated[Path, typer.Option(help="Output folder: <role>_sft.json and images/.")],
    n: Annotated[int, typer.Option(min=1, help="Number of conversations.")] = 64,
    seed: SeedOpt = 0,
) -> None:
    """Generate a small synthetic SFT set in the release's formats (for the tiny configs and tests)."""
    from interleave_thinker.core.paths import check_folder, confine, write_atomic
    from interleave_thinker.train.data.export import sharegpt_record
    from interleave_thinker.train.synthetic import critic_examples, judge_examples, planner_examples

    check_out_folder(out)
    templates = settings.resolve().prompts.store().load()
    out = out.resolve()
    confine(out)
    check_folder(out / "images")  # a link planted there out of --out: refused before anything is written
    if role == "planner":
        examples = planner_examples(templates, n, seed=seed)
    elif role == "critic":
        examples = critic_examples(templates, n, out / "images", seed=seed)
    else:
        examples = judge_examples(templates, n, out / "images", seed=seed)
    path = out / f"{role}_sft.json"
    write_atomic(
        path, json.dumps([sharegpt_record(e, out) for e in examples], ensure_ascii=False, indent=2) + "\n"
    )
    typer.echo(f"wrote {len(examples)} {role} conversations ({templates.kind} templates) to {path}")
