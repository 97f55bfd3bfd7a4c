"""GRPO on the tiny models (CPU): the critic on the shared critic_rl fixture with the tiny generator and
a scripted judge, and the planner with the planner rewards."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.agents.judge import Judge
from interleave_thinker.backends import ScriptedVLMBackend
from interleave_thinker.backends.specs import load_image_backend
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.train.grpo import GRPORunConfig, build_grpo_trainer
from interleave_thinker.train.grpo.trainer import run_grpo
from interleave_thinker.train.rewards import CriticReward, StepwiseScorer

from .conftest import shared_path

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
    from interleave_thinker.train.tiny_format import ensure_format_trained_tiny

    return ensure_format_trained_tiny(templates=builtin_templates())


def test_critic_grpo_rewards_kl_and_resume_on_the_fixture(format_trained: Any, tmp_path: Path) -> None:
    config = critic_config(tmp_path, str(format_trained.critic), max_steps=2)
    generator = load_image_backend("tiny:generator")
    judge = ScriptedVLMBackend([judge_reply], repeat_last=True)
    trainer, closers = build_grpo_trainer(config, generator=generator, judge_backend=judge)
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

    # Resume from the step-2 checkpoint and continue the step count.
    resumed = run_grpo(critic_config(tmp_path, str(format_trained.critic), max_steps=3), resume=True)
    assert resumed.global_step == 3 and (resumed.final_model / "config.json").is_file()


def test_critic_grpo_moves_the_weights(format_trained: Any, tmp_path: Path) -> None:
    """On prompts the tiny critic was format-trained on, sampled rollouts differ, so advantages are non-zero."""
    import torch

    config = critic_config(tmp_path, str(format_trained.critic), max_steps=2, synthetic=True)
    trainer, closers = build_grpo_trainer(
        config,
        generator=load_image_backend("tiny:generator"),
        judge_backend=ScriptedVLMBackend([judge_reply], repeat_last=True),
    )
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
    trainer.train()
    for closer in closers:
        closer.close()
    stds = [e["reward_std"] for e in trainer.state.log_history if "reward_std" in e]
    changed = [
        k
        for k, v in trainer.model.named_parameters()
        if v.requires_grad and not torch.equal(before[k], v.detach())
    ]
    assert changed, f"no weight moved (reward std per step: {stds})"


def test_planner_grpo_runs_with_planner_rewards(format_trained: Any, tmp_path: Path) -> None:
    config = GRPORunConfig.model_validate(
        {
            "role": "planner",
            "output_dir": str(tmp_path / "planner"),
            "model": {"name_or_path": str(format_trained.planner)},
            "data": {"synthetic": 4},
            "training": {
                "num_generations": 2,
                "per_device_train_batch_size": 2,
                "max_steps": 2,
                "max_completion_length": 48,
                "bf16": False,
                "use_cpu": True,
                "report_to": "none",
                "save_steps": 2,
            },
        }
    )
    result = run_grpo(config)
    assert result.global_step == 2
    logged = [e for e in result.log_history if "rewards/planner_format/mean" in e]
    assert logged and all(0.0 <= e["rewards/planner_plan/mean"] <= 1.0 for e in logged)


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
