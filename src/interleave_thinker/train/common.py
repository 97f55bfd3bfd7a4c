"""What SFT and GRPO share: the model being trained (loaded, placed, its vision parts frozen), the
checkpoint to start from or resume, the report targets, the TRL trainer's arguments, the trainer itself
with its LoRA config and callbacks, and the end of a run (the final save, the merged copy, the facts).

Why one module: the two trainers loaded the policy, resolved ``tiny:`` starts and assembled their TRL
trainer with copies of the same code, so a fix to one (a dtype, a frozen projector) missed the other.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from interleave_thinker.core.errors import ConfigError
from interleave_thinker.train.saves import guard_saves, newest_complete

if TYPE_CHECKING:
    from interleave_thinker.train.sft.config import FinetuneSection, ModelSection

logger = logging.getLogger(__name__)

VISION_MARKERS = ("visual.", "vision_tower", "vision_model")
PROJECTOR_MARKERS = ("visual.merger", "deepstack_merger", "multi_modal_projector", "mm_projector")
TINY_STARTS = ("planner", "critic", "planner-sft", "critic-sft")
LANGUAGE_ONLY = r"^(?!.*(visual|vision)).*\.({names})$"
"""LoRA target regex: the named projections anywhere except inside the vision tower."""


def base_checkpoint(name: str) -> str:
    """A local folder, a Hugging Face id, ``tiny:planner`` / ``tiny:critic`` (the random tiny models) or
    ``tiny:planner-sft`` / ``tiny:critic-sft`` (the format-trained ones, a sensible start for tiny GRPO)."""
    from interleave_thinker.backends._loading import resolve_checkpoint

    if name.startswith("tiny:"):
        which = name.removeprefix("tiny:") or "planner"
        if which not in TINY_STARTS:
            raise ConfigError(
                f"model.name_or_path {name!r}: use tiny:planner, tiny:critic, tiny:planner-sft or tiny:critic-sft."
            )
        from interleave_thinker.backends.specs import checkpoint_folder  # tiny: registered by the root

        return str(checkpoint_folder(f"tiny:{which}"))
    return resolve_checkpoint(name)


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


def load_policy(section: ModelSection, *, bf16: bool) -> tuple[Any, Any]:
    """The model to train and its processor, from ``model.*``; the vision parts frozen as configured.

    ``model.dtype: auto`` means bfloat16 when training in bf16, else float32.
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from interleave_thinker.backends._loading import not_found

    ref = base_checkpoint(section.name_or_path)
    dtype = section.dtype if section.dtype != "auto" else ("bfloat16" if bf16 else "float32")
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype)}
    if section.attn_implementation:
        kwargs["attn_implementation"] = section.attn_implementation
    try:
        processor = AutoProcessor.from_pretrained(ref)
        model = AutoModelForImageTextToText.from_pretrained(ref, **kwargs)
    except (OSError, ValueError) as exc:
        raise not_found(ref, exc) from exc
    counts = freeze_vision(model, tower=section.freeze_vision_tower, projector=section.freeze_projector)
    logger.info("parameters: %d trainable, %d frozen", counts["trainable"], counts["frozen"])
    bound_image_pixels(processor, section.image_max_pixels)
    return model, processor


def bound_image_pixels(processor: Any, max_pixels: int | None) -> None:
    """``model.image_max_pixels`` as the processor's ``longest_edge`` (Qwen-VL processors read it as a pixel
    count), for SFT and GRPO alike; None keeps the processor's own bound. transformers 5 holds ``size`` as
    a ``SizeDict`` (not a dict), which the earlier ``isinstance(size, dict)`` check skipped silently."""
    image_processor = getattr(processor, "image_processor", None)
    size = getattr(image_processor, "size", None)
    if not max_pixels or size is None:
        return
    if isinstance(size, dict):
        processor.image_processor.size = {**size, "longest_edge": max_pixels}
    elif hasattr(size, "longest_edge"):
        size.longest_edge = max_pixels
    else:
        raise ConfigError(
            f"model.image_max_pixels: this processor's image size ({type(size).__name__}) has no longest_edge; "
            "set model.image_max_pixels: null."
        )


def report_targets(report_to: list[str] | str) -> list[str]:
    """``training.report_to``: ``none``, ``auto`` (the installed ones of tensorboard and wandb) or a list."""
    if report_to == "none":
        return []
    if report_to == "auto":
        return [name for name in ("tensorboard", "wandb") if importlib.util.find_spec(name) is not None]
    return list(report_to)


def last_checkpoint(output_dir: Path, *, warn: bool = False) -> Path | None:
    """The newest complete ``checkpoint-N`` folder in ``output_dir`` (what ``--resume`` continues), or
    None; newer incomplete ones (a save a full disk cut short) are passed over (``train/saves.py``)."""
    return newest_complete(output_dir, warn=warn)


def resume_checkpoint(output_dir: Path, resume: bool) -> Path | None:
    """The checkpoint ``--resume`` continues (None without ``--resume``), the incomplete newer ones named in
    a warning; none to continue is an error."""
    checkpoint = last_checkpoint(output_dir, warn=True) if resume else None
    if resume and checkpoint is None:
        raise ConfigError(f"--resume: no checkpoint-N folder in {output_dir}; train without --resume first.")
    return checkpoint


def checkpoint_step(checkpoint: Path | None) -> int:
    """The step a run resumed from ``checkpoint-N`` starts at (0 without one): what the summary counts from."""
    return int(checkpoint.name.rpartition("-")[2]) if checkpoint is not None else 0


class ReplicaCheck(Protocol):
    """What :func:`trl_trainer` reads of a run's ``training`` section."""

    @property
    def replica_check_steps(self) -> int | None: ...


class TrainingRun(Protocol):
    """What :func:`trl_trainer` and :func:`finish_run` read of a run config (``SFTRunConfig``, ``GRPORunConfig``)."""

    @property
    def finetune(self) -> FinetuneSection: ...

    @property
    def model(self) -> ModelSection: ...

    @property
    def training(self) -> ReplicaCheck: ...

    @property
    def output_dir(self) -> Path: ...


def save_final_model(trainer: Any, output_dir: Path) -> None:
    """Weights (or adapter) and processor beside the checkpoint-N folders, where the pipeline loads them:
    ``save_model`` is collective (ZeRO-3 / FSDP gather the shards); only the main process writes."""
    trainer.save_model(str(output_dir))
    if trainer.args.should_save:
        trainer.processing_class.save_pretrained(str(output_dir))


def run_facts(trainer: Any, checkpoint: Path | None) -> dict[str, Any]:
    """The result fields every run reports alike, so SFT and GRPO summaries count steps the same way."""
    return {
        "main_process": trainer.is_world_process_zero(),
        "start_step": checkpoint_step(checkpoint),
        # the checkpoint's value when resumed, as the Trainer uses it
        "logging_steps": int(trainer.state.logging_steps or trainer.args.logging_steps),
    }


def finish_run(trainer: Any, run: TrainingRun, checkpoint: Path | None) -> dict[str, Any]:
    """After ``trainer.train()``: save the final model into ``output_dir`` (:func:`save_final_model`), with
    ``finetune.lora.merge`` also a merged full model in ``output_dir/merged``, and return the result fields
    both trainers report alike (:func:`run_facts`, ``adapter``, ``merged_dir``).

    Why one call: the save is collective, so every rank must reach it in the same place; and the
    ``finetune`` section is the same in both configs, so GRPO honours ``merge`` as SFT does."""
    save_final_model(trainer, run.output_dir)
    adapter = run.finetune.method == "lora"
    merged = None
    if adapter and run.finetune.lora.merge and trainer.args.should_save:
        from interleave_thinker.train.sft.checkpoints import merge_adapter

        merged = merge_adapter(run.output_dir, run.output_dir / "merged")
    return {**run_facts(trainer, checkpoint), "adapter": adapter, "merged_dir": merged}


def finished_at(output_dir: Path, max_steps: int, num_train_epochs: float) -> int | None:
    """The step at which the run in ``output_dir`` finished, or None when its newest checkpoint has more to do.

    Why: a Trainer resumed from the checkpoint of its last step still trains one step more (and
    overwrites the final model), so ``--resume`` of a finished run must stop before building a trainer.
    Finished means the checkpoint reached ``max_steps`` (when > 0) or else ``num_train_epochs``. The
    newest complete checkpoint counts, as for ``--resume``: a newer one a full disk cut short is not the
    run's end.
    """
    try:
        checkpoint = last_checkpoint(output_dir)
    except ConfigError:  # only incomplete checkpoints: --resume says so
        return None
    if checkpoint is None:
        return None
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        step, epoch = int(state.get("global_step", 0)), float(state.get("epoch") or 0.0)
    except (OSError, ValueError, TypeError):
        return None  # an unreadable state: let the trainer say what is wrong with the checkpoint
    done = step >= max_steps if max_steps > 0 else epoch >= num_train_epochs - 1e-6
    return step if done else None


SHARED_TRAINING_KEYS = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "weight_decay",
    "lr_scheduler_type",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "bf16",
    "save_steps",
    "logging_steps",
    "seed",
    "use_cpu",
)
"""``training.*`` keys SFT and GRPO both have, passed to TRL under the same name."""


def trl_common_args(training: Any, output_dir: Path) -> dict[str, Any]:
    """TrainingArguments both trainers set the same way from their ``training`` section, under
    transformers' current names.

    ``activation_checkpointing`` is what ``training.gradient_checkpointing`` means since transformers 5
    (the old name is a deprecated alias that warned on every run, since TRL defaults it to True).
    ``disable_tqdm`` is explicit because its default follows transformers' log level, which the CLI sets
    to ``error`` to keep the libraries quiet: the progress bar with its ETA stays. Both can still be
    overridden under ``trl:``.
    """
    return {
        "output_dir": str(output_dir),
        **{key: getattr(training, key) for key in SHARED_TRAINING_KEYS},
        "activation_checkpointing": training.gradient_checkpointing,
        "disable_tqdm": False,
        "report_to": report_targets(training.report_to),
    }


def check_trl_keys(trl: dict[str, Any], known: set[str], config_class: str) -> None:
    """The ``trl:`` extras of a training config must be fields of TRL's ``config_class``, and not
    ``output_dir``: the final model, the merged copy and ``--resume`` follow the config's own key."""
    if "output_dir" in trl:
        raise ConfigError("trl.output_dir: set output_dir at the top of the config (or --out) instead.")
    unknown = sorted(set(trl) - known)
    if unknown:
        raise ConfigError(
            f"Unknown trl.{config_class} key(s) under 'trl': {', '.join(unknown)} "
            f"(the keys under 'trl' must be {config_class} field names)."
        )


def build_trl_config(
    config_class: Any, training: Any, output_dir: Path, own: dict[str, Any], trl: dict[str, Any]
) -> Any:
    """TRL's ``config_class`` (``SFTConfig``, ``GRPOConfig``) from what both trainers set
    (:func:`trl_common_args`), then the trainer's ``own`` arguments, then the ``trl:`` extras, which win
    and must be ``config_class``'s arguments."""
    check_trl_keys(trl, set(inspect.signature(config_class).parameters), config_class.__name__)
    return config_class(**({**trl_common_args(training, output_dir), **own} | trl))


def training_callbacks(
    callbacks: Sequence[Any], replica_check_steps: int | None, output_dir: Path
) -> list[Any]:
    """The caller's callbacks plus, with ``training.replica_check_steps``, the replica check."""
    chosen = list(callbacks)
    if replica_check_steps:
        from interleave_thinker.train.sft.replicas import replica_callback

        chosen.append(replica_callback(replica_check_steps, output_dir))
    return chosen


def lora_config(finetune: FinetuneSection, model: ModelSection | None = None) -> Any:
    """PEFT's ``LoraConfig`` from ``finetune.lora`` (None for a full fine-tune).

    The targets are ``finetune.lora.target_modules`` in the language model only (:data:`LANGUAGE_ONLY`),
    as that key promises, for SFT and GRPO alike: a bare name list would also adapt vision-tower layers
    of the same name (Qwen2.5-VL's vision MLP has ``gate_proj``/``up_proj``/``down_proj``). When ``model``
    leaves the vision tower or projector trainable (GRPO's default, as released), the vision module is
    trained whole and saved beside the adapter (``modules_to_save``): PEFT would otherwise freeze it.
    """
    if finetune.method != "lora":
        return None
    from peft import LoraConfig

    lora = finetune.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=LANGUAGE_ONLY.format(names="|".join(lora.target_modules)),
        modules_to_save=["visual"] if trains_vision(model) else None,
        task_type="CAUSAL_LM",
    )


def trains_vision(model: ModelSection | None) -> bool:
    """True when ``model.*`` leaves the vision tower or the projector trainable."""
    return model is not None and not (model.freeze_vision_tower and model.freeze_projector)


def trl_trainer(
    trainer_class: Any,
    run: TrainingRun,
    parts: tuple[Any, Any, Any],
    datasets: tuple[Any, Any],
    callbacks: Sequence[Any] = (),
    **extra: Any,
) -> Any:
    """A TRL trainer from ``(model, processor, args)`` and ``(train, eval)`` datasets, with the run's LoRA
    adapter (:func:`lora_config`) and the caller's callbacks plus the replica check
    (:func:`training_callbacks`); ``extra`` holds what only one trainer takes (GRPO's ``reward_funcs``)."""
    model, processor, args = parts
    chosen = training_callbacks(callbacks, run.training.replica_check_steps, run.output_dir)
    pieces = {
        "model": model,
        "args": args,
        "processing_class": processor,
        "peft_config": lora_config(run.finetune, run.model),
    }
    data = {"train_dataset": datasets[0], "eval_dataset": datasets[1]}
    trainer = trainer_class(**pieces, **data, callbacks=chosen or None, **extra)
    guard_saves(trainer)  # a failed save leaves no complete-looking checkpoint, and says why in one line
    return trainer


def leave_process_group() -> None:
    """Under ``accelerate launch``: wait for every rank, then tear the process group down.

    Why: TRL's trainers never destroy the group, so each rank left with gloo's connections live and a
    rank that finished first (rank 0 still saving) could abort in the group's destructor at exit
    (SIGABRT, seen once in CI). Accelerate's own advice is ``end_training`` at the end of a script;
    this is its teardown, after a barrier. A no-op in a single process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
