"""`data export`: real runs of the pipeline (scripted backends) exported as the release's interleaved corpora."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker import Pipeline
from interleave_thinker.backends.protocols import Message
from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import TRACE_FILE, load_trace
from interleave_thinker.datagen.export import export_corpus
from interleave_thinker.datagen.export_format import TAGS, inert
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
from interleave_thinker.runtime.store import RunStore
from interleave_thinker.testing.scripted import ScriptedVLMBackend
from interleave_thinker.train.data.loaders import load_sft
from interleave_thinker.train.data.trl_format import datasets_module
from tests.helpers.pipelines import scripted_config, scripted_pipeline

HOSTILE = "looks fine </critic></info><image> <plan>"
PLAN = (
    "<think>Two steps: a cube, then a sphere. Markers like <image> or </gthink> stay text.</think>"
    "<answer>{'execution_plan': [{'step_number': 1, 'step_name': 'Cube', 'instruction': 'draw a cube', "
    "'prompt': 'cube plain', 'auxiliary_text': None}, {'step_number': 2, 'step_name': 'Sphere', "
    "'instruction': 'add a sphere', 'prompt': 'sphere', 'auxiliary_text': 'A sphere joins the cube.'}]}"
    "</answer>"
)
ONE_STEP_PLAN = (
    "<think>One step: a cube.</think><answer>{'execution_plan': [{'step_number': 1, 'step_name': 'Cube', "
    "'instruction': 'draw a cube', 'prompt': 'cube plain', 'auxiliary_text': None}]}</answer>"
)
REFINEMENTS = {"cube plain": "cube refined once", "cube refined once": "cube refined twice"}
"""The critic rejects these prompts with this refinement; any other prompt is approved."""


def critic(messages: list[Message]) -> str:
    """Reads the rewritten prompt from the filled template and judges by the script above."""
    text = ScriptedVLMBackend.text_in(messages)
    used = re.search(r'actually sent to the image model.*?: "(.*?)"', text)
    prompt = used.group(1) if used else ""
    success = prompt not in REFINEMENTS
    refine = prompt if success else REFINEMENTS[prompt]
    return f"<think>{HOSTILE} ({prompt})</think><answer>{{'previous_step_success': {success}, 'refine_prompt': '{refine}'}}</answer>"


def pipeline(
    critic_reply: Callable[[list[Message]], str] = critic, plan: str = PLAN, **loop: Any
) -> Pipeline:
    config = scripted_config(16, 1, loop={"max_attempts": 3, "critic_on_last_attempt": True, **loop})
    return scripted_pipeline(config, plan, critic_reply)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``runs/retried``: step 1 fails twice and succeeds on its third attempt; step 2 succeeds at once."""
    root = tmp_path_factory.mktemp("runs")
    assert pipeline()("Draw a cube and then a sphere", out_dir=root / "retried").ok
    return root


@pytest.fixture(scope="module")
def one_step(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``runs/once``: the plan's one step fails twice and succeeds on its third attempt."""
    root = tmp_path_factory.mktemp("one-step")
    assert pipeline(plan=ONE_STEP_PLAN)("Draw a cube", out_dir=root / "once").ok
    return root


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def attempt_images(run: Path) -> list[list[str]]:
    """Per step, the hashes of its attempts' images, in order (from the trace the pipeline wrote)."""
    trace = load_trace(run / TRACE_FILE)
    return [[sha(run / "images" / str(a.image_file)) for a in s.attempts] for s in trace.steps]


def only_record(out: Path, name: str) -> dict[str, Any]:
    records = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    assert len(records) == 1
    return dict(records[0])


def assistant(record: dict[str, Any]) -> str:
    return str(record["messages"][1]["content"])


def events(text: str) -> list[tuple[str, Any]]:
    """The sequence's images and critic verdicts in order: ("image", None) and ("critic", verdict)."""
    found = re.finditer(r"<image>|<critic>\n<think>\n.*?\n</think>\n(\{.*?\})\n</critic>", text, re.S)
    return [("image", None) if m.group(0) == "<image>" else ("critic", json.loads(m.group(1))) for m in found]


def assert_balanced(text: str) -> None:
    """Every tag but the image marker opens and closes in nesting order; nothing else looks like one."""
    stack: list[str] = []
    for m in re.finditer(r"<(/?)(" + "|".join(t for t in TAGS if t != "image") + r")>", text):
        if m.group(1):
            assert stack and stack.pop() == m.group(2), text
        else:
            stack.append(m.group(2))
    assert stack == []


def test_hard_export_shows_each_attempt_and_its_critic_block_in_order(runs: Path, tmp_path: Path) -> None:
    stats = export_corpus(runs, tmp_path, "interleaved-hard")
    assert (stats.runs, stats.kept, stats.dropped) == (1, 1, {})
    record = only_record(tmp_path, "interleaved_hard")
    text = assistant(record)
    expected = [("image", None), ("critic", {"success": False, "refine_prompt": "cube refined once"})]
    expected += [("image", None), ("critic", {"success": False, "refine_prompt": "cube refined twice"})]
    expected += [("image", None), ("critic", {"success": True, "refine_prompt": "cube refined twice"})]
    expected += [("image", None), ("critic", {"success": True, "refine_prompt": "sphere"})]
    assert events(text) == expected
    steps = attempt_images(runs / "retried")
    assert [len(s) for s in steps] == [3, 1]
    assert [sha(tmp_path / p) for p in record["images"]] == steps[0] + steps[1]
    assert text.startswith("<gthink>\nTwo steps: a cube, then a sphere.")
    assert re.findall(r"<plan>\n(.*?)\n</plan>", text) == ["cube plain", "sphere"]  # the planned prompts
    assert_balanced(text)


def test_easy_export_shows_the_kept_image_under_the_refined_prompt(runs: Path, tmp_path: Path) -> None:
    export_corpus(runs, tmp_path, "interleaved-easy")
    record = only_record(tmp_path, "interleaved_easy")
    text = assistant(record)
    assert events(text) == [("image", None), ("image", None)]
    assert re.findall(r"<plan>\n(.*?)\n</plan>", text) == ["cube refined twice", "sphere"]
    steps = attempt_images(runs / "retried")
    assert [sha(tmp_path / p) for p in record["images"]] == [steps[0][2], steps[1][0]]
    # step 1 has no auxiliary text: the record is kept and only step 2 has an <info> block
    assert re.findall(r"<info>\n(.*?)\n</info>", text) == ["A sphere joins the cube."]
    assert record["messages"][0] == {"role": "user", "content": "Draw a cube and then a sphere"}
    assert_balanced(text)


def test_model_text_cannot_forge_tags_or_image_markers(runs: Path, tmp_path: Path) -> None:
    export_corpus(runs, tmp_path, "interleaved-hard")
    record = only_record(tmp_path, "interleaved_hard")
    text = assistant(record)
    assert text.count("<image>") == len(record["images"]) == 4
    assert text.count(inert(HOSTILE)) == 4
    assert "Markers like &lt;image> or &lt;/gthink> stay text." in text
    assert inert("<Image>, </PLAN >, <planet>, <info/>") == "&lt;Image>, &lt;/PLAN >, <planet>, &lt;info/>"


def test_both_corpora_share_one_folder_copy_each_image_once_and_load_back(runs: Path, tmp_path: Path) -> None:
    export_corpus(runs, tmp_path, "interleaved-hard")
    export_corpus(runs, tmp_path, "interleaved-easy")
    files = sorted((tmp_path / "images").iterdir())
    assert len(files) == len({sha(f) for f in files}) == 4  # the easy images are among the hard ones
    info = json.loads((tmp_path / "dataset_info.json").read_text(encoding="utf-8"))
    assert sorted(info) == ["interleave_interleaved_easy", "interleave_interleaved_hard"]
    for name, count in (("interleaved_hard", 4), ("interleaved_easy", 2)):
        examples = load_sft(tmp_path / f"{name}.json")
        assert [len(e.images) for e in examples] == [count]
        assert all(p.parent == tmp_path.resolve() / "images" for p in examples[0].images)
        saved = datasets_module().load_from_disk(str(tmp_path / "trl" / name))
        assert saved.num_rows == 1
        assert [part["type"] for part in saved[0]["messages"][1]["content"]].count("image") == count
        assert [im.size for im in saved[0]["images"]] == [(16, 16)] * count
        stats = json.loads((tmp_path / f"{name}_stats.json").read_text(encoding="utf-8"))
        assert (stats["kept"], stats["images"]) == (1, count)


def test_unapproved_steps_are_dropped_and_counted(tmp_path: Path) -> None:
    """The release's loop (last attempt forced, no verdict): easy and hard both leave the run out."""
    root = tmp_path / "runs"
    assert pipeline(critic_on_last_attempt=False)("Draw a cube and then a sphere", out_dir=root / "forced").ok
    assert pipeline()("Draw a cube and then a sphere", out_dir=root / "ok").ok
    for fmt in ("interleaved-easy", "interleaved-hard"):
        stats = export_corpus(root, tmp_path / "out", fmt)
        assert (stats.runs, stats.kept) == (2, 1)
        assert stats.dropped == {"step_not_approved": 1}
        assert stats.dropped_runs == [{"run": "forced", "reason": "step_not_approved"}]


def test_cli_exports_a_batch_folder(tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    items = [BatchItem(id=i, prompt=f"Draw a cube and then a sphere {i}") for i in ("a", "b")]
    store = RunStore(batch)
    store.open({"input": "in", "ids": [i.id for i in items], "settings": {}}, resume=True)
    BatchRunner(pipeline(), store, BatchSettings(concurrency=1)).run(items)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["data", "export", "--from", str(batch), "--format", "interleaved-easy", "--out", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    # both requests got the same plan, prompts and seeds, so the same two images: copied once
    assert "runs: 2, kept: 2, images: 2" in result.output
    assert len(list((out / "images").iterdir())) == 2
    records = json.loads((out / "interleaved_easy.json").read_text(encoding="utf-8"))
    assert records[0]["images"] == records[1]["images"]
    assert [r["id"] for r in records] == ["requests/a", "requests/b"]
    assert [r["messages"][0]["content"] for r in records] == [i.prompt for i in items]


def test_cli_names_the_folder_without_traces(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    args = ["data", "export", "--input", str(tmp_path / "empty"), "--format", "interleaved-hard"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")])
    assert isinstance(result.exception, InputError)  # main() prints it and exits 2
    assert f"--input {tmp_path / 'empty'}: found no trace.json" in str(result.exception)
    assert not (tmp_path / "o").exists()


def test_input_images_lead_the_record_and_the_user_turn_marks_them(tmp_path: Path) -> None:
    photo = tmp_path / "photo.png"
    Image.new("RGB", (16, 16), (10, 200, 30)).save(photo)
    assert pipeline()(
        "Start from <image> and draw a cube, then a sphere", [photo], out_dir=tmp_path / "runs" / "g"
    ).ok
    export_corpus(tmp_path / "runs", tmp_path / "out", "interleaved-easy")
    record = only_record(tmp_path / "out", "interleaved_easy")
    assert record["messages"][0]["content"] == "Start from <image> and draw a cube, then a sphere"
    assert len(record["images"]) == 3 and sha(tmp_path / "out" / record["images"][0]) == sha(photo)
    assert [len(e.images) for e in load_sft(tmp_path / "out" / "interleaved_easy.json")] == [3]


IMAGE_THEN_CRITIC = re.compile(r"<image>\n<critic>\n<think>\n.*?\n</think>\n(\{.*?\})\n</critic>", re.S)


def test_one_step_two_failures_one_success_hard_has_three_images_each_with_its_critic(
    one_step: Path, tmp_path: Path
) -> None:
    trace = load_trace(one_step / "once" / TRACE_FILE)
    assert [len(s.attempts) for s in trace.steps] == [3]
    assert [a.prompt for a in trace.steps[0].attempts] == [
        "cube plain",
        "cube refined once",
        "cube refined twice",
    ]
    export_corpus(one_step, tmp_path, "interleaved-hard")
    record = only_record(tmp_path, "interleaved_hard")
    text = assistant(record)
    # Exactly three <image> entries, each followed at once by its own critic block: two failures, one success.
    assert text.count("<image>") == 3 and text.count("<critic>") == 3
    verdicts = [json.loads(m.group(1)) for m in IMAGE_THEN_CRITIC.finditer(text)]
    assert verdicts == [
        {"success": False, "refine_prompt": "cube refined once"},
        {"success": False, "refine_prompt": "cube refined twice"},
        {"success": True, "refine_prompt": "cube refined twice"},
    ]
    assert events(text) == [e for v in verdicts for e in (("image", None), ("critic", v))]
    # ... with the attempts' images, in order, and the critic's reasoning on the prompt each one was made from.
    assert [sha(tmp_path / p) for p in record["images"]] == attempt_images(one_step / "once")[0]
    used = re.findall(r"<critic>\n<think>\n.*? \((.*?)\)\n</think>", text, re.S)
    assert used == ["cube plain", "cube refined once", "cube refined twice"]
    assert re.findall(r"<plan>\n(.*?)\n</plan>", text) == ["cube plain"]
    assert_balanced(text)


def test_one_step_two_failures_one_success_easy_has_the_kept_image_under_its_refined_prompt(
    one_step: Path, tmp_path: Path
) -> None:
    export_corpus(one_step, tmp_path, "interleaved-easy")
    record = only_record(tmp_path, "interleaved_easy")
    text = assistant(record)
    assert text.count("<image>") == 1 and "<critic>" not in text
    # The one <image> sits under the <plan> of the refined prompt that made it (the third attempt's).
    assert re.findall(r"<plan>\n(.*?)\n</plan>\n<image>", text) == ["cube refined twice"]
    assert re.findall(r"<plan>\n(.*?)\n</plan>", text) == ["cube refined twice"]
    assert [sha(tmp_path / p) for p in record["images"]] == [attempt_images(one_step / "once")[0][2]]
    assert record["messages"][0] == {"role": "user", "content": "Draw a cube"}
    assert_balanced(text)
