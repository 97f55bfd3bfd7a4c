"""Loaders on the release's fixture files and on corrupted copies, with the exact error text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.data import app
from interleave_thinker.train.data.issues import DatasetError
from interleave_thinker.train.data.loaders import load_critic_rl, load_record, load_sft
from interleave_thinker.train.data.trl_format import content_parts, rl_dataset, sft_dataset
from tests.conftest import shared_path


@pytest.fixture
def data() -> Path:
    return shared_path("fixtures", "train-data")


@pytest.fixture
def copy(data: Path, tmp_path: Path) -> Path:
    """A writable copy of the fixture folder."""
    target = tmp_path / "train-data"
    shutil.copytree(data, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def test_fixture_files_load_with_aliases_and_images(data: Path) -> None:
    planner = load_sft(data / "planner_sft.json", role="planner")
    critic = load_sft(data / "critic_sft.json", role="critic")
    rl = load_critic_rl(data / "critic_rl.jsonl")
    record = load_record(data / "records" / "1_cat" / "execution_record.json", image_dir=data)

    assert [len(e.images) for e in planner] == [0, 1]
    assert planner[1].images == ((data / "images" / "cat_sketch.png").resolve(),)
    assert [e.images[1].name for e in critic] == ["cat_sketch.png", "cat_bad.png"]
    assert [(e.ground_truth.success, e.ground_truth.semantics) for e in rl] == [
        (False, 1.0),
        (True, 8.0),
        (True, 9.0),
    ]
    assert rl[0].previous_prompt == "A sitting cat"  # evaluation -> ground truth, images -> paths
    assert rl[2].origin_image_path.name == "cat_sketch.png"
    assert [(s.step, s.success) for s in record.steps] == [(1, False), (1, True), (2, True)]
    assert [s.prompt for s in record.plan][1] == "Fill the cat with warm orange colour, keep the lines"


def test_aliases_rewritten_prompt_ground_truth_and_one_image_string(copy: Path) -> None:
    rows = [json.loads(line) for line in (copy / "critic_rl.jsonl").read_text().splitlines()]
    rows[0]["rewritten_prompt"] = rows[0].pop("previous_prompt")
    rows[0]["ground_truth"] = rows[0].pop("evaluation")
    (copy / "critic_rl.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    sft = json.loads((copy / "planner_sft.json").read_text())
    sft[1]["images"] = "images/cat_sketch.png"
    (copy / "planner_sft.json").write_text(json.dumps(sft))

    assert load_critic_rl(copy / "critic_rl.jsonl")[0].previous_prompt == "A sitting cat"
    assert load_sft(copy / "planner_sft.json")[1].images[0].name == "cat_sketch.png"


def test_bad_json_names_the_line(copy: Path) -> None:
    lines = (copy / "critic_rl.jsonl").read_text().splitlines()
    lines[1] = lines[1][:-1]  # drop the closing brace of line 2
    (copy / "critic_rl.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as err:
        load_critic_rl(copy / "critic_rl.jsonl")
    column = len(lines[1]) + 1
    assert (
        str(err.value)
        == f"{copy}/critic_rl.jsonl:2: (json): invalid JSON: Expecting ',' delimiter (column {column})"
    )


def test_missing_field_names_record_line_and_field(copy: Path) -> None:
    text = (copy / "critic_sft.json").read_text()
    records = json.loads(text)
    del records[1]["messages"][1]["content"]
    (copy / "critic_sft.json").write_text(json.dumps(records, indent=1))
    body = (copy / "critic_sft.json").read_text().splitlines()
    line = next(i for i, ln in enumerate(body, 1) if '"role": "assistant"' in ln and i > len(body) // 2) - 1
    with pytest.raises(DatasetError) as err:
        load_sft(copy / "critic_sft.json")
    assert (
        str(err.value)
        == f"{copy}/critic_sft.json:{line}: messages[1].content: missing (also accepted: value)"
    )


def test_missing_image_and_escaping_path(copy: Path) -> None:
    (copy / "images" / "cat_bad.png").unlink()
    rows = [json.loads(line) for line in (copy / "critic_rl.jsonl").read_text().splitlines()]
    rows[2]["images"][0] = "../outside.png"
    (copy / "critic_rl.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DatasetError) as err:
        load_critic_rl(copy / "critic_rl.jsonl")
    assert [str(i) for i in err.value.issues] == [
        f"{copy}/critic_rl.jsonl:1: images[1]: image file not found: {copy.resolve()}/images/cat_bad.png",
        f"{copy}/critic_rl.jsonl:3: images[0]: path '../outside.png' escapes the image folder {copy.resolve()}; "
        "keep images inside it or pass --image-dir",
    ]


def test_record_paths_resolve_against_image_dir_only(data: Path) -> None:
    path = data / "records" / "1_cat" / "execution_record.json"
    with pytest.raises(DatasetError) as err:
        load_record(path)
    assert str(err.value.issues[0]) == (
        f"{path}:27: steps[0].source_img: image file not found: {path.parent.resolve()}/images/white.png"
    )


def test_reply_that_does_not_parse_is_reported(copy: Path) -> None:
    records = json.loads((copy / "critic_sft.json").read_text())
    records[0]["messages"][1]["content"] = "<answer>{'previous_step_success': 'maybe'}</answer>"
    (copy / "critic_sft.json").write_text(json.dumps(records))
    with pytest.raises(DatasetError) as err:
        load_sft(copy / "critic_sft.json", role="critic")
    assert str(err.value) == (
        f"{copy}/critic_sft.json:1: messages[1].content: the reply does not parse "
        "('previous_step_success' must be True or False, got 'maybe')"
    )


def test_validate_command_summary_and_errors(data: Path, copy: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", str(data / "critic_sft.json"), "--kind", "critic_sft"])
    assert ok.exit_code == 0
    assert ok.output.splitlines() == [
        "2 critic_sft record(s)",
        "images: 4 in 2 record(s); turns: 4",
        "verdicts: true 1, false 1",
    ]
    record = runner.invoke(
        app,
        [
            "validate",
            str(data / "records/1_cat/execution_record.json"),
            "--kind",
            "record",
            "--image-dir",
            str(data),
        ],
    )
    assert record.output.splitlines()[-1] == "plan steps: 2; critic calls: 3 over 2 step(s), 2 successful"
    (copy / "images" / "white.png").unlink()
    bad = runner.invoke(app, ["validate", str(copy / "critic_sft.json"), "--kind", "critic_sft"])
    assert bad.exit_code == 1
    assert bad.output.splitlines()[0].endswith(
        f"images[0]: image file not found: {copy.resolve()}/images/white.png"
    )


def test_trl_conversion_turns_markers_into_image_parts_in_order(data: Path) -> None:
    assert content_parts("a<image>b<IMAGE>") == [
        {"type": "text", "text": "a"},
        {"type": "image", "text": None},
        {"type": "text", "text": "b"},
        {"type": "image", "text": None},
    ]
    dataset = sft_dataset(load_sft(data / "critic_sft.json"))
    row = dataset[0]
    assert [p["type"] for p in row["messages"][0]["content"]] == ["image", "image", "text"]
    assert row["messages"][1]["content"][0]["text"].startswith("<think>")
    assert [im.size for im in row["images"]] == [(64, 64), (64, 64)]
    rl = rl_dataset(load_critic_rl(data / "critic_rl.jsonl"))
    assert rl[0]["ground_truth"] == {"success": False, "semantics": 1.0, "quality": 6.0}
    assert rl[0]["previous_prompt"] == "A sitting cat"


class _CountingText(str):
    """A file's text that adds up how many characters its ``count`` calls scan (line numbers by counting)."""

    scanned = 0

    def count(self, sub: str, start: Any = None, end: Any = None) -> int:
        _CountingText.scanned += len(self[start:end])
        return super().count(sub, start, end)


def test_a_json_array_of_bad_records_is_read_in_linear_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 41, item 8: every record bad, each problem named with its own line, and the file scanned a
    bounded number of times for the line numbers (counting from the start per problem was quadratic)."""
    from interleave_thinker.train.data import loaders

    records = [{"messages": [{"role": "user", "content": f"hi {i}"}], "images": i} for i in range(3_000)]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    monkeypatch.setattr(loaders, "_read_text", lambda p: _CountingText(p.read_text(encoding="utf-8")))
    _CountingText.scanned = 0
    with pytest.raises(DatasetError) as caught:
        load_sft(path, role="planner")
    issues = caught.value.issues
    assert len(issues) == 3_000
    assert [(i.line, i.field) for i in issues[:2]] == [(9, "images"), (18, "images")]
    assert issues[-1].line == 9 * 3_000 and str(path) in str(issues[-1])
    assert _CountingText.scanned <= 2 * len(path.read_text(encoding="utf-8"))


def test_a_jsonl_line_break_inside_a_string_is_not_a_new_line(tmp_path: Path) -> None:
    """Only ``\\n`` ends a JSONL line: U+2028 and U+0085 are valid inside a JSON string, and a bad line
    after them is named with its file and its own line number."""
    good = {
        "messages": [{"role": "user", "content": "a\u2028b\x85c"}, {"role": "assistant", "content": "ok"}]
    }
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(good, ensure_ascii=False) + "\n{broken\n", encoding="utf-8")
    with pytest.raises(DatasetError) as caught:
        load_sft(path, role="planner")
    assert [(i.file, i.line, i.field) for i in caught.value.issues] == [(str(path), 2, "(json)")]
