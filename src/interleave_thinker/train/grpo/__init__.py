"""GRPO for the critic (the release's single-step objective) and the planner, on TRL's GRPOTrainer."""

from interleave_thinker.train.grpo.config import GRPORunConfig
from interleave_thinker.train.grpo.trainer import build_grpo_trainer, run_grpo

__all__ = ["GRPORunConfig", "build_grpo_trainer", "run_grpo"]
