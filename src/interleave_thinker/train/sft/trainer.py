"""SFT of the planner or the critic on TRL's ``SFTTrainer``.

The run reads top to bottom: 1. check the config and data, 2. load model and processor and freeze
the vision parts, 3. build TRL's config and trainer, 4. train (or resume), 5. save the final model
with the processor (and, for LoRA, optionally a merged copy) so the folder loads in the pipeline.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import ConfigError
from interleave_thinker.train.data.loaders import load_sft
from interleave_thinker.train.data.trl_format import datasets_module, sft_dataset
from interleave_thinker.train.sft.config import Role, SFTRunConfig
from interleave_thinker.train.sft.templates import training_chat_template

logger = logging.getLogger(__name__)

VISION_MARKERS = ("visual.", "vision_tower", "vision_model")
PROJECTOR_MARKERS = ("visual.merger", "deepstack_merger", "multi_modal_projector", "mm_projector")
LANGUAGE_ONLY = r"^(?!.*(visual|vision)).*\.({names})$"
"""LoRA target regex: the named projections anywhere except inside the vision tower."""


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
        f" (synthetic, for the tiny configs), or interleave-thinker data build --from RUNS --out {path.parent}."
    )


def freeze_vision(model: Any, *, tower: bool, projector: bool) -> dict[str, int]:
    """Freeze the vision encoder and/or the projector; returns parameter counts (frozen, trainable)."""
    counts = {"frozen": 0, "trainable": 0}
    for name, param in model.named_parameters():
        is_projector = any(m in name for m in PROJECTOR_MARKERS)
        is_vision = not is_projector and any(m in name for m in VISION_MARKERS)
        if (is_projector and projector) or (is_vision and tower):
            param.requires_grad_(False)
        counts["trainable" if param.requires_grad else "frozen"] += param.numel()
    return counts


def report_targets(report_to: list[str] | str) -> list[str]:
    if report_to == "none":
        return []
    if report_to == "auto":
        return [name for name in ("tensorboard", "wandb") if importlib.util.find_spec(name) is not None]
    return list(report_to)


def base_checkpoint(name: str) -> str:
    """A local folder, a Hugging Face id, ``tiny:planner`` / ``tiny:critic`` (the random tiny models) or
    ``tiny:planner-sft`` / ``tiny:critic-sft`` (the format-trained ones, a sensible start for tiny GRPO)."""
    from interleave_thinker.backends._loading import resolve_checkpoint

    if name.startswith("tiny:"):
        which = name.removeprefix("tiny:") or "planner"
        if which in ("planner-sft", "critic-sft"):
            from interleave_thinker.train.tiny_format import ensure_format_trained

            return str(ensure_format_trained(which.removesuffix("-sft")))
        if which not in ("planner", "critic"):
            raise ConfigError(
                f"model.name_or_path {name!r}: use tiny:planner, tiny:critic, tiny:planner-sft or tiny:critic-sft."
            )
        from interleave_thinker.core.tiny import ensure_tiny_models

        return str(getattr(ensure_tiny_models(), which))
    return resolve_checkpoint(name)


def _load_model(config: SFTRunConfig) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from interleave_thinker.backends._loading import not_found

    ref = base_checkpoint(config.model.name_or_path)
    dtype_name = config.model.dtype
    if dtype_name == "auto":
        dtype_name = "bfloat16" if config.training.bf16 else "float32"
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype_name)}
    if config.model.attn_implementation:
        kwargs["attn_implementation"] = config.model.attn_implementation
    try:
        processor = AutoProcessor.from_pretrained(ref)
        model = AutoModelForImageTextToText.from_pretrained(ref, **kwargs)
    except (OSError, ValueError) as exc:
        raise not_found(ref, exc) from exc
    image_processor = getattr(processor, "image_processor", None)
    if (
        config.model.image_max_pixels
        and image_processor is not None
        and isinstance(image_processor.size, dict)
    ):
        image_processor.size = {**image_processor.size, "longest_edge": config.model.image_max_pixels}
    return model, processor


def _peft_config(config: SFTRunConfig) -> Any:
    if config.finetune.method != "lora":
        return None
    from peft import LoraConfig

    lora = config.finetune.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=LANGUAGE_ONLY.format(names="|".join(lora.target_modules)),
        task_type="CAUSAL_LM",
    )


def trl_config(config: SFTRunConfig, output_dir: Path, *, vision: bool, evaluate: bool = False) -> Any:
    """``trl.SFTConfig`` from our config; ``trl:`` extras must be SFTConfig field names."""
    from trl import SFTConfig

    t = config.training
    known = {f.name for f in dataclasses.fields(SFTConfig)}
    unknown = sorted(set(config.trl) - known)
    if unknown:
        raise ConfigError(f"Unknown trl.SFTConfig key(s) under 'trl': {', '.join(unknown)}.")
    args: dict[str, Any] = {
        "output_dir": str(output_dir),
        "learning_rate": t.learning_rate,
        "num_train_epochs": t.num_train_epochs,
        "max_steps": t.max_steps,
        "lr_scheduler_type": t.lr_scheduler_type,
        "warmup_steps": t.warmup_ratio,  # a float below 1 is a ratio of the total steps
        "per_device_train_batch_size": t.per_device_train_batch_size,
        "gradient_accumulation_steps": t.gradient_accumulation_steps,
        "max_length": t.max_length,
        "bf16": t.bf16,
        "gradient_checkpointing": t.gradient_checkpointing,
        "assistant_only_loss": t.assistant_only_loss,
        "padding_free": t.padding_free,
        "save_strategy": "steps",
        "save_steps": t.save_steps,
        "save_total_limit": t.save_total_limit,
        "logging_steps": t.logging_steps,
        "seed": t.seed,
        "report_to": report_targets(t.report_to),
        "use_cpu": t.use_cpu,
        "deepspeed": str(t.deepspeed) if t.deepspeed else None,
        "dataloader_num_workers": t.dataloader_num_workers,
        "remove_unused_columns": not vision,
    }
    if evaluate:
        args |= {"eval_strategy": "steps", "eval_steps": t.save_steps}
    return SFTConfig(**(args | config.trl))


def build_trainer(config: SFTRunConfig, role: Role | None = None, callbacks: Sequence[Any] = ()) -> Any:
    """Everything up to ``trainer.train()``: data, model, frozen parts, TRL config and trainer."""
    from trl import SFTTrainer

    # 1. Check the config and read the data.
    role = _check_role(config, role)
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
    model, processor = _load_model(config)
    counts = freeze_vision(
        model, tower=config.model.freeze_vision_tower, projector=config.model.freeze_projector
    )
    logger.info("parameters: %d trainable, %d frozen", counts["trainable"], counts["frozen"])
    original_template = processor.chat_template
    if config.training.assistant_only_loss:
        template = training_chat_template(processor)
        if template is not None:
            processor.chat_template = template
    # 3. TRL (every rank builds the same trainer; accelerate shards the batches across ranks).
    args = trl_config(config, config.output_dir, vision=vision, evaluate=evals is not None)
    callbacks = list(callbacks)
    if config.training.replica_check_steps:
        from interleave_thinker.train.sft.replicas import replica_callback

        callbacks.append(replica_callback(config.training.replica_check_steps, config.output_dir))
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evals,
        processing_class=processor,
        peft_config=_peft_config(config),
        callbacks=list(callbacks) or None,
    )
    trainer.inference_chat_template = original_template
    return trainer


def _check_role(config: SFTRunConfig, role: Role | None) -> Role | None:
    if role is not None and config.role is not None and role != config.role:
        raise ConfigError(f"--role {role} disagrees with role: {config.role} in the SFT config; use one.")
    return role or config.role


def last_checkpoint(output_dir: Path) -> Path | None:
    from transformers.trainer_utils import get_last_checkpoint

    found = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
    return Path(found) if found else None


def run_sft(
    config: SFTRunConfig,
    role: Role | None = None,
    *,
    resume: bool = False,
    output_dir: Path | None = None,
    callbacks: Sequence[Any] = (),
) -> SFTResult:
    """Train, save the final model (and processor) into ``output_dir``, and report what happened."""
    if output_dir is not None:
        config = config.model_copy(update={"output_dir": output_dir})
    checkpoint = None
    if resume:
        checkpoint = last_checkpoint(config.output_dir)
        if checkpoint is None:
            raise ConfigError(
                f"--resume: no checkpoint-N folder in {config.output_dir}; train without --resume first."
            )
    trainer = build_trainer(config, role, callbacks)
    # 4. Train.
    output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    # 5. Save what the pipeline loads: weights (or adapter) and the processor with its inference template.
    # save_model is collective (ZeRO-3 / FSDP gather the shards) and writes on the main process only;
    # the processor and the merged copy are written by the main process alone.
    processor = trainer.processing_class
    processor.chat_template = trainer.inference_chat_template
    trainer.save_model(str(config.output_dir))
    if trainer.args.should_save:
        processor.save_pretrained(str(config.output_dir))
    adapter = config.finetune.method == "lora"
    merged = None
    if adapter and config.finetune.lora.merge and trainer.args.should_save:
        from interleave_thinker.train.sft.checkpoints import merge_adapter

        merged = merge_adapter(config.output_dir, config.output_dir / "merged")
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
    return SFTResult(
        output_dir=config.output_dir,
        global_step=trainer.state.global_step,
        train_loss=getattr(output, "training_loss", None),
        losses=losses,
        adapter=adapter,
        merged_dir=merged,
        log_history=list(trainer.state.log_history),
        main_process=trainer.is_world_process_zero(),
    )
