"""The format-trained tiny models: the pipeline gets a real multi-step plan and critic verdicts from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from interleave_thinker.backends.specs import load_image_backend
from interleave_thinker.backends.vlm.transformers_backend import TransformersVLMBackend
from interleave_thinker.core.config import PipelineConfig
from interleave_thinker.core.prompt_store import TemplateStore
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.pipeline import Pipeline
from interleave_thinker.tiny.format_trained import MAX_NEW_TOKENS, ensure_format_trained_tiny

pytestmark = pytest.mark.slow


def test_pipeline_plans_and_reviews_with_the_format_trained_models(tmp_path: Path) -> None:
    templates = TemplateStore().load()
    paths = ensure_format_trained_tiny(templates=templates)
    assert paths == ensure_format_trained_tiny(templates=templates)  # cached: the second call builds nothing
    config = PipelineConfig.resolve(
        preset="tiny",
        overrides={
            "agents": {
                "max_new_tokens": MAX_NEW_TOKENS,
                "max_parse_attempts": 1,
            },  # one greedy reply, no retry
            "loop": {"planner_fallback": "error"},
        },
    )
    pipe = Pipeline(
        planner=TransformersVLMBackend(str(paths.planner), device="cpu"),
        critic=TransformersVLMBackend(str(paths.critic), device="cpu"),
        generator=load_image_backend("tiny:generator"),
        config=config,
        templates=templates,
    )
    result = pipe("How to draw a cat step by step?", out_dir=tmp_path / "run")
    trace = Trace.model_validate_json((tmp_path / "run" / "trace.json").read_text())
    assert trace.planner.plan is not None and not trace.planner.plan.fallback
    assert len(trace.planner.raw_replies) == 1
    image_steps = [s for s in trace.steps if s.kind == "image"]
    assert len(image_steps) >= 2
    verdicts = [a.verdict for s in trace.steps for a in s.attempts if a.verdict is not None]
    assert verdicts, [a.critic_raw for s in trace.steps for a in s.attempts]
    assert result.ok

    # The run folder the pipeline wrote is a training-data source as it is.
    from interleave_thinker.train.data.trajectories import discover

    (trajectory,) = discover(tmp_path / "run")
    assert trajectory.plan is not None and len(trajectory.plan) == len(trace.planner.plan.steps)
    assert sum(1 for s in trajectory.steps for a in s.attempts if a.label is not None) == len(verdicts)
