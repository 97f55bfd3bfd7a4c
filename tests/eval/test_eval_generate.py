"""`eval generate`: benchmark items, the official layouts, base vs agentic mode, and resume after SIGKILL."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.agents.planner import parse_plan
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import IMAGES_DIR
from interleave_thinker.core.types import Plan, PlanStep, Trace
from interleave_thinker.eval.base_mode import OneStepPlanner
from interleave_thinker.eval.benchmarks import load_items
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.runtime.batch_inputs import parse_shard, select
from interleave_thinker.runtime.reports import release_text_answer
from interleave_thinker.runtime.store import RunStore
from tests.conftest import REPO, shared_path


def cli(*args: str) -> str:
    from interleave_thinker.cli.main import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


# --- items -----------------------------------------------------------------------------------------


def test_wise_verified_items_come_from_the_prompt_field() -> None:
    items = load_items("wise", str(shared_path("benchmarks", "wise")))
    raw = json.loads(shared_path("benchmarks", "wise", "natural_science_verified.json").read_text("utf-8"))
    assert [i.id for i in items] == [str(n) for n in range(1, 1001)]
    assert {i.protocol for i in items} == {"verified"}
    item = items[640]  # prompt_id 641, the first natural-science prompt
    assert (item.id, item.prompt, item.category) == ("641", raw[0]["Prompt"], raw[0]["Category"])
    assert item.raw == raw[0] and item.images == ()


def test_wise_legacy_layout_is_recognised_and_never_mixed(tmp_path: Path) -> None:
    record = {"Prompt": "a red cube", "Explanation": "x", "Category": "Space", "Subcategory": "s"}
    for number, name in enumerate(("cultural_common_sense", "spatio-temporal_reasoning", "natural_science")):
        (tmp_path / f"{name}.json").write_text(json.dumps([{**record, "prompt_id": number + 1}]))
    items = load_items("wise", str(tmp_path))
    assert [(i.id, i.protocol) for i in items] == [("1", "legacy"), ("2", "legacy"), ("3", "legacy")]
    (tmp_path / "natural_science_verified.json").write_text(json.dumps([{**record, "prompt_id": 9}]))
    with pytest.raises(InputError, match="both WISE_Verified"):
        load_items("wise", str(tmp_path))
    (tmp_path / "bad_verified.json").write_text(json.dumps([{**record, "prompt_id": "x"}]))
    with pytest.raises(InputError, match="prompt_id"):
        load_items("wise", str(tmp_path / "bad_verified.json"))


def test_rise_sample_file_and_full_set_fields(tmp_path: Path) -> None:
    root = shared_path("benchmarks", "risebench")
    items = load_items("rise", str(root))
    raw = json.loads((root / "data_sample.json").read_text("utf-8"))
    assert [i.id for i in items] == [r["index"] for r in raw]
    logical = next(i for i in items if i.id == "logical_reasoning_3")
    assert logical.images == (str((root / "logical_reasoning_images" / "3.jpg").resolve()),)
    assert logical.path("reference_img") == root.resolve() / "logical_reasoning_images" / "3_ref.png"
    assert logical.path("reasoning_img") is None and "subtask" not in logical.raw  # the 64-sample fields
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    full = [
        {"index": "temporal_reasoning_1", "category": "temporal_reasoning", "instruction": "age it",
         "image": "a.png", "reference": "r", "subtask": "Life Progression", "reasoning_img": None,
         "consistency_free": True}
    ]  # fmt: skip
    (tmp_path / "data_total.json").write_text(json.dumps(full))
    (item,) = load_items("rise", str(tmp_path))
    assert item.raw == full[0] and item.category == "temporal_reasoning"
    assert item.raw["consistency_free"] is True and item.path("reasoning_img") is None
    (tmp_path / "data_total.json").write_text(json.dumps([{**full[0], "index": "../x"}]))
    with pytest.raises(InputError, match="index"):
        load_items("rise", str(tmp_path))


def test_hf_dataset_offline_and_not_cached_is_one_clear_error() -> None:
    with pytest.raises(InputError) as caught:
        load_items("ueval", "hf:zlab-princeton/UEval-not-cached-anywhere")
    message = str(caught.value)
    assert "zlab-princeton/UEval-not-cached-anywhere" in message and "Hugging Face cache" in message
    assert "--data PATH" in message


def test_hf_dataset_images_become_files(tmp_path: Path) -> None:
    import datasets

    colour = Image.new("RGB", (6, 4), (10, 200, 30))
    table = datasets.Dataset.from_dict(
        {"index": ["causal_reasoning_1"], "category": ["causal_reasoning"], "instruction": ["melt it"],
         "image": [colour], "subtask": ["Physics"]}
    ).cast_column("image", datasets.Image())  # fmt: skip
    folder = tmp_path / "rise_hf"
    folder.mkdir()
    table.to_parquet(str(folder / "test.parquet"))
    (item,) = load_items("rise", f"hf:{folder}")
    assert item.raw["subtask"] == "Physics" and item.prompt == "melt it"
    with Image.open(item.images[0]) as stored:
        assert stored.size == (6, 4) and stored.convert("RGB").getpixel((0, 0)) == (10, 200, 30)
    assert os.environ["INTERLEAVE_THINKER_HOME"] in item.images[0]


def test_limit_then_shard_selects_like_batch() -> None:
    items = [EvalItem("wise", str(n), "c", f"p{n}") for n in range(10)]
    assert [i.id for i in select(items, limit=7, shard=parse_shard("1/3"))] == ["1", "4"]
    with pytest.raises(InputError, match="--shard"):
        parse_shard("3/3")


# --- base mode and the release's text rule -------------------------------------------------------


def test_one_step_planner_makes_the_request_the_plan() -> None:
    text = 'A "quoted" prompt, with {braces} and \\ backslash'
    messages = [
        {"role": "user", "content": [{"type": "image", "image": None}, {"type": "text", "text": text}]}
    ]
    plan = parse_plan(OneStepPlanner().chat(messages))
    assert len(plan.steps) == 1 and plan.steps[0].prompt == text == plan.steps[0].instruction
    assert plan.steps[0].auxiliary_text is None and not plan.fallback


def test_release_text_answer_concatenates_step_texts() -> None:
    steps = [
        PlanStep(step_number=1, instruction="Fold.", prompt="p", auxiliary_text="Fold it in half."),
        PlanStep(step_number=2, instruction="Crease.", prompt="p", auxiliary_text="None"),
        PlanStep(step_number=3, instruction="Open.", prompt="p", auxiliary_text=""),
        PlanStep(step_number=4, instruction=None, prompt=None, auxiliary_text=None),
    ]
    trace = Trace(request={"text": "q"})
    trace.planner.plan = Plan(steps=steps)
    assert release_text_answer(trace) == "Fold it in half.Crease.Open."


# --- generation with the tiny models -------------------------------------------------------------


def _last_accepted(out: Path, item_id: str, trace: Trace) -> bytes:
    name = [s.accepted_image for s in trace.steps if s.accepted_image][-1]
    assert name is not None
    return (out / "requests" / item_id / IMAGES_DIR / name).read_bytes()


def check_single_image_layout(out: Path, items: list[EvalItem], mode: str) -> dict[str, Trace]:
    traces = RunStore(out).traces()
    assert sorted(traces) == sorted(i.id for i in items)
    for item in items:
        trace = traces[item.id]
        assert trace.status == "succeeded", trace.error
        assert trace.request.text.replace("<image>", "") == item.prompt  # WISE: Prompt, never Explanation
        target = (
            out / f"{item.id}.png"
            if item.benchmark == "wise"
            else out / "images" / item.category / f"{item.id}.png"
        )
        assert target.read_bytes() == _last_accepted(out, item.id, trace)
        if mode == "base":
            (step,) = trace.steps
            (attempt,) = step.attempts
            assert attempt.prompt == item.prompt and attempt.seed == 100 and not attempt.critic_called
            assert attempt.before_image == ("input_1.png" if item.images else "white-canvas")
    record = json.loads((out / "eval.json").read_text())
    assert (record["mode"], record["written"], record["missing"]) == (mode, len(items), [])
    return traces


def layout_files(out: Path) -> set[str]:
    files = {p.relative_to(out).as_posix() for p in out.glob("*.png")}
    return files | {p.relative_to(out).as_posix() for p in (out / "images").rglob("*.png")}


@pytest.mark.slow
def test_wise_base_and_agentic_write_prompt_id_pngs(tmp_path: Path) -> None:
    data = str(shared_path("benchmarks", "wise"))
    items = load_items("wise", data)[:24]
    for mode in ("base", "agentic"):
        out = tmp_path / mode
        # one attempt per step keeps 24 agentic items quick on CPU; the critic is exercised in the RISE test
        cli("eval", "generate", "wise", "--data", data, "--limit", "24", "--out", str(out), "--mode", mode,
            "--preset", "tiny", "--max-attempts", "1", "--quiet")  # fmt: skip
        assert layout_files(out) == {f"{n}.png" for n in range(1, 25)}
        check_single_image_layout(out, items, mode)
    base, agentic = (json.loads((tmp_path / m / "eval.json").read_text()) for m in ("base", "agentic"))
    assert base["generation"] == agentic["generation"] and base["backends"]["generator"] == "tiny:generator"
    assert (
        base["backends"]["planner"] == "eval:one-step-plan"
        and agentic["backends"]["planner"] == "tiny:planner-sft"
    )


@pytest.mark.slow
def test_rise_base_and_agentic_write_category_index_pngs(tmp_path: Path) -> None:
    data = str(shared_path("benchmarks", "risebench"))
    items = load_items("rise", data)
    expected = {f"images/{i.category}/{i.id}.png" for i in items}
    for mode in ("base", "agentic"):
        out = tmp_path / mode
        cli("eval", "generate", "rise", "--data", data, "--out", str(out), "--mode", mode, "--preset", "tiny",
            "--max-attempts", "2", "--quiet")  # fmt: skip
        assert layout_files(out) == expected
        traces = check_single_image_layout(out, items, mode)
        if mode == "agentic":
            assert any(a.critic_called for t in traces.values() for s in t.steps for a in s.attempts)
        # guidance mode: the first attempt edits the input image (a copy of the item's image)
        for item in items:
            copy_path = out / "requests" / item.id / IMAGES_DIR / traces[item.id].input_images[0]
            with Image.open(item.images[0]) as original, Image.open(copy_path) as copy:
                assert copy.convert("RGB").tobytes() == original.convert("RGB").tobytes()
    # a second run with another mode into the same folder is refused instead of mixing
    from interleave_thinker.cli.main import app

    result = CliRunner().invoke(app, ["eval", "generate", "rise", "--data", data, "--out", str(tmp_path / "base"),
                                      "--mode", "agentic", "--preset", "tiny"])  # fmt: skip
    assert isinstance(result.exception, InputError) and "other settings" in str(result.exception)


@pytest.mark.slow
def test_ueval_submission_follows_the_release(tmp_path: Path) -> None:
    suffix = " both visually and textually"
    rows: list[dict[str, Any]] = [
        {"id": 7, "prompt": "How do I plant a seed? Show the steps" + suffix, "task": "life",
         "text_rubrics": ["mentions soil"], "image_rubrics": ["shows a pot"], "question_type": "open"},
        {"id": "b2", "prompt": "Draw a map of a small island" + suffix, "task": "space"},
    ]  # fmt: skip
    data = tmp_path / "ueval.json"
    data.write_text(json.dumps(rows))
    for mode in ("base", "agentic"):
        out = tmp_path / mode
        cli("eval", "generate", "ueval", "--data", str(data), "--out", str(out), "--mode", mode,
            "--preset", "tiny", "--max-attempts", "1", "--quiet")  # fmt: skip
        submission = json.loads((out / "submission.json").read_text())
        assert not (out / "results.json").exists()
        traces = RunStore(out).traces()
        assert [e["id"] for e in submission] == ["7", "b2"]
        for entry, row in zip(submission, rows, strict=True):
            trace = traces[entry["id"]]
            assert (entry["prompt"], entry["task"]) == (row["prompt"], row["task"])
            expected_text = release_text_answer(trace) if mode == "agentic" else ""
            assert entry["text_answer"] == expected_text
            accepted = [s.accepted_image for s in trace.steps if s.accepted_image]
            assert entry["image_answer"] == [
                str((out / "requests" / entry["id"] / IMAGES_DIR / n).resolve()) for n in accepted
            ]
            assert all(Path(p).is_file() for p in entry["image_answer"])
            if mode == "base":  # the generator got the question without the UEval suffix
                assert trace.steps[0].attempts[0].prompt == row["prompt"].removesuffix(suffix)


def _layout_bytes(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in layout_files(out)}


def _calls(out: Path) -> dict[str, list[tuple[str, int, str | None]]]:
    """Every attempt of every trace (prompt, seed, image), without timings."""
    return {
        item_id: [(a.prompt, a.seed, a.image_file) for s in trace.steps for a in s.attempts]
        for item_id, trace in RunStore(out).traces().items()
    }


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    data = str(shared_path("benchmarks", "risebench"))
    config = tmp_path / "greedy.yaml"
    config.write_text("agents:\n  max_parse_attempts: 1\n")  # no sampled retries: runs are deterministic
    args = ["eval", "generate", "rise", "--data", data, "--preset", "tiny", "--config", str(config),
            "--limit", "4", "--max-attempts", "2", "--concurrency", "1", "--quiet"]  # fmt: skip
    cli(*args, "--out", str(tmp_path / "whole"))

    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "interleave_thinker", *args, "--out", str(killed)]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = killed / "journal.jsonl"
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if journal.is_file() and journal.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = journal.read_text().count("\n")
    assert 1 <= done_before < 4 and not (killed / "eval.json").exists()

    output = cli(*args, "--out", str(killed))
    assert "4 of 4 items have an output" in output
    assert _layout_bytes(killed) == _layout_bytes(tmp_path / "whole")
    assert _calls(killed) == _calls(tmp_path / "whole")
    assert json.loads((killed / "eval.json").read_text())["skipped_already_finished"] == done_before


# --- the sequence as shown: a repaired step is what every reader takes ---------------------------


def test_repaired_last_step_is_the_layout_results_and_consistency_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`eval generate --repair-budget` whose review flags the last step: the WISE layout image, the
    `report` rebuild's results.json and `eval score consistency`'s pairs all take the repaired image."""
    from interleave_thinker.agents.sequence_review import format_review
    from interleave_thinker.core.prompt_store import builtin_templates
    from interleave_thinker.core.types import Flag
    from interleave_thinker.eval.generate import GenerationRun
    from interleave_thinker.runtime.pipeline import Pipeline
    from interleave_thinker.testing.doubles.judge import image_urls, judge_server
    from interleave_thinker.testing.scripted import ScriptedImageBackend, ScriptedVLMBackend
    from tests.helpers.replies import plan_reply, verdict

    record = {"Prompt": "a red cube", "Explanation": "x", "Category": "Space", "Subcategory": "s"}
    data = tmp_path / "one_verified.json"
    data.write_text(json.dumps([{**record, "prompt_id": 1}]))
    flagged = format_review([Flag(step=2, reason="the cube changed colour")])
    critic = ScriptedVLMBackend([verdict(True), verdict(True), flagged, verdict(True)])

    def scripted(run: GenerationRun) -> Pipeline:
        planner = ScriptedVLMBackend(
            [plan_reply(("Draw.", "a red cube", None), ("Turn it.", "turned", None))]
        )
        return Pipeline(
            planner=planner,
            critic=critic,
            generator=ScriptedImageBackend(),
            config=run.config,
            templates=builtin_templates(),
        )

    monkeypatch.setattr("interleave_thinker.eval.generate.load_pipeline", scripted)
    # served specs (never called: the scripted pipeline stands in), so no local engine is imported
    chat = "openai:http://127.0.0.1:9/v1#scripted"
    served = ("--planner", chat, "--critic", chat, "--generator", "http:http://127.0.0.1:9")
    out = tmp_path / "run"
    cli("eval", "generate", "wise", "--data", str(data), "--out", str(out), *served,
        "--max-attempts", "2", "--repair-budget", "2", "--quiet")  # fmt: skip
    trace = RunStore(out).traces()["1"]
    assert trace.repair is not None and [r.repaired_image for r in trace.repair.steps] == [
        "step02_repair0.png"
    ]
    assert trace.steps[1].accepted_image == "step02_attempt0.png"  # the trace keeps the original
    images = out / "requests" / "1" / IMAGES_DIR
    repaired, original = (images / "step02_repair0.png").read_bytes(), (images / "step02_attempt0.png")
    assert repaired != original.read_bytes()
    assert (out / "1.png").read_bytes() == repaired  # the layout

    cli("report", str(out))  # results.json, rebuilt from the traces
    (row,) = json.loads((out / "results.json").read_text())
    assert row["image_answer"] == [
        "requests/1/images/step01_attempt0.png",
        "requests/1/images/step02_repair0.png",
    ]

    seen: list[object] = []

    def judge(body: dict[str, Any]) -> str:
        for url in image_urls(body):
            with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as image:
                seen.append(image.convert("RGB").getpixel((0, 0)))
        return json.dumps({"identity": 9, "style": 9, "scene": 9, "reason": "scripted"})

    with judge_server(judge) as server:
        cli("eval", "score", "consistency", "--outputs", str(out), "--judge", f"openai:{server.url}#j",
            "--judge-attempts", "1", "--quiet")  # fmt: skip
    (scored,) = [
        json.loads(line) for line in (out / "scores-consistency" / "scores.jsonl").read_text().splitlines()
    ]
    assert scored["pairs"][0]["images"] == ["step01_attempt0.png", "step02_repair0.png"]
    with Image.open(images / "step02_repair0.png") as shown:
        assert seen[-1] == shown.convert("RGB").getpixel((0, 0))
