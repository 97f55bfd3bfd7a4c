"""The step loop's call sequence, run with scripted backends and once more through the real tiny models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.agents.seeds import call_seed
from interleave_thinker.core.errors import PlanningError
from interleave_thinker.core.prompt_store import TemplateStore, builtin_templates
from interleave_thinker.testing.recording import GenCall, RecordingImage, ScriptedOverTiny
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.replies import plan_reply, verdict

GARBAGE = "I think the picture is nice."


TWO_STEPS = plan_reply(
    ("Draw a cat.", "a cat sketch", None), ("Colour it.", "colour the cat orange", "Use warm tones.")
)


@dataclass
class Env:
    kind: str
    make_vlm: Callable[[str, list[Any], bool], ScriptedVLMBackend]
    make_generator: Callable[[], RecordingImage]
    size: tuple[int, int]
    built: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def tiny_models() -> dict[str, Any]:
    from interleave_thinker.backends.specs import load_image_backend, load_vlm_backend

    return {
        "planner": load_vlm_backend("tiny:planner", role="planner"),
        "critic": load_vlm_backend("tiny:critic", role="critic"),
        "generator": load_image_backend("tiny:generator"),
    }


@pytest.fixture(params=["scripted", pytest.param("tiny", marks=pytest.mark.slow)])
def env(request: pytest.FixtureRequest) -> Env:
    if request.param == "scripted":
        return Env(
            "scripted",
            lambda role, replies, repeat: ScriptedVLMBackend(replies, name=role, repeat_last=repeat),
            lambda: RecordingImage(ScriptedImageBackend()),
            (96, 80),
        )
    models = request.getfixturevalue("tiny_models")
    return Env(
        "tiny",
        lambda role, replies, repeat: ScriptedOverTiny(models[role], replies, name=role, repeat_last=repeat),
        lambda: RecordingImage(models["generator"]),
        (64, 64),
    )


def build(
    env: Env, planner: list[Any], critic: list[Any], *, repeat_critic: bool = False, **loop: Any
) -> Pipeline:
    width, height = env.size
    config = PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "loop": loop,
            "generation": {"width": width, "height": height, "steps": 2},
            "agents": {"max_new_tokens": 8},
        }
    )
    env.built = {
        "planner": env.make_vlm("planner", planner, False),
        "critic": env.make_vlm("critic", critic, repeat_critic),
        "generator": env.make_generator(),
    }
    return Pipeline(**env.built, config=config, templates=builtin_templates())


def critic_texts(env: Env) -> list[str]:
    return [ScriptedVLMBackend.text_in(call) for call in env.built["critic"].calls]


def critic_images(env: Env) -> list[list[Image.Image]]:
    return [ScriptedVLMBackend.images_in(call) for call in env.built["critic"].calls]


def gen_calls(env: Env) -> list[GenCall]:
    return env.built["generator"].calls


def assert_image_sizes(env: Env) -> None:
    assert all(call.output.size == env.size for call in gen_calls(env))


def assert_processed(env: Env, role: str, images_per_call: int) -> None:
    if env.kind == "tiny":
        backend = env.built[role]
        assert backend.processed_images == [images_per_call] * len(backend.calls)


def test_all_steps_accepted_first_time(env: Env) -> None:
    pipe = build(env, [TWO_STEPS], [verdict(True), verdict(True)])
    result = pipe("How to draw a cat?")
    assert result.ok
    calls = gen_calls(env)
    assert [(c.prompt, c.seed, c.image is None) for c in calls] == [
        ("a cat sketch", 100, True),
        ("colour the cat orange", 200, False),
    ]
    assert calls[1].image is calls[0].output  # step 2 edits step 1's accepted image
    befores = [imgs[0] for imgs in critic_images(env)]
    assert befores[0].size == (1024, 1024) and befores[0].getextrema() == ((255, 255),) * 3  # white canvas
    assert befores[1] is calls[0].output
    assert [imgs[1] for imgs in critic_images(env)] == [calls[0].output, calls[1].output]
    assert [s.text for s in result.steps] == ["Draw a cat.", "Use warm tones."]
    assert [s.image for s in result.steps] == [calls[0].output, calls[1].output]
    assert [a.before_image for s in result.trace.steps for a in s.attempts] == [
        "white-canvas",
        "step01_attempt0.png",
    ]
    assert len(env.built["planner"].calls) == 1
    assert_image_sizes(env)
    assert_processed(env, "planner", 0)
    assert_processed(env, "critic", 2)


def test_retries_use_refined_prompts(env: Env) -> None:
    pipe = build(
        env, [TWO_STEPS], [verdict(False, "a cat sketch, clear outline"), verdict(True), verdict(True)]
    )
    result = pipe("How to draw a cat?")
    calls = gen_calls(env)
    assert [(c.prompt, c.seed) for c in calls] == [
        ("a cat sketch", 100),
        ("a cat sketch, clear outline", 101),
        ("colour the cat orange", 200),
    ]
    assert calls[1].image is None  # a retry of step 1 is still text-to-image
    assert calls[2].image is calls[1].output  # the accepted (second) image feeds step 2
    texts = critic_texts(env)
    assert (
        '"a cat sketch"' in texts[1] and '"a cat sketch, clear outline"' in texts[1]
    )  # original vs rewritten
    first = result.trace.steps[0]
    assert [a.accepted for a in first.attempts] == [False, True]
    assert first.attempts[0].verdict is not None and first.attempts[0].verdict.success is False
    assert first.accepted_image == "step01_attempt1.png"
    assert_image_sizes(env)


def test_last_attempt_is_forced_without_critic(env: Env) -> None:
    one = plan_reply(("Draw.", "p", None))
    pipe = build(env, [one], [verdict(False, "r1"), verdict(False, "r2")])
    result = pipe("Draw something")
    assert [(c.prompt, c.seed) for c in gen_calls(env)] == [("p", 100), ("r1", 101), ("r2", 102)]
    assert len(env.built["critic"].calls) == 2
    attempts = result.trace.steps[0].attempts
    assert [(a.accepted, a.forced, a.critic_called) for a in attempts] == [
        (False, False, True),
        (False, False, True),
        (True, True, False),
    ]
    assert result.steps[0].image is gen_calls(env)[2].output


def test_critic_garbage_every_time_never_crashes_or_reuses_verdicts(env: Env) -> None:
    one = plan_reply(("Draw.", "p", None))
    pipe = build(env, [one], [GARBAGE], repeat_critic=True)
    result = pipe("Draw something")
    assert result.ok
    assert [c.prompt for c in gen_calls(env)] == ["p", "p", "p"]  # no verdict, so no refinement
    assert len(env.built["critic"].calls) == 6  # 3 parse attempts for each of the first two attempts
    attempts = result.trace.steps[0].attempts
    assert [a.verdict for a in attempts] == [None, None, None]
    assert all("no JSON" in (a.critic_error or "") for a in attempts[:2])
    assert [len(a.critic_raw) for a in attempts] == [3, 3, 0]
    assert [a.accepted for a in attempts] == [False, False, True]
    # agents.decoding checkpoint (the default): every call, retries too, with the model's own decoding
    assert env.built["critic"].temperatures == [None, None, None] * 2
    expected = [[call_seed(0, "critic", 1, a, k) for k in range(3)] for a in (0, 1)]
    assert [a.critic_seeds for a in attempts] == [*expected, []]
    assert env.built["critic"].seeds == expected[0] + expected[1]


def test_planner_garbage_then_success(env: Env) -> None:
    pipe = build(
        env,
        [GARBAGE, "<answer>{'execution_plan': [{'step_number': 1}]}</answer>", TWO_STEPS],
        [verdict(True)] * 2,
    )
    result = pipe("How to draw a cat?")
    assert result.ok
    record = result.trace.planner
    assert len(record.raw_replies) == 3 and len(record.errors) == 2
    assert record.plan is not None and not record.plan.fallback and len(record.plan.steps) == 2
    assert env.built["planner"].temperatures == [None, None, None]
    assert record.seeds == env.built["planner"].seeds == [call_seed(0, "planner", 0, 0, k) for k in range(3)]


def test_planner_never_valid_fails_or_falls_back(env: Env, tmp_path: Path) -> None:
    pipe = build(env, [GARBAGE] * 3, [])
    with pytest.raises(PlanningError, match=r"no valid plan in 3 replies.*--planner-fallback single-step"):
        pipe("Draw a cat <b>now</b>", out_dir=tmp_path / "failed")
    assert gen_calls(env) == []
    saved = (tmp_path / "failed" / "trace.json").read_text()
    assert '"status": "failed"' in saved and GARBAGE in saved  # the raw replies are kept
    pipe = build(env, [GARBAGE] * 3, [verdict(True)], planner_fallback="single-step")
    result = pipe("Draw a cat")
    assert result.ok and result.trace.planner.plan is not None and result.trace.planner.plan.fallback
    assert [c.prompt for c in gen_calls(env)] == ["Draw a cat"]
    assert any("single-step" in w for w in result.trace.warnings)


def test_unanswering_planner_never_falls_back(env: Env, tmp_path: Path) -> None:
    # An empty script raises BackendError, as a refused connection does: that is no bad plan to replace.
    pipe = build(env, [], [verdict(True)], planner_fallback="single-step")
    with pytest.raises(
        PlanningError, match=r"The planner did not answer \(backend error: .*only to a planner"
    ):
        pipe("Draw a cat", out_dir=tmp_path / "refused")
    assert gen_calls(env) == []
    saved = (tmp_path / "refused" / "trace.json").read_text()
    assert '"status": "failed"' in saved and '"fallback": true' not in saved
    # A planner that answered, badly, then failed to answer: still no fallback (its last word was no word).
    pipe = build(env, [GARBAGE], [verdict(True)], planner_fallback="single-step")
    with pytest.raises(PlanningError, match="did not answer"):
        pipe("Draw a cat")


def guidance_input(tmp_path: Path) -> Path:
    path = tmp_path / "input.png"
    Image.new("RGB", (64, 64), (10, 120, 200)).save(path)
    return path


def test_guidance_task_a_steps_are_text_answers(env: Env, tmp_path: Path) -> None:
    plan = plan_reply(
        (None, None, "It is a blue square."), ("Make it night.", "make the scene dark, night sky", None)
    )
    pipe = build(env, [plan], [verdict(True)])
    result = pipe("<image> What is this? Then show it at night.", images=[guidance_input(tmp_path)])
    calls = gen_calls(env)
    assert [(c.prompt, c.seed) for c in calls] == [("make the scene dark, night sky", 200)]
    assert calls[0].image is not None and calls[0].image.getpixel((0, 0)) == (
        10,
        120,
        200,
    )  # edits the user image
    assert critic_images(env)[0][0] is calls[0].image
    assert [s.kind for s in result.trace.steps] == ["text", "image"]
    assert result.steps[0].text == "It is a blue square." and result.steps[0].image is None
    assert result.trace.steps[1].attempts[0].before_image == "input_1.png"
    assert_processed(env, "planner", 1)


def test_guidance_task_a_can_generate_like_the_demo(env: Env, tmp_path: Path) -> None:
    plan = plan_reply((None, None, "A blue square at dusk."), ("Make it night.", "night", None))
    pipe = build(env, [plan], [verdict(True), verdict(True)], text_steps="generate")
    pipe("<image> Describe, then make it night.", images=[guidance_input(tmp_path)])
    calls = gen_calls(env)
    assert [(c.prompt, c.seed) for c in calls] == [("A blue square at dusk.", 100), ("night", 200)]
    assert calls[1].image is calls[0].output


def test_critic_on_last_attempt_and_seed_base(env: Env) -> None:
    one = plan_reply(("Draw.", "p", None))
    pipe = build(
        env,
        [one],
        [verdict(False, "a"), verdict(False, "b"), verdict(False, "c")],
        critic_on_last_attempt=True,
        seed_base=7,
        max_attempts=3,
    )
    result = pipe("Draw something")
    assert [c.seed for c in gen_calls(env)] == [107, 108, 109]
    assert len(env.built["critic"].calls) == 3
    last = result.trace.steps[0].attempts[-1]
    assert last.critic_called and last.accepted and last.forced
    assert result.steps[0].image is gen_calls(env)[-1].output


def test_save_writes_everything(env: Env, tmp_path: Path) -> None:
    pipe = build(env, [TWO_STEPS], [verdict(False, "better"), verdict(True), verdict(True)])
    out = pipe("How to draw a cat?", out_dir=tmp_path / "run").save(tmp_path / "copy")
    for folder in (tmp_path / "run", out):
        names = sorted(p.name for p in (folder / "images").iterdir())
        assert names == ["step01_attempt0.png", "step01_attempt1.png", "step02_attempt0.png"]
        html = (folder / "index.html").read_text()
        assert html.index("images/step01_attempt1.png") < html.index("images/step02_attempt0.png")
        assert "<details>" in html and "Refined prompt:</b> better" in html
        md = (folder / "document.md").read_text()
        assert "![step 1](images/step01_attempt1.png)" in md and "Use warm tones." in md
        assert not [p for p in folder.rglob("*.tmp")]


def test_released_templates_reach_the_models(prompts_dir: Path) -> None:
    templates = TemplateStore(folder=prompts_dir, download=False).load()
    planner = ScriptedVLMBackend([TWO_STEPS])
    critic = ScriptedVLMBackend([verdict(True)] * 2)
    config = PipelineConfig.model_validate({"planner": "x:y", "critic": "x:y", "generator": "x:y"})
    result = Pipeline(
        planner=planner, critic=critic, generator=ScriptedImageBackend(), config=config, templates=templates
    )("Draw a cat both visually and textually")
    narrative = (prompts_dir / "planner_narrative.txt").read_text(encoding="utf-8")
    assert ScriptedVLMBackend.text_in(planner.calls[0]) == narrative.replace("{text_input}", "Draw a cat")
    assert result.trace.templates is not None and result.trace.templates.kind == "released"


def test_a_failed_step_is_written_once_by_the_closing_write(tmp_path: Path, monkeypatch: Any) -> None:
    """A step with no image ends the request: its trace goes to disk once, in the closing write, holding
    the failure (before: the step's checkpoint, the failure's and the closing one, three files alike)."""
    from interleave_thinker.runtime import recorder as recorder_module

    written: list[str] = []
    real = recorder_module.write_atomic

    def counting(path: Path, data: bytes | str) -> None:
        if path.name == "trace.json":
            written.append(data if isinstance(data, str) else data.decode())
        real(path, data)

    monkeypatch.setattr(recorder_module, "write_atomic", counting)
    config = PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "loop": {"max_attempts": 2},
            "generation": {"width": 32, "height": 32, "steps": 2},
        }
    )
    pipe = Pipeline(
        planner=ScriptedVLMBackend([TWO_STEPS]),
        critic=ScriptedVLMBackend([]),
        generator=ScriptedImageBackend(fail_on=lambda prompt: True),
        config=config,
        templates=builtin_templates(),
    )
    result = pipe("How to draw a cat?", out_dir=tmp_path / "run")
    assert result.trace.status == "failed" and result.trace.error is not None
    assert result.trace.error.startswith("Step 1 produced no image: ")
    assert len(written) == 2  # after the plan, then the closing write
    assert '"status": "running"' in written[0] and '"status": "failed"' in written[1]
    assert (tmp_path / "run" / "trace.json").read_text() == written[1]
