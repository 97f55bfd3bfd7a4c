"""The agents: each names its templates, builds its messages, parses its reply (and writes one), over a VLM backend."""

from interleave_thinker.agents.base import Agent
from interleave_thinker.agents.critic import Critic, CriticResult, format_verdict, parse_verdict
from interleave_thinker.agents.judge import Judge, Judgement, parse_judgement
from interleave_thinker.agents.planner import Planner, format_plan, parse_plan
from interleave_thinker.agents.retry import RetryPolicy

__all__ = [
    "Agent",
    "Critic",
    "CriticResult",
    "Judge",
    "Judgement",
    "Planner",
    "RetryPolicy",
    "format_plan",
    "format_verdict",
    "parse_judgement",
    "parse_plan",
    "parse_verdict",
]
