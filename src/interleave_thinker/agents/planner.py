"""The planner agent: turns a request into an execution plan of image steps."""

from __future__ import annotations

from PIL import Image

from interleave_thinker.agents.retry import RetryPolicy
from interleave_thinker.backends.protocols import VLMBackend
from interleave_thinker.core.messages import IMAGE_MARKER, planner_messages
from interleave_thinker.core.parsing import parse_plan
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.core.types import Plan, PlannerRecord


class Planner:
    def __init__(
        self,
        backend: VLMBackend,
        templates: TemplateSet,
        *,
        retry: RetryPolicy | None = None,
        max_new_tokens: int = 4096,
    ) -> None:
        self.backend = backend
        self.templates = templates
        self.retry = retry or RetryPolicy()
        self.max_new_tokens = max_new_tokens

    def plan(self, request_text: str, images: list[Image.Image]) -> PlannerRecord:
        """Ask for a plan; the record holds the plan or, after all retries, only the raw replies and errors."""
        messages = planner_messages(self.templates, request_text, images)
        outcome = self.retry.run(
            lambda temperature: self.backend.chat(
                messages, max_new_tokens=self.max_new_tokens, temperature=temperature
            ),
            parse_plan,
        )
        return PlannerRecord(
            raw_replies=outcome.raw_replies,
            errors=outcome.errors,
            plan=outcome.value,
            duration_s=round(outcome.duration_s, 4),
        )


def single_step_plan(request_text: str) -> Plan:
    """The fallback plan: the request itself as one image step."""
    text = " ".join(IMAGE_MARKER.sub(" ", request_text).split())
    return Plan.model_validate(
        {
            "steps": [
                {
                    "step_number": 1,
                    "step_name": "Request",
                    "instruction": text,
                    "prompt": text,
                    "auxiliary_text": None,
                }
            ],
            "fallback": True,
        }
    )
