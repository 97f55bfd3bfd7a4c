"""Settings of a pipeline on the scripted backends, the start of many run-folder and trace tests."""

from __future__ import annotations

from typing import Any

from interleave_thinker import PipelineConfig


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
