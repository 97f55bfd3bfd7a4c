"""GRPO on the tiny models (CPU): the critic on the shared critic_rl fixture with the tiny generator and
a scripted judge, and the planner with the planner rewards."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.agents.judge import Judge
from interleave_thinker.backends.specs import load_image_backend
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.testing.scripted import ScriptedVLMBackend
from interleave_thinker.train.grpo import GRPORunConfig, build_grpo_trainer
from interleave_thinker.train.grpo.trainer import run_grpo
from interleave_thinker.train.rewards import CriticReward, StepwiseScorer
from tests.conftest import shared_path
from tests.helpers.common import REPO

pytestmark = pytest.mark.slow


def judge_reply(messages: list[dict[str, Any]]) -> str:
    """Scores that depend on the regenerated image, so different refine prompts score differently."""
    images = ScriptedVLMBackend.images_in(messages)
    value = int(hashlib.sha256(images[-1].tobytes()).hexdigest(), 16)
    return f'{{"score": [{value % 11}, {(value // 11) % 11}]}}'


def critic_config(tmp_path: Path, model: str, max_steps: int, *, synthetic: bool = False) -> GRPORunConfig:
    data = (
        {"synthetic": 12}
        if synthetic
        else {"train": [str(shared_path("fixtures", "train-data", "critic_rl.jsonl"))]}
    )
    return GRPORunConfig.model_validate(
        {
            "role": "critic",
            "output_dir": str(tmp_path / "grpo"),
            "model": {"name_or_path": model, "image_max_pixels": 16384},
            "data": data,
            "reward": {"regenerate_size": None},  # the "before" size: the release's 1024x1024 is slow here
            "training": {
                "learning_rate": 1e-3,
                "num_generations": 4,
                "per_device_train_batch_size": 12,  # all three fixture prompts in every step
                "max_steps": max_steps,
                "max_completion_length": 64,
                "bf16": False,
                "use_cpu": True,
                "report_to": "none",
                "save_steps": 2,
            },
        }
    )


@pytest.fixture(scope="module")
def format_trained() -> Any:
    from interleave_thinker.tiny.format_trained import ensure_format_trained_tiny

    return ensure_format_trained_tiny(templates=builtin_templates())


@pytest.fixture(scope="module")
def critic_start(format_trained: Any) -> Path:
    """The shipped tiny critic. The fixture's rows are rebuilt from the critic template the run loads
    (``data.critic_prompt: template``, as released; offline here: the built-in one), which is the template
    this critic was format-trained on, so its rollouts parse and their rewards vary. (A critic adapted to the
    released template was built here before the rows were rebuilt: 226 s, and it was then asked in the
    built-in template's words.)"""
    return Path(format_trained.critic)


def test_critic_grpo_rewards_kl_and_resume_on_the_fixture(critic_start: Path, tmp_path: Path) -> None:
    import torch

    config = critic_config(tmp_path, str(critic_start), max_steps=2)
    generator = load_image_backend("tiny:generator")
    judge = ScriptedVLMBackend([judge_reply], repeat_last=True)
    trainer, closers = build_grpo_trainer(config, generator=generator, judge_backend=judge)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
    calls: list[tuple[list[Any], dict[str, Any], list[float]]] = []
    original = trainer.reward_funcs[0]

    def recording(prompts: Any, completions: list[Any], **columns: Any) -> list[float]:
        values = original(prompts, completions, **columns)
        calls.append(
            (
                completions,
                {
                    k: columns[k]
                    for k in ("ground_truth", "origin_prompt", "origin_image_path", "previous_prompt")
                },
                values,
            )
        )
        return values

    recording.__name__ = original.__name__
    trainer.reward_funcs[0] = recording
    trainer.train()
    for closer in closers:
        closer.close()

    # Rewards computed in training equal the reward function called directly on the same completions.
    assert calls
    direct = CriticReward(
        StepwiseScorer(
            generator, Judge(ScriptedVLMBackend([judge_reply], repeat_last=True), builtin_templates())
        )
    )
    for completions, columns, values in calls:
        assert direct(None, completions, **columns) == pytest.approx(values)
    logs = [entry for entry in trainer.state.log_history if "kl" in entry]
    assert logs and all("rewards/critic_format/mean" in entry for entry in logs)
    assert any("reward_seconds/critic_reward" in entry for entry in logs)
    assert logs[-1]["kl"] > 0  # after one update the policy differs from the frozen reference

    # The rollouts' rewards differ, so the policy moves.
    assert any(entry["reward_std"] > 0 for entry in logs)
    changed = [
        k
        for k, v in trainer.model.named_parameters()
        if v.requires_grad and not torch.equal(before[k], v.detach())
    ]
    assert changed, "no weight moved"
    assert [k for k in changed if "visual" in k], (
        "the vision tower did not train (the release's GRPO trains it)"
    )

    # Resume from the step-2 checkpoint and continue the step count.
    resumed = run_grpo(critic_config(tmp_path, str(critic_start), max_steps=3), resume=True)
    assert resumed.global_step == 3 and (resumed.final_model / "config.json").is_file()
    # The saved critic carries the tower's change: loaded for inference, its vision weights are not the start's.
    from safetensors.torch import load_file

    start = load_file(str(critic_start / "model.safetensors"))
    saved = load_file(str(resumed.final_model / "model.safetensors"))
    tower = [k for k in start if "visual" in k and k in saved]
    assert tower and any(not torch.equal(start[k], saved[k].to(start[k].dtype)) for k in tower)


def planner_config(
    model: Path,
    output_dir: Path,
    steps: int,
    completion: int,
    model_keys: dict[str, Any] | None = None,
    **sections: Any,
) -> GRPORunConfig:
    """A tiny planner run on ``2 * steps`` synthetic prompts, two rollouts each, on the CPU."""
    return GRPORunConfig.model_validate(
        {
            "role": "planner",
            "output_dir": str(output_dir),
            "model": {"name_or_path": str(model), **(model_keys or {})},
            "data": {"synthetic": 2 * steps},
            "training": {
                "num_generations": 2,
                "per_device_train_batch_size": 2,
                "max_steps": steps,
                "max_completion_length": completion,
                "bf16": False,
                "use_cpu": True,
                "report_to": "none",
                "save_steps": steps,
            },
            **sections,
        }
    )


def test_planner_grpo_runs_with_planner_rewards(format_trained: Any, tmp_path: Path) -> None:
    result = run_grpo(planner_config(format_trained.planner, tmp_path / "planner", 2, 48))
    assert result.global_step == 2
    logged = [e for e in result.log_history if "rewards/planner_format/mean" in e]
    assert logged and all(0.0 <= e["rewards/planner_plan/mean"] <= 1.0 for e in logged)


def test_grpo_lora_adapts_the_named_projections_in_the_language_model_only(
    format_trained: Any, tmp_path: Path
) -> None:
    """``finetune.lora.target_modules`` promises the vision tower is never adapted: ``linear_fc1`` names
    layers of the tiny model's vision tower and merger only, so it must adapt nothing there; and
    ``finetune.lora.merge`` writes the merged model, as in SFT."""
    from safetensors import safe_open

    lora = {"r": 4, "target_modules": ["q_proj", "linear_fc1"], "merge": True}
    frozen = {
        "freeze_vision_tower": True,
        "freeze_projector": True,
    }  # no tower to save whole beside the adapter
    config = planner_config(
        format_trained.planner, tmp_path / "lora", 1, 16, frozen, finetune={"method": "lora", "lora": lora}
    )
    result = run_grpo(config)
    assert result.global_step == 1
    with safe_open(str(result.output_dir / "adapter_model.safetensors"), "pt") as saved:
        names = saved.keys()
    adapted = {name.split(".lora_")[0] for name in names}
    assert adapted and all(key.endswith("q_proj") for key in adapted), sorted(adapted)
    assert not [key for key in adapted if "visual" in key]
    # finetune.lora.merge is honoured as in SFT: a standalone full model beside the adapter
    assert result.adapter and result.merged_dir == result.output_dir / "merged"
    assert (result.merged_dir / "model.safetensors").is_file()
    assert not (result.output_dir / "model.safetensors").exists()


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    from interleave_thinker.core.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text(
        "role: critic\noutput_dir: x\nmodel: {name_or_path: tiny:critic}\ndata: {synthetic: 2}\ntraining: {num_generatons: 4}\n"
    )
    with pytest.raises(ConfigError, match=r"unknown key 'training\.num_generatons'"):
        GRPORunConfig.load(path)
    path.write_text(
        "role: critic\noutput_dir: x\nmodel: {name_or_path: tiny:critic}\ndata: {synthetic: 2}\ntraining: {num_generations: 3, per_device_train_batch_size: 4}\n"
    )
    with pytest.raises(ConfigError, match="multiple of num_generations"):
        GRPORunConfig.load(path)
    path.write_text(
        "role: critic\noutput_dir: x\nmodel: {name_or_path: tiny:critic}\ndata: {synthetic: 2}\ntraining: {eval_steps: 5}\n"
    )
    with pytest.raises(ConfigError, match=r"eval_steps needs held-out prompts: set data\.eval"):
        GRPORunConfig.load(path)
    path.write_text(
        "role: critic\noutput_dir: x\nmodel: {name_or_path: tiny:critic}\ndata: {synthetic: 8, eval_synthetic: 4}\n"
        "training: {num_generations: 4, per_device_train_batch_size: 8, per_device_eval_batch_size: 6}\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"per_device_eval_batch_size \(6\) must be a multiple of num_generations_eval \(4\)",
    ):
        GRPORunConfig.load(path)


LEARNING_RUNS = ((0, 42),)
"""(warm start seed, GRPO seed) of the learning run. One pair: the design starts every pair from the same
measured place, and the sweep over seven pairs, which all clear both margins, is an experiment, not a
test: ``benchmarks/bench_grpo_learning.py`` runs it, and with ``--flip`` (every advantage's sign
flipped) what this pair gives when GRPO is broken (docs/notes/learning-test.md, "The seed sweep")."""


def learning_run(critic: Path, work: Path, warm_seed: int, grpo_seed: int) -> dict[str, float]:
    """``tests/helpers/grpo_learning.py`` in a child with the tiny builds' pinned numerics: its held-out scores."""
    import json
    import subprocess
    import sys

    from interleave_thinker.tiny.pinned import pinned_env
    from tests.helpers.grpo_learning import RESULT_PREFIX

    args = {"critic": str(critic), "work": str(work), "warm_seed": warm_seed, "grpo_seed": grpo_seed}
    child = subprocess.run(
        [sys.executable, str(REPO / "tests" / "helpers" / "grpo_learning.py"), json.dumps(args)],
        env=pinned_env(),
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    lines = [ln for ln in child.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    assert child.returncode == 0 and lines, (child.returncode, child.stdout[-3000:], child.stderr[-3000:])
    return {k: float(v) for k, v in json.loads(lines[-1][len(RESULT_PREFIX) :]).items()}


def test_grpo_raises_held_out_accuracy_on_a_learnable_task(format_trained: Any, tmp_path: Path) -> None:
    """The verdict is written in each prompt ([ok]/[bad], restated as its last line) and the warm start
    taught the opposite verdict, repeated until the start is measurably wrong on held-out prompts (mean
    accuracy at most 0.15); GRPO with format + accuracy rewards must move the critic towards the cue: on
    every seed pair, the mean accuracy reward on 16 held-out prompts (subjects no train row has, 4 samples
    each) must rise by at least 0.3 over the starting checkpoint, and the accuracy of the well-formed
    answers by 0.2 (so the gain is not only repaired formatting). Each run is a child process with pinned
    numerics (``tests/helpers/grpo_learning.py``), so it computes the same bits on every x86 machine with AVX2.
    About 4 minutes on 2 cores."""
    for warm_seed, grpo_seed in LEARNING_RUNS:
        r = learning_run(
            format_trained.critic, tmp_path / f"run-{warm_seed}-{grpo_seed}", warm_seed, grpo_seed
        )
        print(
            f"seeds ({warm_seed}, {grpo_seed}): held-out mean accuracy reward {r['before']:.3f} -> "
            f"{r['after']:.3f}; accuracy of well-formed answers {r['before_formed']:.3f} -> {r['after_formed']:.3f}"
        )
        assert r["after"] >= r["before"] + 0.3, (warm_seed, grpo_seed, r)
        assert r["after_formed"] >= r["before_formed"] + 0.2, (warm_seed, grpo_seed, r)


CONFIGS = REPO / "configs"


def test_shipped_release_config_has_the_release_settings() -> None:
    config = GRPORunConfig.load(CONFIGS / "grpo_critic.yaml")
    t = config.training
    assert (t.num_generations, t.temperature, t.learning_rate, t.beta, t.max_completion_length) == (
        8,
        1.0,
        2e-6,
        0.0,  # the release's disable_kl: true (docs/notes/release-settings.md)
        4096,
    )
    assert config.reward.stepwise and config.reward.deadline == 70.0


def test_shipped_tiny_critic_config_trains_and_evaluates_from_the_cli(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from interleave_thinker.cli.main import app

    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "grpo",
            "--role",
            "critic",
            "--config",
            str(CONFIGS / "grpo_critic_tiny.yaml"),
            "--output-dir",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "trained 4 steps" in result.output and "held-out mean reward" in result.output
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    history = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "eval_rewards/critic_accuracy/mean" in e] == [2, 4]
    # The format-trained tiny critic's rollouts differ, so GRPO has something to learn from.
    assert any(e.get("reward_std", 0) > 0 for e in history)
    # The tiny judge answers the reward's text-first SC and PQ requests (tiny/formats.py): in most logged
    # steps that asked it (a step whose prompt's ground truth is a success skips the judge), samples were
    # scored by it, not given the 0.5 fallback.
    counts = [(e["stepwise/scored"], e["stepwise/failed"]) for e in history if "stepwise/scored" in e]
    asked = [scored for scored, failed in counts if scored + failed > 0]
    assert asked and sum(scored > 0 for scored in asked) > len(asked) / 2, counts
    assert (out / "model.safetensors").is_file()
