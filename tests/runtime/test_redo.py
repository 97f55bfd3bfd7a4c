"""Redo from a step (``Pipeline.redo``, runtime/redo.py; ``run --resume-from RUN --redo-step K``): the
steps before K are the parent's, byte for byte, with no call made for them; a redo of a redo works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.testing.doubles.seeded import SeededWorld
from interleave_thinker.testing.doubles.server import LocalServer
from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
from tests.helpers.replies import plan_reply, verdict

PLAN = plan_reply(
    ("Draw a cat.", "a cat", None),
    ("Give it a hat.", "the cat with a hat", None),
    ("Make it night.", "the cat at night", None),
)


def scripted() -> tuple[Pipeline, ScriptedVLMBackend, ScriptedVLMBackend, ScriptedImageBackend]:
    config = PipelineConfig.model_validate(
        {
            "planner": "scripted:planner",
            "critic": "scripted:critic",
            "generator": "scripted:generator",
            "generation": {"width": 32, "height": 24, "steps": 2},
        }
    )
    planner = ScriptedVLMBackend([PLAN], name="planner")
    critic_replies = [verdict(False, "sharper"), verdict(True)] * 3
    critic = ScriptedVLMBackend(critic_replies, name="critic")
    generator = ScriptedImageBackend(name="generator")
    pipe = Pipeline(
        planner=planner, critic=critic, generator=generator, config=config, templates=builtin_templates()
    )
    return pipe, planner, critic, generator


def steps_json(folder: Path) -> list[Any]:
    return json.loads((folder / "trace.json").read_text(encoding="utf-8"))["steps"]


def untimed(steps: list[Any]) -> list[Any]:
    for step in steps:
        for attempt in step["attempts"]:
            attempt.pop("durations")
    return steps


def image_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "images").iterdir())}


def test_redo_takes_the_steps_before_k_without_a_call_and_a_redo_of_a_redo_works(tmp_path: Path) -> None:
    pipe, *_ = scripted()
    assert pipe("Draw a cat at night", out_dir=tmp_path / "first").ok

    pipe, planner, critic, generator = scripted()
    again = pipe.redo(tmp_path / "first", 2, out_dir=tmp_path / "second")
    assert again.ok and planner.calls == []
    assert [c.seed for c in generator.calls] == [200, 201, 300, 301]  # nothing for step 1
    assert len(critic.calls) == 4
    first, second = steps_json(tmp_path / "first"), steps_json(tmp_path / "second")
    assert second[0] == first[0]
    assert untimed(second[1:]) == untimed(first[1:])  # same seeds and same replies: the same steps again
    assert {k: v for k, v in image_bytes(tmp_path / "second").items() if k.startswith("step01")} == {
        k: v for k, v in image_bytes(tmp_path / "first").items() if k.startswith("step01")
    }
    assert again.trace.parent is not None and again.trace.parent.run == str(tmp_path / "first")
    assert (again.trace.parent.step, again.trace.parent.instruction) == (2, None)

    # a redo of the redo, from step 3, with a new instruction and a new seed base
    pipe, planner, critic, generator = scripted()
    third = pipe.redo(
        tmp_path / "second", 3, out_dir=tmp_path / "third", instruction="the cat in snow", seed=7
    )
    assert third.ok and planner.calls == []
    assert [(c.prompt, c.seed) for c in generator.calls] == [("the cat in snow", 307), ("sharper", 308)]
    assert steps_json(tmp_path / "third")[:2] == steps_json(tmp_path / "second")[:2]  # byte for byte
    assert third.trace.planner.plan is not None
    assert third.trace.planner.plan.steps[2].prompt == "the cat in snow"
    assert third.trace.parent is not None
    assert (third.trace.parent.run, third.trace.parent.step, third.trace.parent.seed_base) == (
        str(tmp_path / "second"),
        3,
        7,
    )
    assert third.trace.settings["loop"]["seed_base"] == 7  # type: ignore[index]
    assert json.loads((tmp_path / "first" / "trace.json").read_text(encoding="utf-8")).get("parent") is None


def test_redo_refuses_a_step_out_of_range_and_a_used_folder(tmp_path: Path) -> None:
    pipe, *_ = scripted()
    assert pipe("Draw a cat at night", out_dir=tmp_path / "first").ok
    cases = ((4, "x", "has steps 1 to 3"), (0, "x", "has steps 1 to 3"), (2, "first", "holds a run"))
    for step, out, words in cases:
        with pytest.raises(InputError, match=words):
            scripted()[0].redo(tmp_path / "first", step, out_dir=tmp_path / out)
    assert not (tmp_path / "x").exists()


def test_run_resume_from_redoes_a_served_run_with_no_call_for_the_steps_before(tmp_path: Path) -> None:
    world = SeededWorld(accept=lambda seed, tag: seed % 100 == 1)
    with LocalServer(world) as server:
        roles = {
            "planner": f"openai:{server.url}/v1#scripted",
            "critic": f"openai:{server.url}/v1#scripted",
            "generator": f"http:{server.url}",
        }
        with Pipeline.from_config(PipelineConfig.resolve(preset="tiny", overrides=roles)) as pipe:
            assert pipe("Draw a fox", out_dir=tmp_path / "first").ok
        flags = [a for role, spec in roles.items() for a in (f"--{role}", spec)] + ["--preset", "tiny"]
        mark = len(world.log)
        words = [
            "run",
            "--resume-from",
            str(tmp_path / "first"),
            "--redo-step",
            "2",
            "--out",
            str(tmp_path / "b"),
        ]
        result = CliRunner().invoke(app, [*words, "--instruction", "a fox in snow", *flags])
        assert result.exit_code == 0, result.output
        made = world.log[mark:]
    assert [c["role"] for c in made if c["role"] == "planner"] == []
    assert min(c["seed"] for c in made if c["role"] == "generator") == 200  # nothing for step 1
    assert steps_json(tmp_path / "b")[0] == steps_json(tmp_path / "first")[0]
    assert steps_json(tmp_path / "b")[1]["planned_prompt"] == "a fox in snow"
    parent = json.loads((tmp_path / "b" / "trace.json").read_text(encoding="utf-8"))["parent"]
    assert parent == {
        "run": str(tmp_path / "first"),
        "step": 2,
        "instruction": "a fox in snow",
        "seed_base": None,
    }
    refused = CliRunner().invoke(app, ["run", "--resume-from", str(tmp_path / "nowhere"), "--redo-step", "2"])
    assert isinstance(refused.exception, InputError) and "no trace.json" in str(refused.exception)


def test_redo_refuses_to_keep_a_failed_step(tmp_path: Path) -> None:
    """A step that ended with no image kept is complete but failed: a redo past it would show nothing there."""
    from interleave_thinker.core.run_folder import load_trace, trace_path, write_trace

    pipe, *_ = scripted()
    assert pipe("Draw a cat at night", out_dir=tmp_path / "first").ok
    trace = load_trace(trace_path(tmp_path / "first"))
    trace.steps[1].accepted_image = None  # step 2 failed: every attempt's image lost, nothing kept
    write_trace(tmp_path / "first", trace)
    with pytest.raises(InputError, match=r"step 2 of the run in .* did not finish; redo from step 2"):
        scripted()[0].redo(tmp_path / "first", 3, out_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert scripted()[0].redo(tmp_path / "first", 2, out_dir=tmp_path / "y").ok
