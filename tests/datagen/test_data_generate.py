"""`data generate`: the authors' data-generation loop as settings, every attempt judged in the run, the
release's execution_record.json, and call counts equal to what the servers saw (kill + resume:
test_data_generate_resume.py).

Teachers are real HTTP servers on 127.0.0.1: one OpenAI-compatible chat server answering as planner,
critic and judge by rule (the reply depends only on the request, so a resumed run gets the same
answers), and the scripted "/edit" generator (a flat colour from prompt, seed and source image).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.config import LoopOptions
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.server import LocalServer
from interleave_thinker.train.data.loaders import load_record
from interleave_thinker.train.data.scoring import unscored
from interleave_thinker.train.data.trajectories import discover
from tests.helpers.datagen import BUDGET, Teachers, write_config


def write_inputs(folder: Path) -> Path:
    image = folder / "input.png"
    Image.new("RGB", (24, 24), (10, 200, 30)).save(image)
    rows = [
        {"id": "hard", "prompt": "Draw [[a cat hard; add a hat]]"},
        {"id": "guided", "prompt": "<image>Change it: [[turn it red]]", "images": [str(image)]},
        {"id": "never", "prompt": "Try [[never works; unreachable]]"},
    ]
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def trace(out: Path, request_id: str) -> dict[str, Any]:
    return dict(json.loads((out / "requests" / request_id / "trace.json").read_text()))


@dataclass
class TeacherOutput:
    out: Path
    chat: list[dict[str, Any]]
    gens: list[dict[str, Any]]
    output: str

    @property
    def attempts(self) -> dict[str, list[dict[str, Any]]]:
        return {
            t: [a for s in trace(self.out, t)["steps"] for a in s["attempts"]]
            for t in ("hard", "guided", "never")
        }


@pytest.fixture(scope="module")
def run(
    servers: tuple[Teachers, LocalServer, scripted_models.State], tmp_path_factory: pytest.TempPathFactory
) -> TeacherOutput:
    """One teacher run of three requests: a step that fails then succeeds, a guided edit, a budget used up."""
    teachers, edit, state = servers
    tmp_path = tmp_path_factory.mktemp("teacher")
    prices = {"planner": {"per_call": 0.01}, "critic": {"per_1k_input_tokens": 1.0}}
    prices["generator"] = {"per_image": 0.5}
    config = write_config(tmp_path / "teacher.json", teachers, edit, prices=prices)
    inputs = write_inputs(tmp_path)
    chat_start, edit_start = len(teachers.log), len(state.log)
    out = tmp_path / "out"
    args = ["data", "generate", "--config", str(config), "--input", str(inputs), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--concurrency", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    return TeacherOutput(out, teachers.log[chat_start:], state.log[edit_start:], result.output)


def test_the_input_image_reaches_the_planner(run: TeacherOutput) -> None:
    chat = run.chat
    # The request's input image reaches the planner (the authors' scripts never pass it).
    planner_calls = [c for c in chat if c["role"] == "planner"]
    assert sorted(c["images"] for c in planner_calls) == [0, 0, 1]
    assert any("Change it:" in c["text"] for c in planner_calls if c["images"] == 1)


def test_every_edit_attempt_has_its_own_seed(run: TeacherOutput) -> None:
    gens, attempts = run.gens, run.attempts
    # Every edit attempt has its own seed: step * 100 + attempt, and the generator got exactly those.
    assert [a["seed"] for a in attempts["hard"]] == [100, 101, 200]
    assert [a["seed"] for a in attempts["never"]] == [100, 101, 102, 103]
    assert sorted((g["prompt"], g["seed"]) for g in gens) == sorted(
        (a["prompt"], a["seed"]) for t in attempts.values() for a in t
    )


def test_the_critic_sees_every_attempt_and_the_budget_holds(run: TeacherOutput) -> None:
    attempts = run.attempts
    hard, never, guided = trace(run.out, "hard"), trace(run.out, "never"), trace(run.out, "guided")
    # The critic judged every attempt, the last included; the budget of generator calls per request holds.
    assert all(a["critic_called"] for t in attempts.values() for a in t)
    assert len(attempts["never"]) == BUDGET and never["status"] == "failed"
    assert "budget of 4 calls per request" in never["error"] and len(never["steps"]) == 2
    assert [a["accepted"] for a in attempts["hard"]] == [False, True, True]
    assert hard["status"] == guided["status"] == "succeeded"


def test_rewritten_prompt_is_empty_on_a_first_attempt(run: TeacherOutput) -> None:
    chat, attempts = run.chat, run.attempts
    # rewritten_prompt is empty on a step's first attempt, the prompt used on the others.
    critic_calls = [c for c in chat if c["role"] == "critic"]
    assert len(critic_calls) == sum(len(t) for t in attempts.values()) == 8
    seen = sorted((c["original"], c["rewritten"]) for c in critic_calls if c["original"] == "a cat hard")
    assert seen == [("a cat hard", ""), ("a cat hard", "a cat hard refined")]
    assert sum(1 for c in critic_calls if c["rewritten"] == "") == 4  # one first attempt per step


def test_every_attempt_is_judged_in_the_run(
    run: TeacherOutput, servers: tuple[Teachers, LocalServer, scripted_models.State]
) -> None:
    chat, attempts, teachers = run.chat, run.attempts, servers[0]
    # Each attempt was judged in the run (requests one at a time, so in order): the judge's SC and PQ are in
    # its trace, and PQ saw the after image at the before image's size (the 1024² canvas for text-to-image).
    judged = [c for c in chat if c["role"] == "judge"]
    assert [c["kind"] for c in judged] == ["sc", "pq"] * (len(judged) // 2)
    pairs = [(judged[i]["score"], judged[i + 1]["score"]) for i in range(0, len(judged), 2)]
    ordered = [a for t in ("hard", "guided", "never") for a in attempts[t]]
    assert [(a["scores"]["sc"], a["scores"]["pq"]) for a in ordered] == pairs
    assert all(
        a["scores"]["error"] is None and set(a["scores"]["raw_replies"]) == {"sc", "pq"} for a in ordered
    )
    before_sizes = [
        (1024, 1024)
        if a["before_image"] == "white-canvas"
        else (32, 32)
        if a["before_image"] != "input_1.png"
        else (24, 24)
        for a in ordered
    ]
    assert [c["sizes"] for c in judged if c["kind"] == "pq"] == [[size] for size in before_sizes]
    assert [c["sizes"][1] for c in judged if c["kind"] == "sc"] == before_sizes
    assert trace(run.out, "hard")["backends"]["judge"] == f"openai:{teachers.url}#teacher"


def test_the_execution_record_field_by_field(run: TeacherOutput) -> None:
    attempts, out = run.attempts, run.out
    # The release's execution record, field by field, for a failed then a successful attempt.
    record = json.loads((out / "requests" / "hard" / "execution_record.json").read_text())
    assert record["user_input"] == "Draw [[a cat hard; add a hat]]"
    assert record["global_context"]["reasoning"] == "plan for 2"
    assert [s["prompt"] for s in record["global_context"]["execution_plan"]] == ["a cat hard", "add a hat"]
    scores = [(a["scores"]["sc"], a["scores"]["pq"]) for a in attempts["hard"]]
    canvas_img, first_img = "images/white_canvas.png", "images/step01_attempt1.png"
    expected = [
        (1, "a cat hard", canvas_img, "images/step01_attempt0.png", False, "critic on ''"),
        (1, "a cat hard", canvas_img, first_img, True, "critic on 'a cat hard refined'"),
        (2, "add a hat", first_img, "images/step02_attempt0.png", True, "critic on ''"),
    ]
    assert record["steps"] == [
        {
            "step": step,
            "prompt": prompt,
            "refine_prompt": prompt + " refined",
            "source_img": source,
            "target_img": target,
            "success": success,
            "reasoning": reasoning,
            "semantics": sc,
            "quality": pq,
        }
        for (step, prompt, source, target, success, reasoning), (sc, pq) in zip(expected, scores, strict=True)
    ]
    canvas = Image.open(out / "requests" / "hard" / "images" / "white_canvas.png")
    assert canvas.size == (1024, 1024) and canvas.getextrema() == ((255, 255),) * 3
    assert len(load_record(out / "requests" / "hard" / "execution_record.json").steps) == 3
    guided_record = json.loads((out / "requests" / "guided" / "execution_record.json").read_text())
    assert guided_record["images"] == ["images/input_1.png"]
    assert guided_record["steps"][0]["source_img"] == "images/input_1.png"


def test_data_build_reads_the_recorded_scores(run: TeacherOutput) -> None:
    out = run.out
    # `data build` reads the recorded scores: nothing left for a second judge pass, no record read twice.
    trajectories = discover(out)
    assert len(trajectories) == 3 and unscored(trajectories) == []


def test_summary_counts_equal_the_calls_the_servers_saw(run: TeacherOutput) -> None:
    chat, gens, out = run.chat, run.gens, run.out
    # The summary counts what the servers saw, per role, and prices it.
    summary = json.loads((out / "summary.json").read_text())
    usage = summary["usage"]
    for role in ("planner", "critic", "judge"):
        calls = [c for c in chat if c["role"] == role]
        assert usage[role]["calls"] == len(calls), role
        assert usage[role]["input_tokens"] == sum(c["usage"]["prompt_tokens"] for c in calls)
        assert usage[role]["output_tokens"] == sum(c["usage"]["completion_tokens"] for c in calls)
        assert usage[role]["images_in"] == sum(c["images"] for c in calls)
    edits = sum(1 for g in gens if g["source"] != "t2i")
    made = {"calls": len(gens), "images_in": edits, "images_out": len(gens), "input_tokens": 0}
    assert usage["generator"] == {**made, "output_tokens": 0, "failed": 0}
    assert usage["judge"]["calls"] == 2 * len(gens)
    cost = summary["estimated_cost"]
    assert cost["roles"]["planner"] == pytest.approx(0.03)
    assert cost["roles"]["critic"] == pytest.approx(usage["critic"]["input_tokens"] / 1000)
    assert cost["total"] == pytest.approx(0.03 + usage["critic"]["input_tokens"] / 1000 + 0.5 * len(gens))
    # ... and the terminal shows the same counts.
    assert f"critic: 8 calls, {usage['critic']['input_tokens']} input / " in run.output
    assert f"generator: {len(gens)} calls" in run.output
    assert f"estimated cost: {cost['total']:.4f} USD" in run.output
    # `report` rebuilds the outputs from the traces and keeps the counts only the run knew.
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    rebuilt = json.loads((out / "summary.json").read_text())
    assert (rebuilt["usage"], rebuilt["estimated_cost"]) == (usage, cost)


def test_loop_settings_keep_seeds_distinct_and_defaults_unchanged() -> None:
    loop = LoopOptions()  # the defaults are the UEval runner's loop
    assert [loop.generator_budget, loop.first_rewritten_prompt] == [None, "planned"]
    assert loop.critic_on_last_attempt is False
    with pytest.raises(ValueError, match="seed_stride"):
        LoopOptions(generator_budget=150)
    assert LoopOptions(generator_budget=150, seed_stride=1000).generator_budget == 150


def test_a_batch_recorded_before_the_new_loop_keys_still_resumes(tmp_path: Path) -> None:
    from interleave_thinker.core.config import PipelineConfig
    from interleave_thinker.runtime.resume import merged_manifest

    settings = PipelineConfig.resolve(preset="tiny", environ={}).model_dump(mode="json")
    given = {"loop": settings["loop"], "generation": settings["generation"]}
    old_loop = {
        k: v for k, v in given["loop"].items() if k not in ("generator_budget", "first_rewritten_prompt")
    }
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"ids": ["a"], "settings": {**given, "loop": old_loop}}), encoding="utf-8")
    assert merged_manifest(path, {"ids": ["b"], "settings": given}, resume=True)["ids"] == ["a", "b"]
    changed = {**given, "loop": {**given["loop"], "generator_budget": 15}}
    with pytest.raises(InputError, match=re.escape("loop.generator_budget: (not set) -> 15")):
        merged_manifest(path, {"ids": ["b"], "settings": changed}, resume=True)


def test_a_missing_judge_is_refused_before_anything_loads(tmp_path: Path) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"preset": "tiny"}), encoding="utf-8")
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"prompt": "x"}\n', encoding="utf-8")
    args = ["data", "generate", "--config", str(config), "--input", str(inputs), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, args)
    # A ConfigError: the CLI's main() prints it as one line and exits 2.
    assert isinstance(result.exception, ConfigError) and "--judge SPEC" in str(result.exception)
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError):
        from interleave_thinker.core.config import PipelineConfig

        PipelineConfig.resolve(preset="teacher-nano", overrides={"loop": {"seed_stride": 2}}, environ={})


def test_gemini_token_counts_reach_the_meter() -> None:
    from types import SimpleNamespace

    from interleave_thinker.backends.vlm.gemini_backend import GeminiVLMBackend
    from interleave_thinker.datagen.generate_usage import MeteredVLM, Usage

    meta = SimpleNamespace(prompt_token_count=120, candidates_token_count=7)
    reply = SimpleNamespace(text="ok", usage_metadata=meta)
    models = SimpleNamespace(generate_content=lambda **_: reply)
    usage = Usage()
    backend = MeteredVLM(GeminiVLMBackend("gemini-2.5-pro", client=SimpleNamespace(models=models)), usage)
    image = Image.new("RGB", (8, 8))
    message = {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "hi"}]}
    assert backend.chat([message]) == "ok" and backend.chat([message]) == "ok"
    assert usage.as_dict() == dict(
        calls=2, failed=0, input_tokens=240, output_tokens=14, images_in=2, images_out=0
    )


def test_a_plan_without_a_think_block_has_empty_reasoning_and_does_not_fail(
    servers: tuple[Teachers, LocalServer, scripted_models.State], tmp_path: Path
) -> None:
    teachers, edit, _ = servers
    config = write_config(tmp_path / "teacher.json", teachers, edit)
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(json.dumps({"id": "bare", "prompt": "Plan no-think [[a plain cube]]"}) + "\n")
    start = len(teachers.log)
    out = tmp_path / "out"
    args = ["data", "generate", "--config", str(config), "--input", str(inputs), "--out", str(out), "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    planned = [c for c in teachers.log[start:] if c["role"] == "planner"]
    assert len(planned) == 1 and "no-think" in planned[0]["text"]  # one reply, no parse retry
    bare = trace(out, "bare")
    assert (bare["status"], bare["error"]) == ("succeeded", None)
    assert bare["planner"]["plan"]["reasoning"] is None  # no <think> text
    assert bare["planner"]["plan"]["steps"][0]["prompt"] == "a plain cube"
    record = json.loads((out / "requests" / "bare" / "execution_record.json").read_text())
    assert record["global_context"]["reasoning"] == ""
    assert [s["prompt"] for s in record["global_context"]["execution_plan"]] == ["a plain cube"]
    assert load_record(out / "requests" / "bare" / "execution_record.json").reasoning == ""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["failed"] == 0 and summary["requests"]["succeeded"] == 1


@pytest.mark.parametrize(
    ("preset", "generator", "steps", "guidance"),
    [
        ("teacher-nano", "gemini-image:nano-banana-pro", None, None),
        ("teacher-klein", "diffusers:black-forest-labs/FLUX.2-klein-9B", 4, 1.0),
        ("teacher-qwen", "diffusers:Qwen/Qwen-Image-Edit", 50, 5.0),
    ],
)
def test_teacher_presets_are_the_papers_set_ups(
    preset: str, generator: str, steps: int | None, guidance: float | None
) -> None:
    from interleave_thinker.backends.specs import IMAGE_BACKENDS, VLM_BACKENDS, parse_spec
    from interleave_thinker.core.config import PipelineConfig

    cfg = PipelineConfig.resolve(preset=preset, environ={})
    # Gemini 2.5 Pro plans, criticises and judges; the generator is the preset's own.
    assert (cfg.planner, cfg.critic, cfg.judge) == ("gemini:gemini-2.5-pro",) * 3
    assert cfg.generator == generator
    assert parse_spec(cfg.generator, IMAGE_BACKENDS).kind == generator.split(":")[0]
    assert parse_spec(cfg.judge, VLM_BACKENDS).kind == "gemini"  # type: ignore[arg-type]
    # The release's data-generation loop: the critic on every attempt (the last too), a budget of 15
    # generator calls per request instead of a limit per step, rewritten_prompt empty on a first attempt,
    # and seeds that stay distinct within the budget (seed_base + step * stride + attempt).
    loop = cfg.loop
    assert (loop.critic_on_last_attempt, loop.generator_budget, loop.first_rewritten_prompt) == (
        True,
        15,
        "empty",
    )
    assert loop.generator_budget is not None and loop.seed_stride > loop.generator_budget
    assert (cfg.generation.width, cfg.generation.height) == (1024, 1024)
    # Steps and guidance as the authors run each generator; Nano Banana takes neither (none = the model's own).
    assert (cfg.generation.steps, cfg.generation.guidance) == (steps, guidance)
