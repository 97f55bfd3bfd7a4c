"""`interleave-thinker train sft`: fine-tune the planner or the critic with TRL (grpo comes later)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Fine-tune the planner or the critic.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Fine-tune the planner or the critic (kept a command group so `train grpo` can join `train sft`)."""


class TrainRole(StrEnum):
    planner = "planner"
    critic = "critic"


@app.command()
def sft(
    config: Annotated[
        Path, typer.Option(help="SFT config YAML (see configs/sft_*.yaml and docs/training.md).")
    ],
    role: Annotated[
        TrainRole | None, typer.Option(help="planner or critic \\[default: the config's role].")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue from the newest checkpoint-N in the output folder.")
    ] = False,
    output_dir: Annotated[Path | None, typer.Option(help="Overrides output_dir of the config.")] = None,
) -> None:
    """Supervised fine-tuning on TRL's SFTTrainer; multi-GPU under `accelerate launch`."""
    from interleave_thinker.train.sft.config import SFTRunConfig
    from interleave_thinker.train.sft.trainer import run_sft

    run_config = SFTRunConfig.load(config)
    result = run_sft(run_config, role.value if role else None, resume=resume, output_dir=output_dir)
    if not result.main_process:
        return  # under `accelerate launch` only rank 0 reports
    first, last = (result.losses[0], result.losses[-1]) if result.losses else (None, None)
    typer.echo(f"trained {result.global_step} steps; loss {first} -> {last}")
    typer.echo(f"{'adapter' if result.adapter else 'model'} saved in {result.output_dir}")
    if result.merged_dir:
        typer.echo(f"merged model saved in {result.merged_dir}")
    typer.echo(
        f"use it with: --{run_config.role or (role.value if role else 'planner')} transformers:{result.output_dir}"
    )
