"""Time per GRPO step on the tiny critic, split into rollout generation, reward (generator + judge) and
update, with concurrent vs sequential reward scoring. Run: python benchmarks/bench_grpo.py

Uses the format-trained tiny critic (built and cached on first use), the tiny FLUX.2-klein generator and
a judge that sleeps 40 ms per call (a served judge's latency), 4 prompts x 4 rollouts per step.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

from _sim import SimVLM
from interleave_thinker.backends.specs import load_image_backend
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.tiny.format_trained import ensure_format_trained_tiny
from interleave_thinker.train.grpo import GRPORunConfig, build_grpo_trainer


def judge_reply(messages: list[dict[str, Any]]) -> str:
    image = SimVLM.images_in(messages)[-1]
    value = int(hashlib.sha256(image.tobytes()).hexdigest(), 16)
    return f'{{"score": [{value % 11}, {(value // 11) % 11}]}}'


def run(sequential: bool, critic: Path, out: Path) -> dict[str, float]:
    reward: dict[str, Any] = {"judge_max_new_tokens": 16}
    if sequential:
        reward |= {"generator_concurrency": 1, "judge_concurrency": 1, "sample_concurrency": 1}
    config = GRPORunConfig.model_validate(
        {
            "role": "critic",
            "output_dir": str(out),
            "model": {"name_or_path": str(critic), "image_max_pixels": 16384},
            "data": {"synthetic": 16},
            "reward": reward,
            "training": {
                "learning_rate": 1e-4,
                "num_generations": 4,
                "per_device_train_batch_size": 16,
                "max_steps": 3,
                "max_completion_length": 64,
                "bf16": False,
                "use_cpu": True,
                "report_to": "none",
                "save_steps": 100,
            },
        }
    )
    judge = SimVLM(judge_reply, 0.040, 8, "judge")
    trainer, closers = build_grpo_trainer(
        config, generator=load_image_backend("tiny:generator"), judge_backend=judge
    )
    generate = trainer.model.generate
    spent = {"generate": 0.0}

    def timed_generate(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            spent["generate"] += time.perf_counter() - start

    trainer.model.generate = timed_generate
    trainer.train()
    for closer in closers:
        closer.close()
    logs = [e for e in trainer.state.log_history if "step_time" in e][1:]  # the first step warms caches up
    step = sum(e["step_time"] for e in logs) / len(logs)
    reward_s = sum(e["reward_seconds/critic_reward"] for e in logs) / len(logs)
    generation = spent["generate"] / len(trainer.state.log_history)
    return {
        "step": step,
        "generation": generation,
        "reward": reward_s,
        "update": max(0.0, step - generation - reward_s),
    }


def main() -> None:
    critic = ensure_format_trained_tiny(templates=builtin_templates()).critic
    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            name: run(name == "sequential", critic, Path(tmp) / name) for name in ("sequential", "concurrent")
        }
    print(
        "GRPO step on the tiny critic (16 rollouts per step: 4 synthetic prompts x 4, half of them regenerated), seconds per step"
    )
    print(f"{'':14}{'sequential':>12}{'concurrent':>12}")
    for key in ("step", "generation", "reward", "update"):
        print(f"{key:14}{rows['sequential'][key]:>12.3f}{rows['concurrent'][key]:>12.3f}")
    print(f"reward speed-up {rows['sequential']['reward'] / max(rows['concurrent']['reward'], 1e-9):.1f}x")


if __name__ == "__main__":
    main()
