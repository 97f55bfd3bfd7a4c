"""The GRPO learning run of ``test_grpo.py``, as a script run in a child process with pinned numerics.

Why a child: training amplifies a last-bit difference into other weights, and which bits a machine
computes depends on the CPU kernels and BLAS branch torch picks when it loads. The test process cannot
pin MKL's reproducible branch (tests compare served and local generators across thread counts, see
docs/testing.md), so the learning run gets a fresh process with every setting of
``tiny.pinned.PINNED_NUMERICS`` and the training block of the tiny builds (fixed threads,
deterministic algorithms, no oneDNN): the same figures on every x86 machine with AVX2, so a pass here
is a pass in CI.

Usage: ``python tests/helpers/grpo_learning.py JSON`` where JSON holds ``critic``, ``work``, ``warm_seed`` and
``grpo_seed``; prints one line ``@learning {...}`` with the held-out scores before and after.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULT_PREFIX = "@learning "


def warm_start(
    critic: Path,
    out: Path,
    images: Path,
    seed: int,
    steps: int = 100,
    inverted: bool = True,
    truthful_every: int = 0,
    mix: tuple[int, int] | None = None,
    warm_schedule: str = "linear",
    warm_prompts: int = 64,
) -> Path:
    """100 SFT steps (lr 1e-2 decaying linearly) on synthetic prompts answered with clean, short verdicts
    (the same cue, other rows).

    ``inverted`` (the test's design): every row is answered with the WRONG verdict ([ok] -> False, [bad]
    -> True). Why: the warm start then builds what GRPO cannot build in 80 steps from a start that ignores
    the cue (a verdict that depends on the cue, docs/testing.md), and any rise in accuracy afterwards can
    only come from the reward, since the warm start taught the opposite. :func:`learn` repeats it until
    the start is measurably wrong on held-out prompts. ``truthful_every`` N > 0 keeps the
    true verdict on every N-th pair of rows (one [ok] and one [bad]), so the start is sure of neither.
    ``mix`` (wrong, true) answers every prompt ``wrong`` times with the wrong verdict and ``true`` times
    with the true one, so the SFT optimum is the same odds on every prompt, whatever the seed (docs/testing.md,
    fifth round); ``warm_schedule`` and ``warm_prompts`` set its learning-rate schedule and prompt count."""
    import dataclasses

    from interleave_thinker.core.prompt_store import builtin_templates
    from interleave_thinker.train.data.trl_format import sft_dataset
    from interleave_thinker.train.grpo.data import synthetic_critic_examples, warm_start_examples
    from interleave_thinker.train.sft.config import DataSection, ModelSection, SFTRunConfig, TrainingSection
    from interleave_thinker.train.sft.trainer import run_sft

    examples = synthetic_critic_examples(builtin_templates(), warm_prompts, images, seed=7, restate=True)
    if mix is not None:
        wrong, true = mix
        examples = [
            dataclasses.replace(e, ground_truth=dataclasses.replace(e.ground_truth, success=verdict))
            for e in examples
            for verdict in [not e.ground_truth.success] * wrong + [e.ground_truth.success] * true
        ]
    elif inverted:
        examples = [
            e
            if truthful_every and (i // 2) % truthful_every == 0
            else dataclasses.replace(
                e, ground_truth=dataclasses.replace(e.ground_truth, success=not e.ground_truth.success)
            )
            for i, e in enumerate(examples)
        ]
    sft_dataset(warm_start_examples(examples)).save_to_disk(str(out / "data"))
    config = SFTRunConfig(
        role="critic",
        output_dir=out / "model",
        model=ModelSection(name_or_path=str(critic), dtype="float32", image_max_pixels=16384),
        data=DataSection(train=[out / "data"]),
        training=TrainingSection(
            learning_rate=1e-2,
            lr_scheduler_type=warm_schedule,
            warmup_ratio=0.0,
            max_steps=steps,
            per_device_train_batch_size=4,
            max_length=None,
            bf16=False,
            gradient_checkpointing=False,
            save_steps=1000,
            logging_steps=10,
            seed=seed,
            report_to="none",
            use_cpu=True,
        ),
    )
    return run_sft(config).output_dir


def learn(critic: Path, work: Path, warm_seed: int, grpo_seed: int, **variant: Any) -> dict[str, float]:
    """An inverted warm start, then 80 GRPO steps (format + accuracy rewards; Adam 1e-3, since from 3e-3 the
    first steps broke the reply's format on weak-format starts; rollouts sampled at temperature 1.3, so
    that a group of a start sure of its wrong verdicts still holds right ones): held-out scores before
    and after.

    Why the warm start is repeated until a measured condition holds, not run for a fixed step count: how
    far a given number of steps carries the wrong mapping to held-out subjects differs by seed (100 steps
    left seed 3 at 0.28, 200 left seed 2 at 0.02, too sure to sample a right verdict even hot), so every
    run starts instead from the same measured place: the held-out mean accuracy at the rollouts'
    temperature at most ``warm_until`` (0.15), warming 100 more steps from the last checkpoint while it
    is above (at most ``warm_rounds`` rounds). docs/testing.md, ninth round.

    ``variant`` overrides a setting (``warm_steps``, ``warm_until``, ``warm_rounds``, ``inverted``,
    ``lr``, ``beta``, ``temperature``, ``num_generations``, ``batch``, ``steps``, ``synthetic``, ``trl``,
    ``only_start``, ``truthful_every``, ``mix``, ``warm_schedule``, ``warm_prompts``, ``flip_advantages``,
    ``freeze_vision``)
    for the experiments docs/notes/learning-test.md reports."""
    from interleave_thinker.train.grpo import GRPORunConfig, build_grpo_trainer

    def warm(model: Path, round_: int) -> Path:
        return warm_start(
            model,
            work / f"warm{round_ or ''}",
            work / "warm_images",
            warm_seed,
            variant.get("warm_steps", 100),
            variant.get("inverted", True),
            variant.get("truthful_every", 0),
            tuple(variant["mix"]) if "mix" in variant else None,
            variant.get("warm_schedule", "linear"),
            variant.get("warm_prompts", 64),
        )

    def grpo_config(model: Path) -> GRPORunConfig:
        return GRPORunConfig.model_validate(
            {
                "role": "critic",
                "output_dir": str(work / "grpo"),
                "model": {
                    "name_or_path": str(model),
                    "image_max_pixels": 16384,
                    # The cue is in the text: a frozen vision side learns the same thing for ~40 s less
                    # a run (the release's GRPO trains it; test_grpo.py checks that default on its own).
                    "freeze_vision_tower": variant.get("freeze_vision", True),
                    "freeze_projector": variant.get("freeze_vision", True),
                },
                "data": {
                    "synthetic": variant.get("synthetic", 32),
                    "eval_synthetic": 16,
                    "synthetic_restate": True,
                },
                "reward": {"stepwise": False},
                "training": {
                    "learning_rate": variant.get("lr", 1e-3),
                    "beta": variant.get("beta", 0.0),
                    "num_generations": variant.get("num_generations", 4),
                    "temperature": variant.get("temperature", 1.3),
                    "per_device_train_batch_size": variant.get("batch", 16),
                    "num_generations_eval": 4,
                    "per_device_eval_batch_size": 16,
                    "max_steps": variant.get("steps", 80),
                    "max_completion_length": 64,
                    "bf16": False,
                    "use_cpu": True,
                    "report_to": "none",
                    "save_steps": 1000,
                    "seed": grpo_seed,
                },
                "trl": variant.get("trl", {}),
            }
        )

    def scores() -> tuple[float, float]:
        metrics = trainer.evaluate()
        accuracy = metrics["eval_rewards/critic_accuracy/mean"]
        well_formed = metrics["eval_rewards/critic_format/mean"]
        return accuracy, accuracy / max(well_formed, 1e-9)

    start = warm(critic, 0)
    trainer, _ = build_grpo_trainer(grpo_config(start))
    before, before_formed = scores()
    for round_ in range(1, variant.get("warm_rounds", 3)):
        if before <= variant.get("warm_until", 0.15):
            break
        print(f"@warm round {round_}: held-out mean accuracy {before:.3f}, warming again", flush=True)
        start = warm(start, round_)
        trainer, _ = build_grpo_trainer(grpo_config(start))
        before, before_formed = scores()
    print(f"@start held-out mean accuracy {before:.3f}, well-formed {before_formed:.3f}", flush=True)
    if variant.get("only_start"):
        return {"before": before, "before_formed": before_formed}
    if variant.get("flip_advantages"):
        flip_advantages(trainer)
    trainer.train()
    after, after_formed = scores()
    return {"before": before, "after": after, "before_formed": before_formed, "after_formed": after_formed}


def flip_advantages(trainer: Any) -> None:
    """Break GRPO on purpose: every advantage gets the wrong sign, so the policy moves away from its
    better rollouts. The learning test must fail so (benchmarks/bench_grpo_learning.py --flip shows it)."""
    score = trainer._generate_and_score_completions

    def flipped(inputs: Any) -> Any:
        batch = score(inputs)
        batch["advantages"] = -batch["advantages"]
        return batch

    trainer._generate_and_score_completions = flipped


def main(argv: list[str]) -> None:
    import warnings

    from interleave_thinker.tiny.format_trained import TRAIN_THREADS
    from interleave_thinker.tiny.models import deterministic_torch

    args: dict[str, Any] = json.loads(argv[0])
    warnings.simplefilter("ignore")
    with deterministic_torch(TRAIN_THREADS):
        variant = {k: v for k, v in args.items() if k not in ("critic", "work", "warm_seed", "grpo_seed")}
        result = learn(
            Path(args["critic"]), Path(args["work"]), args["warm_seed"], args["grpo_seed"], **variant
        )
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
