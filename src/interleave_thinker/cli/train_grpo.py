"""`interleave-thinker train grpo`: reinforce the critic (or the planner) with GRPO on TRL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from interleave_thinker.cli.specs import check_spec
from interleave_thinker.cli.train import (
    TrainFlags,
    already_finished,
    config_sets,
    echo_saved,
    summary,
    train_phase,
    with_train_flags,
)
from interleave_thinker.core.config_sections import RemoteOptions
from interleave_thinker.core.storage import check_out_folder

PreflightOption = Annotated[
    bool, typer.Option("--preflight/--no-preflight", help=RemoteOptions.model_fields["preflight"].description)
]


@with_train_flags
def grpo(
    ctx: typer.Context,
    config: Annotated[
        Path, typer.Option(help="GRPO config YAML (see configs/grpo_*.yaml and docs/training.md).")
    ],
    flags: TrainFlags,
    preflight: PreflightOption = True,
) -> None:
    """GRPO on TRL's GRPOTrainer with our rewards (critic: the release's reward; planner: format + plan)."""
    from interleave_thinker.train.grpo.config import GRPORunConfig

    skip = () if preflight else ("remote.preflight=false",)
    run_config = GRPORunConfig.load(
        config,
        {"output_dir": str(flags.out) if flags.out else None},
        sets=(*config_sets(ctx, flags, GRPORunConfig), *skip),
    )
    check_out_folder(run_config.output_dir, "--out" if flags.out else "output_dir")
    training = run_config.training
    if already_finished(flags, run_config.output_dir, training.max_steps, training.num_train_epochs):
        return
    if run_config.reward.stepwise and (flags.role or run_config.role) != "planner":
        check_spec("config key 'reward.judge'", run_config.reward.judge, "vlm")
        check_spec("config key 'reward.generator'", run_config.reward.generator, "image")
    from interleave_thinker.train.common import leave_process_group
    from interleave_thinker.train.grpo import run_grpo

    result = run_grpo(run_config, flags.role, resume=flags.resume, phase=train_phase)
    leave_process_group()
    if not result.main_process:
        return  # under `accelerate launch` only rank 0 reports
    this_run = [e for e in result.log_history if e.get("step", 0) > result.start_step]
    rewards = [e["reward"] for e in this_run if "reward" in e]
    typer.echo(summary(result.global_step, result.start_step, "mean reward", rewards, result.logging_steps))
    held_out = [e["eval_reward"] for e in this_run if "eval_reward" in e]
    if held_out:
        typer.echo(f"held-out mean reward {held_out[0]} -> {held_out[-1]} ({len(held_out)} evaluations)")
    stepwise = stepwise_line(this_run)
    if stepwise is not None:
        typer.echo(stepwise)
    echo_saved(result, flags.role or run_config.role or "critic")


def stepwise_line(logged: list[dict[str, Any]]) -> str | None:
    """The step-wise reward's counts over this run's logging steps (``stepwise/<status>``, each a mean per
    reward call over its window) as one line; None when none was logged or no sample fell back.

    >>> stepwise_line([{"stepwise/scored": 0.0, "stepwise/skipped": 1.0, "stepwise/failed": 3.0}] * 2)
    'step-wise reward: 0 of 4 samples scored per call, 3 fell back to 0.5 (2 of 2 logged steps with failures; the judge or generator did not answer usably)'
    """
    windows = [e for e in logged if "stepwise/failed" in e]
    failed = [float(e["stepwise/failed"]) for e in windows]
    if not windows or not any(failed):
        return None
    mean = lambda name: sum(float(e.get(f"stepwise/{name}", 0.0)) for e in windows) / len(windows)  # noqa: E731
    total = mean("scored") + mean("skipped") + mean("failed")
    hit = sum(1 for f in failed if f)
    return (
        f"step-wise reward: {mean('scored'):g} of {total:g} samples scored per call, {mean('failed'):g} fell back "
        f"to 0.5 ({hit} of {len(windows)} logged steps with failures; the judge or generator did not answer "
        "usably)"
    )
