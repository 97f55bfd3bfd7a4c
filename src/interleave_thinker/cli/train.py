"""`interleave-thinker train sft`: fine-tune the planner or the critic with TRL; the flags `train sft` and
`train grpo` share (``--set KEY=VALUE`` overrides, ``--resume`` that leaves a finished run alone)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel
from rich.console import Console

from interleave_thinker.cli.options import deprecated, with_flags
from interleave_thinker.core.storage import check_out_folder
from interleave_thinker.core.types import TrainedRole as Role

if TYPE_CHECKING:
    from interleave_thinker.train.grpo.trainer import GRPOResult
    from interleave_thinker.train.sft.trainer import SFTResult

app = typer.Typer(help="Fine-tune the planner or the critic.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Fine-tune the planner or the critic (kept a command group so `train grpo` can join `train sft`)."""


RoleOption = Annotated[Role | None, typer.Option(help="planner or critic \\[default: the config's role].")]
ResumeOption = Annotated[
    bool, typer.Option("--resume", help="Continue from the newest checkpoint-N in the output folder.")
]
OutOption = Annotated[Path | None, typer.Option("--out", help="Overrides output_dir of the config.")]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Change one config key, e.g. --set training.learning_rate=1e-5 (repeatable; VALUE is YAML).",
    ),
]
OutputDirOption = Annotated[
    Path | None,
    typer.Option("--output-dir", hidden=True, callback=deprecated("--output-dir", "--out")),
]


@dataclass(frozen=True)
class TrainFlags:
    """The flags `train sft` and `train grpo` share (``--output-dir``: the old name of ``--out``)."""

    role: Role | None
    resume: bool
    out: Path | None
    sets: tuple[str, ...] = ()


with_train_flags = with_flags(
    {
        "role": (RoleOption, None),
        "resume": (ResumeOption, False),
        "out": (OutOption, None),
        "output_dir": (OutputDirOption, None),
        "sets": (SetOption, None),
    },
    "flags",
    lambda given: TrainFlags(
        given["role"], given["resume"], given["out"] or given["output_dir"], tuple(given["sets"] or ())
    ),
)


def already_finished(flags: TrainFlags, output_dir: Path, max_steps: int, num_train_epochs: float) -> bool:
    """``--resume`` of a run whose newest checkpoint reached its end: say so, and train nothing."""
    from interleave_thinker.train.common import finished_at

    step = finished_at(output_dir, max_steps, num_train_epochs) if flags.resume else None
    if step is None:
        return False
    typer.echo(
        f"{output_dir} already finished at step {step}; nothing to do "
        f"(to train on, raise the step count, e.g. --resume --set training.max_steps={2 * step})."
    )
    return True


def summary(global_step: int, start_step: int, name: str, values: list[float], logging_steps: int) -> str:
    """``trained N steps`` and the first and last ``name`` logged by *this* run (a resumed run's log
    history starts with the earlier run's entries), or why none was: fewer steps than ``logging_steps``."""
    ran = global_step - start_step
    line = f"trained {global_step} steps" + (
        f" ({ran} in this run, from step {start_step})" if start_step else ""
    )
    if values:
        return f"{line}; {name} {values[0]:.4g} -> {values[-1]:.4g} ({len(values)} logged)"
    return f"{line}; no {name} logged (logging_steps {logging_steps}, {ran} step(s) in this run)"


def train_phase(text: str) -> AbstractContextManager[None]:
    """A phase of building the run, as a line on stderr with its time (the bar comes only with training)."""
    from interleave_thinker.cli.progress import phase

    return phase(Console(stderr=True), text)


CONFIG_FLAGS = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Click settings of the train commands: any config key is also a flag, as in TRL (``--learning_rate 1e-5``)."""
CONFIG_FLAGS_HELP = (
    "Any config key is also a flag, as in TRL: --learning_rate 1e-5 or --max_steps=20 is "
    "--set training.learning_rate=1e-5 or --set training.max_steps=20 (a key's last part names it when no "
    "other key ends so; keys in docs/training-config.md)."
)


def config_sets(ctx: typer.Context, flags: TrainFlags, model: type[BaseModel]) -> tuple[str, ...]:
    """``--set`` values with the TRL-style flags left over on the command line, in that order."""
    from interleave_thinker.train.overrides import flag_sets

    return (*flags.sets, *flag_sets(ctx.args, model))


@app.command(context_settings=CONFIG_FLAGS, epilog=CONFIG_FLAGS_HELP)
@with_train_flags
def sft(
    ctx: typer.Context,
    config: Annotated[
        Path, typer.Option(help="SFT config YAML (see configs/sft_*.yaml and docs/training.md).")
    ],
    flags: TrainFlags,
) -> None:
    """Supervised fine-tuning on TRL's SFTTrainer; multi-GPU under `accelerate launch`."""
    from interleave_thinker.train.common import leave_process_group
    from interleave_thinker.train.sft.config import SFTRunConfig
    from interleave_thinker.train.sft.trainer import run_sft

    run_config = SFTRunConfig.load(config, sets=config_sets(ctx, flags, SFTRunConfig))
    check_out_folder(flags.out or run_config.output_dir, "--out" if flags.out else "output_dir")
    training = run_config.training
    if already_finished(
        flags, flags.out or run_config.output_dir, training.max_steps, training.num_train_epochs
    ):
        return
    result = run_sft(run_config, flags.role, resume=flags.resume, output_dir=flags.out, phase=train_phase)
    leave_process_group()
    if not result.main_process:
        return  # under `accelerate launch` only rank 0 reports
    mean = f"; mean loss {result.train_loss:.4g}" if result.train_loss is not None else ""
    typer.echo(
        summary(result.global_step, result.start_step, "loss", result.losses, result.logging_steps) + mean
    )
    echo_saved(result, flags.role or run_config.role or "planner")


def echo_saved(result: SFTResult | GRPOResult, role: str) -> None:
    """The last lines of a finished run, SFT and GRPO alike: what was saved where, and how to use it."""
    typer.echo(f"{'adapter' if result.adapter else 'model'} saved in {result.output_dir}")
    if result.merged_dir:
        typer.echo(f"merged model saved in {result.merged_dir}")
    typer.echo(f"use it with: --{role} transformers:{result.output_dir}")
