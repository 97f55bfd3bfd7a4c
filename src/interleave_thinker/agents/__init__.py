"""The agents: template fill, message building, reply parsing and retry policy over a VLM backend."""

from interleave_thinker.agents.critic import Critic, CriticResult
from interleave_thinker.agents.planner import Planner
from interleave_thinker.agents.retry import RetryPolicy

__all__ = ["Critic", "CriticResult", "Planner", "RetryPolicy"]
