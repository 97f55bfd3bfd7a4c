"""`interleave-thinker judge` and `interleave-thinker reward`: score one edit, or saved critic rollouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.cli.options import SettingsFlags, with_settings
from interleave_thinker.cli.progress import LoadingDisplay, counter_bar
from interleave_thinker.cli.specs import check_spec
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import InputError

console = Console(stderr=True)
REQUIRED = ("response", "ground_truth", "origin_prompt", "origin_image_path", "previous_prompt")


def load_judge(spec: str, cfg: PipelineConfig, max_new_tokens: int) -> Any:
    """A judge on the settings' device, transport and templates (shared with `data build`)."""
    from interleave_thinker.agents.judge import Judge
    from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend

    templates = cfg.prompts.store().load()
    backend = load_vlm_backend(spec, BackendOptions.from_config(cfg), role="judge")
    return Judge(backend, templates, max_new_tokens=max_new_tokens)


JudgeTokensOption = Annotated[int, typer.Option(min=1, help="Judge reply length bound (tokens).")]


@with_settings()
def judge(
    settings: SettingsFlags,
    before: Annotated[Path, typer.Option(help="Image before the step (a white canvas for text-to-image).")],
    after: Annotated[Path, typer.Option(help="Image after the step.")],
    instruction: Annotated[str, typer.Option(help="The step's planned prompt.")],
    judge: Annotated[str, typer.Option("--judge", help="VLM backend spec of the judge.")] = "tiny:judge",
    max_new_tokens: JudgeTokensOption = 1024,
) -> None:
    """Score one edit: semantic consistency (SC), perceptual quality (PQ) and sqrt(SC*PQ), as JSON."""
    from interleave_thinker.runtime.pipeline import load_input_images

    check_spec("--judge", judge, "vlm")
    cfg = settings.resolve()
    before_image, after_image = load_input_images([before, after])
    with LoadingDisplay(console, f"loading the judge {judge}"):  # a tiny one is built once, with its bar
        scorer = load_judge(judge, cfg, max_new_tokens)
    with LoadingDisplay(console, "judging: semantic consistency, then perceptual quality"):
        result = scorer.judge(before_image, after_image, instruction)
    typer.echo(json.dumps(result.as_dict(), indent=2))
    if not result.ok:
        console.print('error: the judgement failed (see "error" above); no score was produced.')
        raise typer.Exit(1)


def read_rollouts(path: Path) -> list[dict[str, Any]]:
    """JSONL rollouts; every problem names the file, the line and the field."""
    if not path.is_file():
        raise InputError(f"Rollout file {path} does not exist.")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg}).") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{number}: each line must be a JSON object.")
        if "ground_truth" not in row and "evaluation" in row:
            row["ground_truth"] = row["evaluation"]
        if "previous_prompt" not in row and "rewritten_prompt" in row:
            row["previous_prompt"] = row["rewritten_prompt"]
        for field in REQUIRED:
            if field not in row:
                raise InputError(f"{path}:{number}: {field}: missing (needed by the critic reward).")
        truth = row["ground_truth"]
        if not isinstance(truth, dict) or "success" not in truth:
            raise InputError(f"{path}:{number}: ground_truth: needs success, semantics and quality.")
        rows.append(row)
    return rows


@with_settings()
def reward(
    settings: SettingsFlags,
    input: Annotated[
        Path, typer.Option("--input", help="JSONL of critic rollouts (release reward-input fields).")
    ],
    generator: Annotated[str, typer.Option(help="Image backend spec used for regeneration.")],
    judge: Annotated[str, typer.Option("--judge", help="VLM backend spec of the judge.")],
    out: Annotated[Path, typer.Option(help="Output JSONL: each input line plus overall and its components.")],
    batch_size: Annotated[int, typer.Option(min=1, help="Rollouts scored concurrently.")] = 64,
    deadline: Annotated[float, typer.Option(help="Seconds per sample before it scores 0.5/0.5.")] = 70.0,
    max_new_tokens: JudgeTokensOption = 1024,
) -> None:
    """Score saved critic rollouts offline with the release's critic reward, in input order."""
    from interleave_thinker.backends.specs import BackendOptions, load_image_backend
    from interleave_thinker.core.paths import write_atomic
    from interleave_thinker.train.rewards import CriticReward, StepwiseScorer

    check_spec("--generator", generator, "image")
    check_spec("--judge", judge, "vlm")
    cfg = settings.resolve()
    rows = read_rollouts(input)
    if not rows:
        console.print(escape(f"error: {input} holds no rollouts; nothing to score."))
        raise typer.Exit(1)
    with LoadingDisplay(console, f"loading the generator {generator} and the judge {judge}"):
        scorer = StepwiseScorer(
            load_image_backend(generator, BackendOptions.from_config(cfg)),
            load_judge(judge, cfg, max_new_tokens),
            deadline=deadline,
            base_dir=input.parent,
        )
    reward_fn = CriticReward(scorer)
    lines: list[str] = []
    judged = failed = 0
    progress = counter_bar(console, "scoring")
    with progress:
        task = progress.add_task("score", total=len(rows))
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            columns = {field: [r[field] for r in batch] for field in REQUIRED[1:]}
            reward_fn(None, [r["response"] for r in batch], **columns)
            for row, parts in zip(batch, reward_fn.last_components, strict=True):
                asked = parts["error"] is not None or parts["sc_new"] is not None  # successes are skipped
                judged, failed = judged + asked, failed + (asked and parts["error"] is not None)
                keep = {k: parts[k] for k in ("overall", "format", "accuracy", "semantic", "quality")}
                lines.append(json.dumps(row | keep | {"reward_error": parts["error"]}, ensure_ascii=False))
            progress.advance(task, len(batch))
    scorer.close()
    write_atomic(out, "\n".join(lines) + ("\n" if lines else ""))
    mean = sum(json.loads(line)["overall"] for line in lines) / max(1, len(lines))
    console.print(escape(f"scored {len(lines)} rollouts, mean overall {mean:.4f} -> {out}"))
    if failed:
        console.print(escape(f"{failed} of {judged} step-wise scoring(s) failed (reward_error in {out})."))
    if judged and failed == judged:
        console.print("error: every step-wise scoring failed; semantic and quality are all 0.5.")
        raise typer.Exit(1)
