"""The three agents share one base: backend, templates, token budget and retry policy, asked the same way."""

from __future__ import annotations

import importlib.util
from typing import Any, Unpack

import pytest
from PIL import Image

from interleave_thinker.agents.base import Agent
from interleave_thinker.agents.critic import Critic, format_verdict
from interleave_thinker.agents.judge import Judge
from interleave_thinker.agents.planner import Planner, format_plan
from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.backends.protocols import ChatOptions, Message
from interleave_thinker.core.errors import TemplateError
from interleave_thinker.core.prompt_store import TemplateSet, builtin_templates
from interleave_thinker.core.types import Plan, PlanStep, Verdict
from interleave_thinker.testing.scripted import ScriptedVLMBackend

GARBAGE = "no answer here"
PLAN = Plan(
    steps=[
        PlanStep(step_number=1, step_name="Só", instruction="Draw {it}.", prompt="a 'cat'", auxiliary_text="")
    ],
    reasoning="one step <b>",
)
VERDICT = Verdict(success=False, refine_prompt='make it "orange" </answer>', reasoning="too pale")


class BudgetRecording(ScriptedVLMBackend):
    """A scripted backend that also records the token budget of every call."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.budgets: list[int] = []

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        self.budgets.append(options.get("max_new_tokens", 4096))
        return super().chat(messages, **options)


def _image() -> Image.Image:
    return Image.new("RGB", (16, 16), (10, 20, 30))


def _turn(agent: Agent) -> Any:
    if isinstance(agent, Planner):
        return agent.plan("How to draw a cat?", []).plan
    if isinstance(agent, Critic):
        return agent.review(
            before=_image(), after=_image(), original_instruction="a", rewritten_prompt="b"
        ).verdict
    assert isinstance(agent, Judge)
    return agent.quality(_image()).pq_scores


CASES = [(Planner, format_plan(PLAN), PLAN, 4096), (Critic, format_verdict(VERDICT), VERDICT, 4096)]
JUDGE_CASE = (Judge, '{"score": [7, 9], "reasoning": "ok"}', [7.0, 9.0], 1024)


@pytest.mark.parametrize(("kind", "reply", "value", "budget"), [*CASES, JUDGE_CASE])
def test_every_agent_asks_through_the_base(kind: type[Agent], reply: str, value: Any, budget: int) -> None:
    backend = BudgetRecording([GARBAGE, reply])
    agent = kind(backend, builtin_templates(), retry=RetryPolicy(max_attempts=2, retry_temperature=0.5))
    assert isinstance(agent, Agent) and agent.max_new_tokens == budget
    assert _turn(agent) == value  # the formatted reply, read back after one unparsable reply
    assert backend.temperatures == [0.0, 0.5] and backend.budgets == [budget, budget]
    explicit = BudgetRecording([reply])
    assert _turn(kind(explicit, builtin_templates(), max_new_tokens=77)) == value
    assert explicit.budgets == [77]


@pytest.mark.parametrize(
    ("kind", "template"), [(Planner, "planner_narrative"), (Critic, "critic"), (Judge, "judge_context")]
)
def test_each_agent_names_its_template_when_missing(kind: type[Agent], template: str) -> None:
    empty = TemplateSet(kind="custom", origin="an empty folder", texts={})
    backend = ScriptedVLMBackend([])
    with pytest.raises(TemplateError, match=f"'{template}'.*an empty folder"):
        _turn(kind(backend, empty))
    assert backend.calls == []


@pytest.mark.parametrize(
    "old",
    [
        "interleave_thinker.core.messages",
        "interleave_thinker.core.parsing",
        "interleave_thinker.core.builtin_prompts",
    ],
)
def test_moved_modules_live_only_at_their_new_paths(old: str) -> None:
    """Messages and parsing moved into agents/, the built-in templates into prompts/, with no shim left."""
    assert importlib.util.find_spec(old) is None
