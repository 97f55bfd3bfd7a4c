"""`interleave-thinker data validate|build|stats`: check, build and count training data."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from interleave_thinker.core.errors import InputError
from interleave_thinker.train.data.issues import DatasetError

app = typer.Typer(help="Validate, build and count training data.", no_args_is_help=True)
MAX_ERRORS = 20


class DataKind(StrEnum):
    planner_sft = "planner_sft"
    critic_sft = "critic_sft"
    critic_rl = "critic_rl"
    record = "record"


def summarize(kind: str, examples: list[Any]) -> list[str]:
    """A few lines that tell whether a file holds what it should."""
    from interleave_thinker.core.parsing import parse_plan, parse_verdict

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
    from interleave_thinker.train.data.loaders import load_kind

    try:
        examples = load_kind(file, kind.value, image_dir=image_dir)
    except DatasetError as exc:
        for issue in exc.issues[:MAX_ERRORS]:
            typer.echo(str(issue), err=True)
        if len(exc.issues) > MAX_ERRORS:
            typer.echo(f"... and {len(exc.issues) - MAX_ERRORS} more problem(s)", err=True)
        raise typer.Exit(1) from None
    for line in summarize(kind.value, examples):
        typer.echo(line)


def _gather(
    source: Path, image_dir: Path | None, rules_file: Path | None, judge: str | None, cache: Path | None
) -> tuple[Any, Any, list[str]]:
    from interleave_thinker.train.data.rules import BuildRules
    from interleave_thinker.train.data.scoring import apply_scores, load_cache, save_cache, score_missing
    from interleave_thinker.train.data.trajectories import discover

    rules = BuildRules.load(rules_file)
    trajectories = discover(source, image_dir=image_dir)
    if cache is not None:
        apply_scores(trajectories, load_cache(cache))
    errors: list[str] = []
    if judge:
        from interleave_thinker.agents.judge import Judge
        from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend
        from interleave_thinker.core.prompt_store import TemplateStore

        backend = load_vlm_backend(judge, BackendOptions(), role="judge")
        scores, errors = score_missing(trajectories, Judge(backend, TemplateStore().load()))
        if cache is not None and scores:
            save_cache(cache, scores)
    return trajectories, rules, errors


def _print_stats(stats: Any) -> None:
    data = dataclasses.asdict(stats)
    typer.echo(
        f"trajectories: {data['trajectories']}, steps: {data['steps']}, attempts: {data['attempts']}, unscored steps: {data['unscored_steps']}"
    )
    typer.echo("rules matched (steps): " + ", ".join(f"{k} {v}" for k, v in data["rules"].items()))
    typer.echo("pools (steps): " + ", ".join(f"{k} {v}" for k, v in data["pools"].items()))
    typer.echo("examples: " + ", ".join(f"{k} {v}" for k, v in data["examples"].items()))
    for name, counts in data["labels"].items():
        typer.echo(f"labels {name}: true {counts['true']}, false {counts['false']}")


FromOpt = Annotated[
    Path, typer.Option("--from", help="A run folder, a folder of runs, or a folder of execution records.")
]
ImageDirOpt = Annotated[
    Path | None, typer.Option(help="Base folder of record image paths \\[default: each record's folder].")
]
RulesOpt = Annotated[
    Path | None, typer.Option(help="YAML with filter thresholds and sampling (see docs/training.md).")
]
JudgeOpt = Annotated[
    str | None, typer.Option(help="VLM spec of a judge that scores attempts without scores.")
]
SeedOpt = Annotated[int, typer.Option(help="Seed of every random choice (cuts, resampling).")]


@app.command()
def build(
    source: FromOpt,
    out: Annotated[Path, typer.Option(help="Output folder (created).")],
    judge: JudgeOpt = None,
    seed: SeedOpt = 0,
    rules: RulesOpt = None,
    image_dir: ImageDirOpt = None,
    no_trl: Annotated[bool, typer.Option("--no-trl", help="Skip the TRL save_to_disk copies.")] = False,
) -> None:
    """Build planner SFT, critic SFT and critic RL data; write ShareGPT, EasyR1 and TRL copies."""
    from interleave_thinker.core.prompt_store import TemplateStore
    from interleave_thinker.train.data.builder import build as build_examples
    from interleave_thinker.train.data.builder import write_canvas
    from interleave_thinker.train.data.export import export

    out.mkdir(parents=True, exist_ok=True)
    trajectories, build_rules, errors = _gather(source, image_dir, rules, judge, out)
    for error in errors[:MAX_ERRORS]:
        typer.echo(f"judge: {error[:300]}", err=True)
    with tempfile.TemporaryDirectory() as tmp:
        canvas = write_canvas(Path(tmp) / "white.png")
        result = build_examples(trajectories, TemplateStore().load(), canvas, rules=build_rules, seed=seed)
        export(result, out, trl=not no_trl)
    _print_stats(result.stats)
    typer.echo(f"wrote {out}")


@app.command()
def stats(
    source: FromOpt,
    judge: JudgeOpt = None,
    seed: SeedOpt = 0,
    rules: RulesOpt = None,
    image_dir: ImageDirOpt = None,
    scores: Annotated[
        Path | None, typer.Option(help="A build folder whose judge_scores.json to reuse.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
) -> None:
    """Count what `data build` would keep, per rule, without writing anything."""
    from interleave_thinker.core.prompt_store import TemplateStore
    from interleave_thinker.train.data.builder import build as build_examples
    from interleave_thinker.train.data.builder import write_canvas

    trajectories, build_rules, _ = _gather(source, image_dir, rules, judge, scores)
    with tempfile.TemporaryDirectory() as tmp:
        canvas = write_canvas(Path(tmp) / "white.png")
        result = build_examples(trajectories, TemplateStore().load(), canvas, rules=build_rules, seed=seed)
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(result.stats), indent=2))
    else:
        _print_stats(result.stats)


__all__ = ["InputError", "app"]


class SynthRole(StrEnum):
    planner = "planner"
    critic = "critic"


@app.command()
def synth(
    role: Annotated[SynthRole, typer.Option(help="Which agent's conversations to generate.")],
    out: Annotated[Path, typer.Option(help="Output folder: <role>_sft.json and images/.")],
    n: Annotated[int, typer.Option(min=1, help="Number of conversations.")] = 64,
    seed: SeedOpt = 0,
) -> None:
    """Generate a small synthetic SFT set in the release's formats (for the tiny configs and tests)."""
    from interleave_thinker.core.paths import write_atomic
    from interleave_thinker.core.prompt_store import TemplateStore
    from interleave_thinker.train.data.export import sharegpt_record
    from interleave_thinker.train.synthetic import critic_examples, planner_examples

    templates = TemplateStore().load()
    out = out.resolve()
    if role is SynthRole.planner:
        examples = planner_examples(templates, n, seed=seed)
    else:
        examples = critic_examples(templates, n, out / "images", seed=seed)
    path = out / f"{role.value}_sft.json"
    write_atomic(
        path, json.dumps([sharegpt_record(e, out) for e in examples], ensure_ascii=False, indent=2) + "\n"
    )
    typer.echo(f"wrote {len(examples)} {role.value} conversations ({templates.kind} templates) to {path}")
