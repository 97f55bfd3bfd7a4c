"""The typed SFT configuration, loaded from YAML with unknown keys rejected by name.

Defaults are the release's cold-start settings (LLaMA-Factory, Qwen3-VL-8B-Instruct): full fine-tune
with vision tower and projector frozen, cutoff 16384 tokens, lr 2e-5, 3 epochs (the planner's; the
critic's is 2), cosine schedule, warmup ratio 0.1, bf16, 2 samples per device, ``image_max_pixels``
1048576, loss on assistant tokens only. Weight decay defaults to TRL's 0 so the tiny models' builds
stay as they were; the release's 1e-6 is in ``configs/sft_*.yaml`` (docs/notes/release-settings.md lists each
value with its line in the release). ``trl:`` passes any further ``trl.SFTConfig`` field through,
checked by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from interleave_thinker.core.config_sections import count, unset
from interleave_thinker.core.types import TrainedRole
from interleave_thinker.train.overrides import load_run_config

Role = TrainedRole


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSection(_Section):
    name_or_path: str = Field(description="Base checkpoint: a Hugging Face id or a local folder.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto", description="Weights dtype; auto = bfloat16 when training.bf16, else float32."
    )
    attn_implementation: str | None = unset("e.g. flash_attention_2 or sdpa.")
    freeze_vision_tower: bool = Field(default=True, description="Keep the vision encoder's weights fixed.")
    freeze_projector: bool = Field(default=True, description="Keep the vision-to-text merger fixed.")
    image_max_pixels: int | None = count(1048576, "Upper bound on pixels per image given to the processor.")


class LoraSection(_Section):
    r: int = count(16, "LoRA rank.")
    alpha: int = count(32, "LoRA scaling numerator (alpha / r).")
    dropout: float = Field(default=0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="Projection names adapted in the language model (the vision tower is never adapted).",
    )
    merge: bool = Field(
        default=False, description="Also write the merged full model to <output_dir>/merged after training."
    )


class FinetuneSection(_Section):
    method: Literal["full", "lora"] = Field(default="full", description="Full fine-tune or LoRA (PEFT).")
    lora: LoraSection = Field(default_factory=LoraSection)


class DataSection(_Section):
    train: list[Path] = Field(
        min_length=1,
        description="ShareGPT .json/.jsonl files or datasets saved by `data build` (trl/<name> folders).",
    )
    eval: list[Path] = Field(default_factory=list, description="Evaluation sets, same formats.")
    image_dir: Path | None = unset("Base folder of relative image paths (default: each file's folder).")
    check_replies: bool = Field(
        default=True, description="Refuse files whose assistant replies do not parse as plans/verdicts."
    )


class TrainingSection(_Section):
    learning_rate: float = Field(default=2e-5, gt=0)
    num_train_epochs: float = Field(
        default=3.0, gt=0, description="Passes over the data (the release: critic 2.0, planner 3.0)."
    )
    weight_decay: float = Field(
        default=0.0, ge=0, description="AdamW weight decay (the release's configs: 1e-6; TRL's default 0)."
    )
    max_steps: int = Field(default=-1, description="> 0 overrides num_train_epochs.")
    lr_scheduler_type: str = Field(default="cosine")
    warmup_ratio: float = Field(default=0.1, ge=0.0, lt=1.0)
    per_device_train_batch_size: int = count(2)
    gradient_accumulation_steps: int = count(1)
    max_length: int | None = count(16384, "Token cutoff per example.")
    bf16: bool = Field(default=True, description="bfloat16 mixed precision (needs a GPU that has it).")
    gradient_checkpointing: bool = Field(default=True)
    assistant_only_loss: bool = Field(default=True, description="Loss on assistant tokens only.")
    padding_free: bool = Field(
        default=False,
        description="Flatten batches without padding (text-only data; TRL refuses it with images).",
    )
    save_steps: int = count(500, "Write a checkpoint every N optimizer steps.")
    save_total_limit: int | None = count(None, "Keep only the newest N checkpoints.")
    logging_steps: int = count(10)
    seed: int = Field(default=42)
    report_to: list[str] | Literal["auto", "none"] = Field(
        default="auto", description="auto = tensorboard and wandb when installed; or a list; or none."
    )
    use_cpu: bool = Field(default=False, description="Train on CPU even when a GPU is present.")
    deepspeed: Path | None = unset("A DeepSpeed JSON config (usually via accelerate).")
    dataloader_num_workers: int = Field(default=0, ge=0)
    replica_check_steps: int | None = count(
        None,
        "Under several data-parallel processes, check every N steps that all ranks hold the same weights.",
    )


OutputDir = Annotated[Path, AfterValidator(Path.expanduser)]
"""``output_dir`` of a run, ``~`` expanded here as TRL expands it, so the checkpoints, the final model and
``--resume`` name one folder."""


class SFTRunConfig(_Section):
    """One SFT run: which model, which data, how to fine-tune, where to write."""

    role: Role | None = unset("planner or critic; --role must agree.")
    output_dir: OutputDir = Field(description="Checkpoints, logs and the final model.")
    model: ModelSection
    data: DataSection
    finetune: FinetuneSection = Field(default_factory=FinetuneSection)
    training: TrainingSection = Field(default_factory=TrainingSection)
    trl: dict[str, Any] = Field(
        default_factory=dict, description="Extra trl.SFTConfig fields, passed through (names are checked)."
    )

    @model_validator(mode="after")
    def _check(self) -> SFTRunConfig:
        if self.training.padding_free and self.finetune.method == "lora" and self.training.deepspeed:
            raise ValueError("padding_free with LoRA under DeepSpeed is untested; drop one of them")
        return self

    @classmethod
    def load(
        cls, path: Path, overrides: dict[str, Any] | None = None, sets: Sequence[str] = ()
    ) -> SFTRunConfig:
        """Read YAML (relative paths are taken from the working folder, as the CLI sees them);
        ``sets`` are ``--set KEY=VALUE`` changes (see :mod:`interleave_thinker.train.overrides`)."""
        return load_run_config(cls, path, "SFT config", overrides=overrides, sets=sets)
