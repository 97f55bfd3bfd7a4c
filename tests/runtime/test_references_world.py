"""A scripted world where the subject drifts unless references keep it (issue 32, item 7b).

The generator double paints a flat image: a text-to-image call paints the subject's colour, a call with
references paints the colour of its first reference, and an edit without references takes the colour
of the image it edits and drifts it by ``DRIFT`` in the green channel (an edit is never quite faithful).
The critic double accepts only an image within ``TOLERANCE`` of the subject's colour. The real pipeline
runs a five-step plan: under ``release`` the drift accumulates and the critic rejects the later steps
(their last attempt is kept by the forcing pass); under a references policy every step keeps the subject.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.agents.critic import format_verdict
from interleave_thinker.agents.planner import format_plan
from interleave_thinker.backends.protocols import ImageBatchMixin, ImageRequest, Message
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.types import Plan, PlanStep, Trace, Verdict
from interleave_thinker.testing.scripted import ScriptedVLMBackend

SUBJECT = (200, 40, 40)
DRIFT = 30
TOLERANCE = 40
STEPS = 5
SIZE = (40, 32)


class Killed(RuntimeError):
    """The process stopping in the middle of a step."""


def colour(image: Image.Image) -> tuple[int, int, int]:
    r, g, b = image.convert("RGB").getpixel((0, 0))  # type: ignore[misc]
    return r, g, b


def distance(rgb: tuple[int, int, int]) -> int:
    return max(abs(a - b) for a, b in zip(rgb, SUBJECT, strict=True))


class DriftingGenerator(ImageBatchMixin):
    """The first reference's colour, else the subject (text-to-image), else the edited image drifted."""

    name = "drifting"
    max_references = 4  # declared, as every backend that takes references does (checked at load)

    def __init__(self, stop_at_step: int | None = None) -> None:
        self.calls: list[ImageRequest] = []
        self.stop_at_step = stop_at_step

    def generate(self, request: ImageRequest) -> Image.Image:
        if self.stop_at_step is not None and request.seed // 100 == self.stop_at_step:
            raise Killed(f"killed at step {self.stop_at_step}")
        self.calls.append(request)
        if request.references:
            rgb = colour(request.references[0])
        elif request.image is None:
            rgb = SUBJECT
        else:
            r, g, b = colour(request.image)
            rgb = (r, min(255, g + DRIFT), b)
        return Image.new("RGB", (request.width, request.height), rgb)


def judge_drift(messages: list[Message]) -> str:
    """The critic double: success only when the image made (the second image) kept the subject's colour."""
    after = ScriptedVLMBackend.images_in(messages)[1]
    ok = distance(colour(after)) <= TOLERANCE
    refine = "" if ok else "the same red fox, its fur exactly as red as before"
    return format_verdict(Verdict(success=ok, refine_prompt=refine, reasoning="colour checked"))


def plan_reply() -> str:
    steps = [
        PlanStep(
            step_number=i, step_name=f"Scene {i}", instruction=f"Scene {i}", prompt=f"the red fox, scene {i}"
        )
        for i in range(1, STEPS + 1)
    ]
    return format_plan(Plan(steps=steps, reasoning="five scenes"))


def run_world(
    policy: str,
    inputs: list[Image.Image],
    out: Path | None = None,
    generator: DriftingGenerator | None = None,
) -> tuple[Any, DriftingGenerator, ScriptedVLMBackend]:
    config = PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "loop": {"references": policy},
            "generation": {"width": SIZE[0], "height": SIZE[1]},
        }
    )
    generator = generator or DriftingGenerator()
    critic = ScriptedVLMBackend([judge_drift], repeat_last=True)
    pipe = Pipeline(
        planner=ScriptedVLMBackend([plan_reply()]),
        critic=critic,
        generator=generator,
        config=config,
        templates=builtin_templates(),
    )
    text = "<image> The fox in five scenes." if inputs else "A red fox in five scenes."
    return pipe(text, inputs or None, out_dir=out, resume=out is not None), generator, critic


def counts(trace: Trace, images: Any) -> dict[str, int]:
    accepted = [s.accepted_attempt for s in trace.steps]
    return {
        "kept_subject": sum(distance(colour(images[s.accepted_image])) <= TOLERANCE for s in trace.steps),
        "accepted_by_critic": sum(a is not None and not a.forced for a in accepted),
        "forced": sum(a is not None and a.forced for a in accepted),
        "generator_calls": sum(len(s.attempts) for s in trace.steps),
        "last_drift": distance(colour(images[trace.steps[-1].accepted_image])),
    }


SUBJECT_INPUT = [Image.new("RGB", SIZE, SUBJECT)]
COUNTED = ("kept_subject", "accepted_by_critic", "forced", "generator_calls", "last_drift")
# the request's inputs, the policy, and what happens to the subject (COUNTED, in order)
WORLDS = [
    pytest.param([], "release", (2, 2, 3, 11, 120), id="narrative-release"),
    pytest.param([], "previous+inputs", (2, 2, 3, 11, 120), id="narrative-previous+inputs"),  # no inputs
    pytest.param([], "anchor", (5, 5, 0, 5, 0), id="narrative-anchor"),
    pytest.param(SUBJECT_INPUT, "release", (1, 1, 4, 13, 150), id="guidance-release"),
    pytest.param(SUBJECT_INPUT, "previous+inputs", (5, 5, 0, 5, 0), id="guidance-previous+inputs"),
    pytest.param(SUBJECT_INPUT, "anchor", (5, 5, 0, 5, 0), id="guidance-anchor"),
]


@pytest.mark.parametrize(("inputs", "policy", "expected"), WORLDS)
def test_references_keep_the_subject_and_release_drifts(
    inputs: list[Image.Image], policy: str, expected: tuple[int, ...]
) -> None:
    result, _, _ = run_world(policy, inputs)
    assert result.ok
    assert counts(result.trace, result.images) == dict(zip(COUNTED, expected, strict=True))


def test_anchor_call_shapes_and_what_the_critic_sees() -> None:
    result, generator, critic = run_world("anchor", [])
    anchor = "step01_attempt0.png"
    assert [a.references for s in result.trace.steps for a in s.attempts] == [
        [],
        [],
        [anchor],
        [anchor],
        [anchor],
    ]
    assert [len(call.references) for call in generator.calls] == [0, 0, 1, 1, 1]
    assert all(call.references[0] is not call.image for call in generator.calls[2:])
    assert [len(ScriptedVLMBackend.images_in(call)) for call in critic.calls] == [2, 2, 3, 3, 3]
    texts = [ScriptedVLMBackend.text_in(call) for call in critic.calls]
    assert ["1 reference image(s)" in text for text in texts] == [False, False, True, True, True]
    assert texts[0].startswith(
        "You check the result of one image generation"
    )  # the critic template as released
    assert colour(ScriptedVLMBackend.images_in(critic.calls[2])[2]) == SUBJECT  # after before and after
    digests = result.trace.templates.digests if result.trace.templates else {}
    assert "references/critic" in digests and "references/critic" not in builtin_templates().texts


def test_guidance_inputs_go_first_and_the_input_edited_is_not_sent_twice() -> None:
    result, generator, _ = run_world("anchor", SUBJECT_INPUT)
    shapes = [a.references for s in result.trace.steps for a in s.attempts]
    assert shapes == [
        [],
        ["input_1.png"],
        ["input_1.png", "step01_attempt0.png"],
        *[["input_1.png", "step01_attempt0.png"]] * 2,
    ]
    assert generator.calls[0].image is not None and generator.calls[0].references == ()


def normalised(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r'"created_at": "[^"]*"', '"created_at": ""', text)
    return re.sub(r'"(generate_s|critic_s|duration_s)": [0-9.e-]+', r'"\1": 0', text)


def test_a_killed_anchor_run_resumes_with_its_anchor(tmp_path: Path) -> None:
    whole, _, _ = run_world("anchor", [], tmp_path / "whole")
    with pytest.raises(Killed):
        run_world("anchor", [], tmp_path / "killed", DriftingGenerator(stop_at_step=4))
    resumed, generator, _ = run_world("anchor", [], tmp_path / "killed")
    assert [call.seed for call in generator.calls] == [400, 500]  # steps 1-3 were kept
    assert [len(call.references) for call in generator.calls] == [1, 1]
    assert counts(resumed.trace, resumed.images) == counts(whole.trace, whole.images)
    whole_trace, resumed_trace = (
        json.loads(normalised(p / "trace.json")) for p in (tmp_path / "whole", tmp_path / "killed")
    )
    assert resumed_trace["steps"] == whole_trace["steps"]


def test_release_writes_the_trace_and_calls_of_the_released_loop() -> None:
    """``release`` is the loop as it was: no reference sent, none shown to the critic, none in the trace."""
    result, generator, critic = run_world("release", [])
    dumped = result.trace.model_dump_json()
    loop_settings = result.trace.settings["loop"]
    assert (
        '"references"' not in dumped and isinstance(loop_settings, dict) and "references" not in loop_settings
    )
    assert [(c.prompt, c.seed, c.references) for c in generator.calls[:3]] == [
        ("the red fox, scene 1", 100, ()),
        ("the red fox, scene 2", 200, ()),
        ("the red fox, scene 3", 300, ()),
    ]
    assert all(len(ScriptedVLMBackend.images_in(call)) == 2 for call in critic.calls)
    assert result.trace.templates is not None and "references/critic" not in result.trace.templates.digests
