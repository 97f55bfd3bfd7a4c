"""Supervised fine-tuning of the planner and the critic on TRL's SFTTrainer."""

from interleave_thinker.train.sft.checkpoints import is_adapter, merge_adapter
from interleave_thinker.train.sft.config import SFTRunConfig
from interleave_thinker.train.sft.trainer import SFTResult, build_trainer, run_sft

__all__ = ["SFTResult", "SFTRunConfig", "build_trainer", "is_adapter", "merge_adapter", "run_sft"]
