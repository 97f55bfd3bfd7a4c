"""`data build` and `data export` over a folder of hostile runs (issue 30, items 5, 11 and 16).

Each hostile run fails alone with its reason; the good runs are built and exported, the stats are
written, no file from outside the runs reaches the output, and a rerun changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.untrusted import ImageLimits, UnsafeFile, check_image, load_json
from interleave_thinker.train.data.trajectories import discover, find_trajectories, from_trace
from tests.helpers.runs import make_run

STEPS: list[list[tuple[bool | None, float]]] = [[(False, 3.0), (True, 8.5)], [(True, 9.0)]]
KEPT = "images/step01_attempt1.png"
"""The image step 1 kept: shown by both corpora and read by the build."""
HOSTILE = ("absolute", "dotdot", "symlink", "notimage", "missing", "deep", "linked")


def edit_trace(run: Path, change: Any) -> None:
    path = run / "trace.json"
    trace = json.loads(path.read_text())
    change(trace)
    path.write_text(json.dumps(trace))


def set_kept(name: str) -> Any:
    def change(trace: dict[str, Any]) -> None:
        trace["steps"][0]["attempts"][1]["image_file"] = name
        trace["steps"][0]["accepted_image"] = name

    return change


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, bytes]:
    """``runs/``: two good runs and one run per hostile item; and the bytes of a secret outside them."""
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(secret_dir / "secret.png")
    secret = (secret_dir / "secret.png").read_bytes()
    root = tmp_path / "runs"
    for name in ("good1", "good2", *HOSTILE[:-1]):
        make_run(root, name, STEPS)
    (root / "linked").symlink_to(make_run(tmp_path / "elsewhere", "linked", STEPS), target_is_directory=True)
    edit_trace(root / "absolute", set_kept(str(secret_dir / "secret.png")))
    edit_trace(root / "dotdot", set_kept("../../../secret/secret.png"))
    (root / "symlink" / KEPT).unlink()
    (root / "symlink" / KEPT).symlink_to(secret_dir / "secret.png")
    (root / "notimage" / KEPT).write_text("this is not an image")
    (root / "missing" / KEPT).unlink()
    (root / "deep" / "trace.json").write_text('{"steps": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return root, secret


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_export_leaves_each_hostile_run_out_with_its_reason(
    hostile: tuple[Path, bytes], tmp_path: Path
) -> None:
    root, secret = hostile
    out = tmp_path / "corpus"
    args = [
        "data",
        "export",
        "--input",
        str(root),
        "--format",
        "interleaved-hard",
        "--out",
        str(out),
        "--no-trl",
    ]
    result = CliRunner().invoke(app, [*args, "-q"])
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "interleaved_hard_stats.json").read_text())
    assert (stats["runs"], stats["kept"]) == (9, 2)
    reasons = {d["run"]: d["reason"] for d in stats["dropped_runs"]}
    assert reasons == {
        "absolute": "unsafe_path",
        "dotdot": "unsafe_path",
        "symlink": "unsafe_path",
        "notimage": "bad_image",
        "missing": "missing_image",
        "deep": "unreadable",
        "linked": "unsafe_path",
    }
    details = {d["run"]: d["detail"] for d in stats["dropped_runs"]}
    assert "is not a relative path inside" in details["absolute"] and "through '..'" in details["dotdot"]
    assert "symbolic link" in details["symlink"] and "not an image" in details["notimage"]
    assert "does not exist" in details["missing"] and "nested deeper than 200" in details["deep"]
    assert "symbolic link out of --input" in details["linked"]
    assert all("steps[0].attempts[1].image_file" in details[r] for r in ("absolute", "notimage", "missing"))
    assert [r["id"] for r in json.loads((out / "interleaved_hard.json").read_text())] == ["good1", "good2"]
    assert secret not in tree(out).values()  # the secret was never copied
    before = tree(out)
    again = CliRunner().invoke(app, [*args, "-q"])
    assert again.exit_code == 0 and tree(out) == before


def test_build_lists_each_hostile_run_as_failed_and_builds_the_rest(
    hostile: tuple[Path, bytes], tmp_path: Path
) -> None:
    root, secret = hostile
    out = tmp_path / "built"
    args = ["data", "build", "--input", str(root), "--out", str(out), "--no-trl", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "stats.json").read_text())
    assert stats["trajectories"] == 2 and stats["examples"]["planner_sft"] >= 2
    failed = {f["run"]: f["reason"] for f in stats["failed_runs"]}
    assert sorted(failed) == sorted(HOSTILE)
    assert "is not a relative path inside" in failed["absolute"] and "through '..'" in failed["dotdot"]
    assert "symbolic link" in failed["symlink"] and "not an image" in failed["notimage"]
    assert "does not exist" in failed["missing"] and "nested deeper than 200" in failed["deep"]
    assert "symbolic link out of --input" in failed["linked"]
    assert all("\n" not in reason and str(root) in reason for reason in failed.values())
    assert "7 run(s) or record(s) could not be read" in result.output
    assert secret not in tree(out).values()
    before = tree(out)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and tree(out) == before
    # The Python API's strict reading names every failed run.
    with pytest.raises(InputError, match=r"absolute: .*\n.*deep: "):
        discover(root)


def test_a_reference_out_of_its_run_or_an_unknown_policy_fails_the_run(tmp_path: Path) -> None:
    """A critic's reference images (``Attempt.references``) are read as its other images are, and the
    run's ``settings.loop.references`` must be a policy: each problem names its field."""
    run = make_run(tmp_path / "runs", "refs", STEPS)
    Image.new("RGB", (8, 8)).save(tmp_path / "secret.png")
    edit_trace(run, lambda trace: trace["steps"][1]["attempts"][0].update(references=["../../../secret.png"]))
    with pytest.raises(UnsafeFile, match=r"steps\[1\]\.attempts\[0\]\.references\[0\].*through '\.\.'"):
        from_trace(run)
    edit_trace(run, lambda trace: trace["steps"][1]["attempts"][0].update(references=[KEPT.split("/")[1]]))
    assert [a.references for a in from_trace(run).steps[1].attempts] == [(run / KEPT,)]
    edit_trace(run, lambda trace: trace.update(settings={"loop": {"references": "everything"}}))
    with pytest.raises(InputError, match=r"settings\.loop\.references 'everything' is not one of release"):
        from_trace(run)


def test_a_record_naming_a_non_image_fails_alone(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_run(root, "good", STEPS)
    record = root / "bad" / "execution_record.json"
    record.parent.mkdir()
    (record.parent / "note.png").write_text("text, not pixels")
    record.write_text(
        json.dumps(
            {
                "user_input": "draw",
                "global_context": {
                    "reasoning": "one step",
                    "execution_plan": [
                        {
                            "step_number": 1,
                            "step_name": "a",
                            "instruction": "x",
                            "prompt": "y",
                            "auxiliary_text": None,
                        }
                    ],
                },
                "steps": [
                    {
                        "step": 1,
                        "prompt": "y",
                        "refine_prompt": "",
                        "source_img": "note.png",
                        "target_img": "note.png",
                        "success": True,
                        "reasoning": "ok",
                    }
                ],
            }
        )
    )
    found = find_trajectories(root)
    assert [t.source for t in found.trajectories] == [str(root / "good")]
    ((entry),) = found.failed
    assert entry["run"] == "bad/execution_record.json" and "not an image Pillow can read" in entry["reason"]


def test_image_limits_refuse_bombs_and_non_images_from_the_header(tmp_path: Path) -> None:
    big = tmp_path / "big.png"
    Image.new("1", (6000, 6000)).save(big)  # 36 megapixels, a few kilobytes on disk
    with pytest.raises(UnsafeFile, match="6000x6000 = 36000000 pixels, over the limit of 16777216") as info:
        check_image(big)
    assert info.value.kind == "too_large"
    assert check_image(big, ImageLimits(max_pixels=6000 * 6000)) == (6000, 6000)
    with pytest.raises(UnsafeFile, match="over the limit of 10") as info:
        check_image(big, ImageLimits(max_bytes=10))
    text = tmp_path / "t.png"
    text.write_text("hello")
    with pytest.raises(UnsafeFile, match="not an image") as info:
        check_image(text)
    assert info.value.kind == "not_an_image"


def test_json_depth_is_bounded_without_recursion_error() -> None:
    assert load_json('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert load_json('"\\ud83d"') == "\ud83d"  # Python's reader takes what pydantic-core refuses
    for depth in (250, 5_000, 200_000):
        with pytest.raises(ValueError, match="nested deeper than 200"):
            load_json("[" * depth + "]" * depth)


@pytest.mark.parametrize("command", ["export", "build"])
def test_an_output_that_cannot_be_written_is_one_line_naming_the_file(tmp_path: Path, command: str) -> None:
    make_run(tmp_path / "runs", "good", STEPS)
    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    (out / "dataset_info.json").mkdir()  # in the way of a file the command writes
    args = ["data", command, "--input", str(tmp_path / "runs"), "--out", str(out), "--no-trl", "-q"]
    result = CliRunner().invoke(
        app, [*args, *(["--format", "interleaved-easy"] if command == "export" else [])]
    )
    assert isinstance(result.exception, InputError), result.output
    message = str(result.exception)
    assert message.startswith(f"--out {out}: cannot write {out / 'dataset_info.json'} (Is a directory)")
    assert ".tmp" not in message and "\n" not in message
