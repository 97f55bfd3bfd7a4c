"""`interleave-thinker judge` and `interleave-thinker reward`: score one edit, or saved critic rollouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from interleave_thinker.agents.judge import Judge
from interleave_thinker.backends.wrapping import close_backend
from interleave_thinker.cli.options import SettingsFlags, renamed, with_settings
from interleave_thinker.cli.progress import LoadingDisplay, counter_bar
from interleave_thinker.cli.specs import check_spec
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.storage import check_out_folder

console = Console(stderr=True)


PRESET_JUDGES = {"tiny": "tiny:judge"}
"""The judge a preset brings when ``--judge`` is not given: the tiny preset's is the tiny stand-in, so
evaluation runs offline (its scores mean nothing, and every page says so)."""

JUDGE_REQUIRED = (
    "--judge is required (a judge spec, e.g. openai:http://host:8000/v1#MODEL); "
    "offline, --preset tiny brings the stand-in tiny:judge."
)


def judge_or_preset(judge: str | None, settings: SettingsFlags) -> str | None:
    """``--judge`` as given, else the preset's judge (:data:`PRESET_JUDGES`), else None."""
    return judge or PRESET_JUDGES.get(str(settings.values.get("preset") or ""))


def load_judge(spec: str, cfg: PipelineConfig, max_new_tokens: int | None) -> Any:
    """A judge on the settings' device, transport and templates (shared with `data build`); ``None``
    tokens: the judge's own bound."""
    from interleave_thinker.agents.judge import Judge
    from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend

    templates = cfg.prompts.store().load()
    backend = load_vlm_backend(spec, BackendOptions.from_config(cfg), role="judge")
    return Judge(backend, templates, max_new_tokens=max_new_tokens)


def load_reward_judge(spec: str, cfg: PipelineConfig, max_new_tokens: int | None, text_first: bool) -> Any:
    """The step-wise reward's judge, built as ``train grpo`` builds it (``RewardSection.judge_agent``: the
    release's request); ``None`` tokens: the reward's bound (4096)."""
    from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend
    from interleave_thinker.train.grpo.config import RewardSection

    keys: dict[str, Any] = {"judge_text_first": text_first}
    if max_new_tokens is not None:
        keys["judge_max_new_tokens"] = max_new_tokens
    backend = load_vlm_backend(spec, BackendOptions.from_config(cfg), role="judge")
    return RewardSection(**keys).judge_agent(backend, cfg.prompts.store().load())


JudgeTokensOption = Annotated[int, typer.Option(min=1, help="Judge reply length bound (tokens).")]
JUDGE_TOKENS = Judge.DEFAULT_MAX_NEW_TOKENS
"""``JudgeTokensOption``'s default: the judge agent's own reply bound (one source)."""


@with_settings()
def judge(
    settings: SettingsFlags,
    before: Annotated[Path, typer.Option(help="Image before the step (a white canvas for text-to-image).")],
    after: Annotated[Path, typer.Option(help="Image after the step.")],
    instruction: Annotated[str, typer.Option(help="The step's planned prompt.")],
    judge: Annotated[str, typer.Option("--judge", help="VLM backend spec of the judge.")] = "tiny:judge",
    max_new_tokens: JudgeTokensOption = JUDGE_TOKENS,
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


RewardInputOption = Annotated[
    Path,
    typer.Option(
        "--input", help="JSONL of critic rollouts, or the release's critic_rl rows (docs/training-data.md)."
    ),
]
CriticSpecOption = Annotated[
    str | None,
    typer.Option(help="VLM backend spec that answers rows without a response (release critic_rl rows)."),
]
RewardJudgeTokensOption = Annotated[
    int | None,
    typer.Option(min=1, help="Judge reply length bound (tokens) \\[default: the GRPO reward's, 4096]."),
]


def answer_missing(
    rows: list[Any], critic: str | None, cfg: PipelineConfig, base_dir: Path, batch: int
) -> None:
    """Rows without a ``response`` (the release's ``critic_rl`` prompts) answered by ``--critic``."""
    from interleave_thinker.agents.critic import Critic
    from interleave_thinker.backends.specs import BackendOptions, load_vlm_backend
    from interleave_thinker.cli.reward_rows import answer_rows, unanswered

    to_answer = unanswered(rows, critic)
    if not to_answer or critic is None:
        return
    with LoadingDisplay(console, f"loading the critic {critic}"):
        backend = load_vlm_backend(critic, BackendOptions.from_config(cfg), role="critic")
    with LoadingDisplay(console, f"asking the critic about {len(to_answer)} row(s) without a response"):
        answer_rows(
            backend, to_answer, base_dir, max_new_tokens=Critic.DEFAULT_MAX_NEW_TOKENS, batch_size=batch
        )
    close_backend(backend)


JudgeOrderOption = Annotated[
    bool,
    typer.Option(
        "--judge-text-first/--judge-images-first",
        help="The judge's turn: the text, then the images, as the release's reward sends it (GRPO's "
        "reward.judge_text_first); or the images first, as `judge` and `data build` ask.",
    ),
]
SampleConcurrencyOption = Annotated[
    int, typer.Option(min=1, help="Rollouts scored at once (as the GRPO key reward.sample_concurrency).")
]


@with_settings()
@renamed("sample_concurrency", SampleConcurrencyOption, 64, "--batch-size", int)
def reward(
    settings: SettingsFlags,
    input: RewardInputOption,
    generator: Annotated[str, typer.Option(help="Image backend spec used for regeneration.")],
    judge: Annotated[str, typer.Option("--judge", help="VLM backend spec of the judge.")],
    out: Annotated[Path, typer.Option(help="Output JSONL: each input line plus overall and its components.")],
    critic: CriticSpecOption = None,
    sample_concurrency: int = 64,
    deadline: Annotated[float, typer.Option(help="Seconds per sample before it scores 0.5/0.5.")] = 70.0,
    max_new_tokens: RewardJudgeTokensOption = None,
    judge_text_first: JudgeOrderOption = True,
) -> None:
    """Score saved critic rollouts offline with the release's critic reward, in input order."""
    from interleave_thinker.backends.specs import BackendOptions, load_image_backend
    from interleave_thinker.cli.reward_rows import read_reward_rows, score_rows
    from interleave_thinker.core.paths import write_atomic
    from interleave_thinker.train.rewards import CriticReward, StepwiseScorer

    check_spec("--generator", generator, "image")
    check_spec("--judge", judge, "vlm")
    if critic is not None:
        check_spec("--critic", critic, "vlm")
    check_out_folder(out.parent)
    cfg = settings.resolve()
    rows = read_reward_rows(input)
    if not rows:
        console.print(escape(f"error: {input} holds no rollouts; nothing to score."))
        raise typer.Exit(1)
    answer_missing(rows, critic, cfg, input.parent, sample_concurrency)
    with LoadingDisplay(console, f"loading the generator {generator} and the judge {judge}"):
        scorer = StepwiseScorer(
            load_image_backend(generator, BackendOptions.from_config(cfg)),
            load_reward_judge(judge, cfg, max_new_tokens, judge_text_first),
            deadline=deadline,
            base_dir=input.parent,
        )
    progress = counter_bar(console, "scoring")
    with progress:
        task = progress.add_task("score", total=len(rows))
        lines, counts = score_rows(
            CriticReward(scorer), rows, sample_concurrency, lambda n: progress.advance(task, n)
        )
    judged, failed = counts["scored"] + counts["failed"], counts["failed"]
    scorer.close()
    for backend in (scorer.generator, scorer.judge.backend):  # a served judge holds connections
        close_backend(backend)
    write_atomic(out, "\n".join(lines) + ("\n" if lines else ""))
    mean = sum(json.loads(line)["overall"] for line in lines) / max(1, len(lines))
    console.print(escape(f"scored {len(lines)} rollouts, mean overall {mean:.4f} -> {out}"))
    if failed:
        console.print(escape(f"{failed} of {judged} step-wise scoring(s) failed (reward_error in {out})."))
    if judged and failed == judged:
        console.print("error: every step-wise scoring failed; semantic and quality are all 0.5.")
        if judge.startswith("tiny:"):  # its SC reply breaks on long instructions, whatever the token bound
            console.print(
                "The tiny judge learnt short instructions only; judge real rows with a served judge "
                "(--judge openai:URL or gemini:MODEL), see docs/training-data.md (Rows `reward` reads)."
            )
        raise typer.Exit(1)
