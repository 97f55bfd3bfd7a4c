"""SFT of the planner or the critic on TRL's ``SFTTrainer``.

The run reads top to bottom: 1. check the config and data, 2. load model and processor and freeze
the vision parts, 3. build TRL's config and trainer, 4. train (or resume), 5. save the final model
with the processor (and, for LoRA, optionally a merged copy) so the folder loads in the pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interleave_thinker.core.build_progress import Phase, no_phase
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.train.common import (
    build_trl_config,
    finish_run,
    load_policy,
    resume_checkpoint,
    trl_trainer,
)
from interleave_thinker.train.data.loaders import load_sft
from interleave_thinker.train.data.trl_format import datasets_module, sft_dataset
from interleave_thinker.train.sft.config import Role, SFTRunConfig
from interleave_thinker.train.sft.templates import training_chat_template


@dataclass
class SFTResult:
    """What a run produced: the final model folder and how training went."""

    output_dir: Path
    global_step: int
    train_loss: float | None
    losses: list[float] = field(default_factory=list)
    adapter: bool = False
    merged_dir: Path | None = None
    log_history: list[dict[str, Any]] = field(default_factory=list)
    main_process: bool = True
    """False on the other ranks of a multi-process run (they print and write nothing)."""
    start_step: int = 0
    """The step this run started from (the checkpoint's with ``--resume``): ``losses`` are this run's only."""
    logging_steps: int = 0
    """The loss is logged every this many steps (the checkpoint's value when resumed, as the Trainer uses it)."""


def load_training_data(
    paths: Sequence[Path], role: Role | None, *, image_dir: Path | None = None, check: bool = True
) -> Any:
    """One ``datasets.Dataset`` from ShareGPT files and folders saved by ``data build``."""
    ds = datasets_module()
    parts = []
    for path in paths:
        if path.is_dir():
            parts.append(ds.load_from_disk(str(path)))
        elif path.is_file():
            parts.append(sft_dataset(load_sft(path, image_dir=image_dir, role=role if check else None)))
        else:
            raise ConfigError(
                f"Training data {path} does not exist (data.train / data.eval in the SFT config)."
                + _make_data_hint(path)
            )
    return parts[0] if len(parts) == 1 else ds.concatenate_datasets(parts)


def _make_data_hint(path: Path) -> str:
    """The commands that write a missing ``<role>_sft.json`` (``data synth`` / ``data build`` file names)."""
    role = path.name.removesuffix("_sft.json")
    if path.name == role or role not in ("planner", "critic"):
        return ""
    return (
        f" Make it with: interleave-thinker data synth --role {role} --n 64 --out {path.parent}"
        f" (synthetic, for the tiny configs), or interleave-thinker data build --input RUNS --out {path.parent}."
    )


def _load_model(config: SFTRunConfig) -> tuple[Any, Any]:
    return load_policy(config.model, bf16=config.training.bf16)  # image_max_pixels applied there


def trl_config(config: SFTRunConfig, output_dir: Path, *, vision: bool, evaluate: bool = False) -> Any:
    """``trl.SFTConfig`` from our config; ``trl:`` extras must be SFTConfig field names."""
    from trl import SFTConfig

    t = config.training
    args: dict[str, Any] = {
        "warmup_steps": t.warmup_ratio,  # a float below 1 is a ratio of the total steps
        "max_length": t.max_length,
        "assistant_only_loss": t.assistant_only_loss,
        "padding_free": t.padding_free,
        "save_strategy": "steps",
        "save_total_limit": t.save_total_limit,
        "deepspeed": str(t.deepspeed) if t.deepspeed else None,
        "dataloader_num_workers": t.dataloader_num_workers,
        "remove_unused_columns": not vision,
    }
    if evaluate:
        args |= {"eval_strategy": "steps", "eval_steps": t.save_steps}
    return build_trl_config(SFTConfig, t, output_dir, args, config.trl)


def build_trainer(
    config: SFTRunConfig, role: Role | None = None, callbacks: Sequence[Any] = (), phase: Phase = no_phase
) -> Any:
    """Everything up to ``trainer.train()``: data, model, frozen parts, TRL config and trainer."""
    with phase("importing TRL"):
        from trl import SFTTrainer

    # 1. Check the config and read the data.
    role = _check_role(config, role)
    with phase("reading the training data"):
        train = load_training_data(
            config.data.train, role, image_dir=config.data.image_dir, check=config.data.check_replies
        )
        evals = (
            load_training_data(
                config.data.eval, role, image_dir=config.data.image_dir, check=config.data.check_replies
            )
            if config.data.eval
            else None
        )
    vision = "images" in train.column_names
    # 2. Model, processor, frozen vision parts, the training chat template.
    with phase(f"loading model {config.model.name_or_path}"):
        model, processor = _load_model(config)
    original_template = processor.chat_template
    if config.training.assistant_only_loss:
        template = training_chat_template(processor)
        if template is not None:
            processor.chat_template = template
    # 3. TRL (every rank builds the same trainer; accelerate shards the batches across ranks).
    args = trl_config(config, config.output_dir, vision=vision, evaluate=evals is not None)
    with phase(f"building the trainer ({len(train)} rows)"):
        trainer = trl_trainer(SFTTrainer, config, (model, processor, args), (train, evals), callbacks)
    trainer.inference_chat_template = original_template
    return trainer


def _check_role(config: SFTRunConfig, role: Role | None) -> Role | None:
    if role is not None and config.role is not None and role != config.role:
        raise ConfigError(f"--role {role} disagrees with role: {config.role} in the SFT config; use one.")
    return role or config.role


def run_sft(
    config: SFTRunConfig,
    role: Role | None = None,
    *,
    resume: bool = False,
    output_dir: Path | None = None,
    callbacks: Sequence[Any] = (),
    phase: Phase = no_phase,
) -> SFTResult:
    """Train, save the final model (and processor) into ``output_dir``, and report what happened."""
    if output_dir is not None:
        config = config.model_copy(update={"output_dir": output_dir})
    checkpoint = resume_checkpoint(config.output_dir, resume)
    trainer = build_trainer(config, role, callbacks, phase)
    # 4. Train.
    output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    # 5. Save what the pipeline loads: weights (or adapter, and a merged copy) and the processor with its
    # inference template (finish_run: collective, and only the main process writes).
    trainer.processing_class.chat_template = trainer.inference_chat_template
    facts = finish_run(trainer, config, checkpoint)
    start = facts["start_step"]
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h and h.get("step", 0) > start]
    return SFTResult(
        output_dir=config.output_dir,
        global_step=trainer.state.global_step,
        train_loss=getattr(output, "training_loss", None),
        losses=losses,
        log_history=list(trainer.state.log_history),
        **facts,
    )
