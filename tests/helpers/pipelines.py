"""Settings of a pipeline on the scripted backends, the start of many run-folder and trace tests."""

from __future__ import annotations

from typing import Any

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend


def scripted_config(size: int, steps: int, **sections: Any) -> PipelineConfig:
    """The scripted planner, critic and generator drawing ``size``-pixel squares in ``steps`` steps, with
    ``sections`` (``agents``, ``loop``, ...) as given."""
    return PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "generation": {"width": size, "height": size, "steps": steps},
            **sections,
        }
    )


def scripted_pipeline(config: PipelineConfig, plan: Any, critic: Any, generator: Any = None) -> Pipeline:
    """A pipeline under ``config`` whose planner answers ``plan`` and whose critic answers ``critic`` (a reply,
    or a function of the messages) every time; ``generator`` by default the scripted one."""
    return Pipeline(
        planner=ScriptedVLMBackend([plan], repeat_last=True),
        critic=ScriptedVLMBackend([critic], repeat_last=True),
        generator=ScriptedImageBackend() if generator is None else generator,
        config=config,
        templates=builtin_templates(),
    )
