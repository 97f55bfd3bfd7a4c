"""``--mode base``: the generator alone on the benchmark prompt, through the same pipeline and run store.

The paper's baseline is one generator call per item with the agentic run's size, steps, guidance and
seed. Rather than a second loop, the pipeline gets a planner that turns the request itself into a
one-step plan (its "reply" is recorded in the trace like any planner's), a single attempt, and no
critic; so base runs are concurrent, resumable and traced exactly like agentic ones.
"""

from __future__ import annotations

import json
from typing import Any, Unpack

from interleave_thinker.backends.protocols import ChatOptions, Message, VLMBatchMixin
from interleave_thinker.backends.specs import BackendOptions, load_image_backend
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.errors import BackendError
from interleave_thinker.core.prompt_store import TemplateSet
from interleave_thinker.runtime.pipeline import Pipeline

BASE_PLANNER = "eval:one-step-plan"
BASE_CRITIC = "eval:no-critic"
TEMPLATE_ORIGIN = "eval --mode base: the request text itself, as a one-step plan"


class OneStepPlanner(VLMBatchMixin):
    """Answers every planning turn with a one-step plan whose prompt is the request text as sent.

    With the identity templates below, the text parts of the planner turn are the request (narrative
    requests already have the UEval suffix " both visually and textually" removed, as the release does).
    """

    name = BASE_PLANNER

    def chat(self, messages: list[Message], **options: Unpack[ChatOptions]) -> str:
        """The request as a one-step plan; the options change nothing (no model is asked)."""
        text = " ".join(
            part["text"].strip()
            for message in messages
            for part in message["content"]
            if part.get("type") == "text" and part["text"].strip()
        )
        step = {
            "step_number": 1,
            "step_name": "Benchmark prompt",
            "instruction": text,
            "prompt": text,
            "auxiliary_text": None,
        }
        return "<answer>" + json.dumps({"execution_plan": [step]}, ensure_ascii=False) + "</answer>"


class NoCritic(VLMBatchMixin):
    """Base mode makes one attempt, which is accepted without a critic; a call here is a bug."""

    name = BASE_CRITIC

    def chat(self, messages: list[Message], **options: Any) -> str:
        raise BackendError("eval --mode base asks no critic; this call should not happen.")


def base_templates() -> TemplateSet:
    texts = {"planner_narrative": "{text_input}", "planner_guidance": "{text_input}", "critic": ""}
    return TemplateSet(kind="custom", origin=TEMPLATE_ORIGIN, texts=texts)


def base_config(config: PipelineConfig) -> PipelineConfig:
    """The same generator and generation settings; one attempt, no critic, no fallback needed."""
    loop = config.loop.model_copy(
        update={"max_attempts": 1, "critic_on_last_attempt": False, "planner_fallback": "error"}
    )
    return config.model_copy(
        update={"planner": BASE_PLANNER, "critic": BASE_CRITIC, "loop": loop, "notice": config.notice}
    )


def base_pipeline(config: PipelineConfig) -> Pipeline:
    """A pipeline whose only model is ``config.generator``."""
    generator = load_image_backend(config.generator, BackendOptions.from_config(config))
    return Pipeline(
        planner=OneStepPlanner(),
        critic=NoCritic(),
        generator=generator,
        config=config,
        templates=base_templates(),
    )
