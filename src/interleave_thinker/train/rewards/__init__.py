"""Reward functions, plain and TRL-compatible: ``(prompts, completions, **columns) -> list[float]``."""

from interleave_thinker.train.rewards.answers import normalize_response
from interleave_thinker.train.rewards.critic import (
    CriticReward,
    CriticRewardWeights,
    StepwiseScorer,
    critic_accuracy_reward,
    critic_format_reward,
)
from interleave_thinker.train.rewards.planner import (
    PLANNER_REWARDS,
    planner_format_reward,
    planner_plan_reward,
    planner_score_reward,
)

__all__ = [
    "PLANNER_REWARDS",
    "CriticReward",
    "CriticRewardWeights",
    "StepwiseScorer",
    "critic_accuracy_reward",
    "critic_format_reward",
    "normalize_response",
    "planner_format_reward",
    "planner_plan_reward",
    "planner_score_reward",
]
