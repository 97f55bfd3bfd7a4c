"""The released sequential loop's request with scripted backends, and the trace it wrote before the loop's
opt-in features existed (``tests/fixtures/candidates/release_trace.json``): each opt-in setting at its
off value must write that trace byte for byte (candidates, speculation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.run_folder import read_trace, trace_json
from interleave_thinker.core.types import Durations, Trace
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.common import REPO
from tests.helpers.replies import plan_reply, verdict

GOLDEN = REPO / "tests" / "fixtures" / "candidates" / "release_trace.json"
"""The normalised trace the released sequential loop wrote for :func:`release_request` (made on main,
before loop.candidates existed)."""


def scripted(critic: list[str], plan: str, **loop: Any) -> tuple[Pipeline, ScriptedImageBackend]:
    config = PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "loop": loop,
            "generation": {"width": 48, "height": 40, "steps": 2},
            "agents": {"max_new_tokens": 8},
        }
    )
    generator = ScriptedImageBackend(name="generator")
    pipe = Pipeline(
        planner=ScriptedVLMBackend([plan], name="planner"),
        critic=ScriptedVLMBackend(critic, name="critic", repeat_last=len(critic) == 1),
        generator=generator,
        config=config,
        templates=builtin_templates(),
    )
    return pipe, generator


THREE_STEPS = plan_reply(
    ("Draw a cat.", "a cat sketch", None),
    ("Colour it.", "colour the cat orange", "Use warm tones."),
    ("Say why.", None, "Orange reads as warm."),
)


def release_request(out: Path, **loop: Any) -> None:
    """Retries with refined prompts, critic garbage, a forced last attempt, edits, and a step whose critic
    has no reply left (backend errors, then the forced last attempt)."""
    critic = [
        "I think it is fine.",  # no verdict: the critic agent asks again
        verdict(False, "a cat sketch with thick lines"),
        verdict(False, ""),
        verdict(False, "colour the cat a deep orange"),
        verdict(True),
    ]
    pipe, _ = scripted(critic, THREE_STEPS, **loop)
    assert pipe("How to draw a cat?", out_dir=out).ok


def normalised(trace: Trace) -> str:
    """``trace.json`` with its clock readings (and the template digests, which are not the loop's) fixed."""
    trace.created_at, trace.duration_s, trace.templates = "T", 0.0, None
    trace.planner.duration_s = 0.0
    for step in trace.steps:
        for attempt in step.attempts:
            attempt.durations = Durations()
    return trace_json(trace)


def folder(out: Path) -> tuple[str, dict[str, bytes]]:
    trace = read_trace(out / "trace.json")
    assert trace is not None
    return normalised(trace), {p.name: p.read_bytes() for p in sorted((out / "images").iterdir())}
