"""The references policy's parts one by one: the chooser (runtime/references.py), the critic's messages with
references (agents/critic.py, our template prompts/references/critic.txt) and ``Attempt.references`` in a trace."""

from __future__ import annotations

from PIL import Image

from interleave_thinker.agents.critic import critic_messages, references_template
from interleave_thinker.backends.references import reference_cap
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.core.types import Attempt, PlanStep, Request, StepRecord, Trace
from interleave_thinker.runtime.references import References
from interleave_thinker.testing.scripted import ScriptedVLMBackend


def image(value: int) -> Image.Image:
    return Image.new("RGB", (8, 8), (value, value, value))


INPUTS = [(image(1), "input_1.png"), (image(2), "input_2.png")]


def trace_with(*accepted: str | None) -> Trace:
    step = PlanStep(step_number=1, prompt="p")
    steps = [StepRecord(step=step, kind="image", accepted_image=name, complete=True) for name in accepted]
    return Trace(request=Request(text="t"), steps=steps)


def chooser(policy: str, trace: Trace, limit: int | None = None) -> References:
    images = {name: image(10 + i) for i, name in enumerate(["step01_attempt0.png", "step02_attempt1.png"])}
    return References(policy, INPUTS, trace, images, limit)  # type: ignore[arg-type]


def names(chosen: list[tuple[Image.Image, str]]) -> list[str]:
    return [name for _, name in chosen]


def test_each_policy_gives_its_call_shape() -> None:
    trace = trace_with(None, "step01_attempt0.png", "step02_attempt1.png")  # a text step, then two images
    latest = (image(11), "step02_attempt1.png")
    assert chooser("release", trace).for_attempt(latest) == []
    assert names(chooser("previous+inputs", trace).for_attempt(latest)) == ["input_1.png", "input_2.png"]
    assert names(chooser("anchor", trace).for_attempt(latest)) == [
        "input_1.png",
        "input_2.png",
        "step01_attempt0.png",  # the first accepted image, not the latest
    ]


def test_the_image_edited_is_never_a_reference_and_a_limit_keeps_the_last() -> None:
    anchored = chooser("anchor", trace_with("step01_attempt0.png"))
    assert names(anchored.for_attempt((image(10), "step01_attempt0.png"))) == ["input_1.png", "input_2.png"]
    assert names(anchored.for_attempt(INPUTS[1])) == ["input_1.png", "step01_attempt0.png"]
    assert names(chooser("anchor", trace_with("step01_attempt0.png"), limit=1).for_attempt(None)) == [
        "step01_attempt0.png"
    ]
    assert chooser("anchor", trace_with("step01_attempt0.png"), limit=0).for_attempt(None) == []
    assert names(chooser("anchor", trace_with(None)).for_attempt(None)) == ["input_1.png", "input_2.png"]


def test_the_cap_is_read_only_when_declared_as_a_count() -> None:
    class Declares:
        max_references = 4

    class Says:
        max_references = True

    assert [reference_cap(g) for g in (Declares(), Says(), object())] == [4, 0, 0]


def test_the_critic_sees_the_references_after_before_and_after_with_our_template() -> None:
    before, after, refs = image(1), image(2), [image(3), image(4)]
    templates = builtin_templates()
    kwargs = {
        "before": before,
        "after": after,
        "original_instruction": "a fox",
        "rewritten_prompt": "a red fox",
    }
    released = critic_messages(templates, **kwargs)  # type: ignore[arg-type]
    with_refs = critic_messages(templates, **kwargs, references=refs)  # type: ignore[arg-type]
    assert ScriptedVLMBackend.images_in(released) == [before, after]
    assert ScriptedVLMBackend.images_in(with_refs) == [before, after, *refs]
    assert with_refs[0]["content"][-1]["type"] == "text"
    text = ScriptedVLMBackend.text_in(with_refs)
    assert '"a fox"' in text and '"a red fox"' in text and "2 reference image(s)" in text
    assert (
        "{" + "reference_count}" not in text and "previous_step_success" in text and "refine_prompt" in text
    )
    assert ScriptedVLMBackend.text_in(released) == templates.get("critic").replace(
        "{original_instruction}", "a fox"
    ).replace("{rewritten_prompt}", "a red fox")
    assert (
        "references/critic" not in templates.texts and references_template() not in templates.texts.values()
    )


def test_an_attempt_without_references_serialises_as_before() -> None:
    plain = Attempt(step_number=1, attempt=0, prompt="p", seed=100, before_image="white-canvas")
    assert "references" not in plain.model_dump_json() and "references" not in plain.model_dump()
    sent = plain.model_copy(update={"references": ["input_1.png", "step01_attempt0.png"]})
    again = Attempt.model_validate_json(sent.model_dump_json())
    assert again.references == ["input_1.png", "step01_attempt0.png"]
    assert Attempt.model_validate_json(plain.model_dump_json()).references == []
