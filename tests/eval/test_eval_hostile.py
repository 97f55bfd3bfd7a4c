"""`eval score` against hostile outputs, data and judges (issue 30): a bad item fails alone, recorded
with its reason, the run finishes and writes its summary, a resume changes nothing; an `--out` folder
is bound to what it scored and locked while written."""

from __future__ import annotations

import base64
import io
import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.backends.specs import BackendOptions
from interleave_thinker.core.config import EvalOptions, RemoteOptions
from interleave_thinker.core.errors import InputError
from interleave_thinker.eval.report import write_report
from interleave_thinker.eval.score_run import ScoreOptions, run_score
from interleave_thinker.runtime.outlock import folder_lock
from interleave_thinker.testing.doubles.judge import HOSTILE, image_urls, judge_server
from tests.conftest import shared_path
from tests.helpers.rise import _dataset as rise_dataset

RED, BLUE = (220, 10, 10), (10, 10, 220)


@pytest.fixture(autouse=True)
def eval_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(shared_path("reference", "eval")))


def _png(color: tuple[int, int, int], size: tuple[int, int] = (16, 12)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def _huge_header_png(width: int, height: int) -> bytes:
    """A valid small PNG whose IHDR declares ``width`` x ``height`` (the pixels are never there)."""
    data = bytearray(_png(RED))
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _wise_data(tmp_path: Path, ids: list[int]) -> Path:
    folder = tmp_path / "wise"
    folder.mkdir()
    records = [
        {"prompt_id": i, "Prompt": f"P{i}", "Explanation": f"E{i}", "Category": "Cultural knowledge",
         "Subcategory": "x"}
        for i in ids
    ]  # fmt: skip
    (folder / "cultural_verified.json").write_text(json.dumps(records), encoding="utf-8")
    return folder


def _by_colour(body: dict[str, Any]) -> str:
    """Score: 1 for a red image, 0 otherwise (so a changed output changes its score)."""
    raw = base64.b64decode(image_urls(body)[0].split(",", 1)[1])
    with Image.open(io.BytesIO(raw)) as image:
        return "Score: 1" if image.convert("RGB").getpixel((0, 0)) == RED else "Score: 0"


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "scores.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row for row in map(json.loads, lines)}


def _options(protocol: str, outputs: Path, data: Path, judge: str, out: Path, **kw: Any) -> ScoreOptions:
    return ScoreOptions(protocol=protocol, outputs=outputs, data=str(data), judge=judge, out=out, **kw)


def test_reused_out_rescores_changed_outputs_only(tmp_path: Path) -> None:
    """Item 1: `--outputs B --out S` after `--outputs A --out S` never reports A's scores."""
    data = _wise_data(tmp_path, [1, 2])
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    (a / "1.png").write_bytes(_png(RED))
    (a / "2.png").write_bytes(_png(RED))
    (b / "1.png").write_bytes(_png(BLUE))  # changed
    (b / "2.png").write_bytes(_png(RED))  # the same bytes as A's
    out = tmp_path / "S"
    with judge_server(_by_colour) as server:
        judge = f"openai:{server.url}#j"
        first = run_score(_options("wise", a, data, judge, out))
        assert first["categories"]["CULTURE"]["score"] == 1.0 and server.calls == 2
        second = run_score(_options("wise", b, data, judge, out))
        assert server.calls == 3  # only the changed output is asked about
    assert second["outputs"] == str(b)
    assert second["scored_inputs"]["rescored_changed"] == 1
    assert second["scored_inputs"]["sha256"] != first["scored_inputs"]["sha256"]
    assert {k: r["score"] for k, r in _rows(out).items()} == {"1": 0.0, "2": 1.0}
    assert second["categories"]["CULTURE"] == {"score": 0.5, "n": 2}


def _hostile_wise(tmp_path: Path) -> tuple[Path, Path, bytes]:
    data = _wise_data(tmp_path, [1, 2, 3, 4, 5, 6])
    outputs = tmp_path / "images"
    outputs.mkdir()
    (outputs / "1.png").write_bytes(_png(RED))
    secret = tmp_path / "private.png"
    secret.write_bytes(_png(BLUE, (20, 20)))  # a real image, somewhere else
    (outputs / "2.png").symlink_to(secret)  # item 4: a symlink out of the folder
    with (outputs / "3.png").open("wb") as handle:  # over 64 MiB (sparse: nothing is written)
        handle.truncate(65 * 1024 * 1024)
    (outputs / "4.png").write_bytes(_huge_header_png(20000, 20000))  # 20000² declared
    (outputs / "5.png").write_bytes(b"just some text, not an image\n")
    (outputs / "6.png").symlink_to(outputs / "1.png")  # a symlink inside the folder is fine
    return data, outputs, secret.read_bytes()


def test_hostile_wise_outputs_fail_alone_and_resume_changes_nothing(tmp_path: Path) -> None:
    """Items 2 and 4 (WISE): a symlink out, a file over 64 MiB, a 20000² image, a text file."""
    data, outputs, secret = _hostile_wise(tmp_path)
    out = tmp_path / "scored"
    with judge_server(_by_colour) as server:
        judge = f"openai:{server.url}#j"
        summary = run_score(_options("wise", outputs, data, judge, out))
        assert server.calls == 2  # 1 and 6 (a symlink inside the folder); nothing else is sent
        leaked = base64.b64encode(secret).decode()
        assert not any(leaked in json.dumps(body) for body in server.bodies)
        assert summary["counts"] == {"items": 6, "scored": 2, "failed": 4, "missing_outputs": 0}
        reasons = {entry["id"]: entry["reason"] for entry in summary["failed_items"]}
        assert "2.png: leads outside" in reasons["2"] and str(outputs) in reasons["2"]
        assert "3.png: larger than 67108864 bytes (eval.max_image_bytes)" in reasons["3"]
        assert "4.png: is a decompression bomb" in reasons["4"]
        assert "5.png: is not a readable image (UnidentifiedImageError)" in reasons["5"]
        assert all("\n" not in r for r in reasons.values())
        before = (out / "scores.jsonl").read_bytes()
        again = run_score(_options("wise", outputs, data, judge, out))
        assert server.calls == 2 and again["judge_calls"]["this_run"] == 0
    assert (out / "scores.jsonl").read_bytes() == before
    assert again["counts"] == summary["counts"] and again["failed_items"] == summary["failed_items"]
    assert again["scored_inputs"] == {**summary["scored_inputs"], "rescored_changed": 0}


def test_over_pixel_limit_rise_output_fails_alone(tmp_path: Path) -> None:
    """Item 2 (RISEBench): a 20000² output fails its sample, by its header, with the file named."""
    data, outputs = rise_dataset(tmp_path)
    bad = outputs / "images" / "temporal_reasoning" / "t1.png"
    bad.write_bytes(_huge_header_png(20000, 20000))
    with judge_server(lambda body: "Final Score: 5") as server:
        summary = run_score(
            _options("rise", outputs, data / "data.json", f"openai:{server.url}#x", tmp_path / "o")
        )
    assert summary["counts"] == {"items": 8, "scored": 6, "failed": 1, "missing_outputs": 1}
    (entry,) = summary["failed_items"]
    assert entry["id"] == "t1" and "t1.png: is a decompression bomb" in entry["reason"]


def _hostile_ueval(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "secret.png"
    outside.write_bytes(_png(BLUE))
    sub = tmp_path / "run"
    sub.mkdir()
    (sub / "good.png").write_bytes(_png(RED))
    (sub / "notes.png").write_text("a text file named like an image\n")
    Image.new("1", (12000, 12000)).save(sub / "bomb.png")  # 144 megapixels in a few kilobytes
    (sub / "link.png").symlink_to(outside)
    rubric = {"text_rubrics": ["T"], "image_rubrics": ["I"]}
    items = [
        {"id": 1, "prompt": "Q1", "task": "art", **rubric},
        {"id": 2, "prompt": "Q2", "task": "art", **rubric},
        {"id": 3, "prompt": "Q3", "task": "art", **rubric},
        {"id": 4, "prompt": "Q4", "task": "art", "text_rubrics": 5, "image_rubrics": ["I"]},
        {"id": 5, "prompt": "Q5", "task": "art", **rubric},
        {"id": 6, "prompt": "Q6", "task": "art", **rubric},
        {"id": 7, "prompt": "Q7", "task": "art", **rubric},
        {"id": 8, "prompt": "Q8", "task": "life\u0000", "text_rubrics": ["T"]},
    ]
    answers = {1: "good.png", 2: "notes.png", 3: "bomb.png", 4: "good.png", 5: "link.png",
               6: str(outside), 7: "../secret.png", 8: None}  # fmt: skip
    submission = [{"id": k, "text_answer": f"A{k} \ud83d", "image_answer": v} for k, v in answers.items()]
    (sub / "results.json").write_text(json.dumps(submission), encoding="utf-8")
    data = tmp_path / "ueval.json"
    data.write_text(json.dumps(items), encoding="utf-8")
    return data, sub


def test_hostile_ueval_items_fail_alone_through_the_cli(tmp_path: Path) -> None:
    """Items 2 and 4 (UEval) together: a text file, a bomb, `text_rubrics: 5`, a symlink, an absolute
    path and `..` out of the folder; the others are scored, exit 0, the reasons printed and stored."""
    from interleave_thinker.cli.main import app

    data, sub = _hostile_ueval(tmp_path)
    out = tmp_path / "scored"
    with judge_server(lambda body: '{"criteria_met": true}') as server:
        args = ["eval", "score", "ueval", "--outputs", str(sub), "--data", str(data),
                "--judge", f"openai:{server.url}#j", "--out", str(out), "--quiet"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
        assert result.exit_code == 0, (result.output, result.exception)
        assert server.calls == 2 + 1  # item 1's two rubrics, item 8's one
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        assert summary["counts"] == {"items": 8, "scored": 2, "failed": 6, "missing_outputs": 0}
        reasons = {entry["id"]: entry["reason"] for entry in summary["failed_items"]}
        assert "notes.png: is not a readable image" in reasons["2"]
        assert (
            "bomb.png: is 12000x12000 = 144000000 pixels, over the limit of 16777216 (eval.max_image_pixels)"
            in reasons["3"]
        )
        assert "item 4: text_rubrics: must be a list of rubrics" in reasons["4"] and "got int" in reasons["4"]
        for key, name in (("5", "link.png"), ("6", "secret.png"), ("7", "secret.png")):
            assert f"{name}: leads outside {sub}" in reasons[key], key
        for key, reason in reasons.items():
            assert f"failed {key}: {reason}" in result.output
        before = (out / "scores.jsonl").read_bytes()
        again = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
        assert again.exit_code == 0 and server.calls == 3
    assert (out / "scores.jsonl").read_bytes() == before


def _scored(folder: Path, score: float, note: str) -> Path:
    folder.mkdir()
    judge = {"spec": "openai:x#m", "model": "m\x00", "official": False}
    summary = {"protocol": "wise", "scorer_version": "current", "judge": judge, "outputs": "",
               "overall": score, "categories": {"CULTURE\x00": {"score": score, "n": 1}}}  # fmt: skip
    row = {"id": "1", "category": "CULTURE", "score": score, "status": "ok", "errors": [note]}
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (folder / "scores.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    return folder


def test_report_page_holds_no_nul_and_no_lone_surrogate(tmp_path: Path) -> None:
    """Item 16: text read from scoring folders is cleaned before it reaches report.html."""
    a = _scored(tmp_path / "a", 1.0, "ok")
    b = _scored(tmp_path / "b", 0.0, "cut \x00 reply \ud83d")  # as json.dumps escapes them
    page = tmp_path / "report.html"
    write_report([a, b], page)
    text = page.read_text(encoding="utf-8")
    assert "\x00" not in text and "cut  reply \ufffd" in text


@pytest.mark.parametrize(
    ("shape", "stored"),
    [("surrogate", "Score: 1 \ufffd"), ("nul", "Score: 1"), ("down", None), ("refusing", None)],
)
def test_each_hostile_judge_reply_is_cleaned_or_recorded(
    tmp_path: Path, shape: str, stored: str | None
) -> None:
    """Item 3 and the judge double's hostile shapes: a reply cut inside an emoji (a lone surrogate) or
    holding NULs is scored and stored cleaned; an error status fails the item, recorded; the summary is
    written every time."""
    data = _wise_data(tmp_path, [1])
    outputs = tmp_path / "images"
    outputs.mkdir()
    (outputs / "1.png").write_bytes(_png(RED))
    out = tmp_path / "o"
    options = _options("wise", outputs, data, "", out)
    options.backend_options = BackendOptions(remote=RemoteOptions(max_retries=0))
    with judge_server(lambda body: HOSTILE[shape]) as server:
        options.judge = f"openai:{server.url}#j"
        summary = run_score(options)
    log = [json.loads(line) for line in (out / "replies.jsonl").read_text(encoding="utf-8").splitlines()]
    if stored is None:
        assert summary["counts"]["failed"] == 1 and len(log) == 3 and all("error" in e for e in log)
        assert "scripted status" in summary["failed_items"][0]["reason"]
    else:
        assert summary["counts"]["scored"] == 1
        assert [entry["reply"] for entry in log] == [stored]
        assert _rows(out)["1"]["replies"] == {"judge": [stored]}


def _down_ueval(tmp_path: Path, ids: tuple[int, ...]) -> tuple[Path, Path]:
    items = [{"id": k, "prompt": f"Q{k}", "task": "art", "text_rubrics": ["A", "B", "C"]} for k in ids]
    data = tmp_path / f"ueval{len(ids)}.json"
    data.write_text(json.dumps(items), encoding="utf-8")
    sub = tmp_path / f"results{len(ids)}.json"
    sub.write_text(json.dumps([{"id": k, "text_answer": "x"} for k in ids]), encoding="utf-8")
    return data, sub


def test_a_judge_that_is_down_spends_its_budgets_then_fails_recorded(tmp_path: Path) -> None:
    """Item 10: UEval's 500 attempts per rubric end at the per-item, or the per-run, budget; a resume
    is a new run: what the run's budget stopped is asked again, an item that spent its own is not."""
    assert EvalOptions().judge_calls_per_item == 100 and EvalOptions().judge_calls_per_run == 50_000
    backend = BackendOptions(remote=RemoteOptions(max_retries=0))
    down = {"now": True}

    def script(body: dict[str, Any]) -> str | int:
        return HOSTILE["down"] if down["now"] else '{"criteria_met": true}'

    with judge_server(script) as server:
        judge = f"openai:{server.url}#j"
        data, sub = _down_ueval(tmp_path, (1,))
        per_item = _options(
            "ueval", sub, data, judge, tmp_path / "a", judge_concurrency=1, request_mode="direct"
        )
        per_item.limits, per_item.backend_options = EvalOptions(judge_calls_per_item=2), backend
        summary = run_score(per_item)
        assert server.calls == 2 and summary["counts"]["failed"] == 1
        assert (
            "budget of 2 judge calls is spent (eval.judge_calls_per_item)"
            in summary["failed_items"][0]["reason"]
        )
        assert summary["limits"]["judge_calls_per_item"] == 2

        data, sub = _down_ueval(tmp_path, (1, 2, 3))
        per_run = _options(
            "ueval", sub, data, judge, tmp_path / "b", judge_concurrency=1, request_mode="direct"
        )
        per_run.limits, per_run.backend_options = EvalOptions(judge_calls_per_run=4), backend
        summary = run_score(per_run)
        assert server.calls == 2 + 4
        assert summary["counts"] == {"items": 3, "scored": 0, "failed": 3, "missing_outputs": 0}
        for row in _rows(tmp_path / "b").values():
            assert any(
                "budget of 4 judge calls is spent (eval.judge_calls_per_run)" in e for e in row["errors"]
            )

        down["now"] = False
        assert run_score(per_item)["counts"]["failed"] == 1 and server.calls == 6
        per_run.limits = EvalOptions()  # resumed with the default budget
        again = run_score(per_run)
        assert server.calls == 6 + 9
    assert again["counts"] == {"items": 3, "scored": 3, "failed": 0, "missing_outputs": 0}


def test_the_budget_settings_are_read_from_the_config(tmp_path: Path) -> None:
    from interleave_thinker.core.config import PipelineConfig

    config = tmp_path / "settings.yaml"
    config.write_text("eval:\n  judge_calls_per_item: 7\n  max_image_pixels: 1000\n", encoding="utf-8")
    resolved = PipelineConfig.resolve(preset="tiny", config_file=config)
    assert (resolved.eval.judge_calls_per_item, resolved.eval.max_image_pixels) == (7, 1000)


def test_score_and_generate_out_folders_are_locked(tmp_path: Path) -> None:
    """Item 13: a second `eval score` or `eval generate` on a folder in use stops at once, naming it."""
    from interleave_thinker.cli.main import app

    data = _wise_data(tmp_path, [1])
    outputs = tmp_path / "images"
    outputs.mkdir()
    (outputs / "1.png").write_bytes(_png(RED))
    out = tmp_path / "busy"
    with judge_server(_by_colour) as server, folder_lock(out):
        with pytest.raises(InputError, match=f"{out} is in use by another interleave-thinker process"):
            run_score(_options("wise", outputs, data, f"openai:{server.url}#j", out))
        assert server.calls == 0
        result = CliRunner().invoke(
            app, ["eval", "generate", "wise", "--data", str(data), "--out", str(out), "--preset", "tiny"]
        )
        assert result.exit_code != 0 and "is in use by another interleave-thinker process" in str(
            result.exception
        )
        assert sorted(os.listdir(out)) == [".lock"]


@pytest.mark.parametrize("planted", ["scores.jsonl", "replies.jsonl", "judge_cache", "hard:scores.jsonl"])
def test_score_never_appends_through_a_link_planted_in_its_out(tmp_path: Path, planted: str) -> None:
    """Issue 41, item 3: a symbolic link (or a hard link) planted at ``scores.jsonl``, ``replies.jsonl`` or
    ``judge_cache/`` in ``--out`` is refused with a message naming it; the file outside is unchanged."""
    data = _wise_data(tmp_path, [1])
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "1.png").write_bytes(_png(RED))
    out = outputs / "scores-wise"  # the default --out: inside the folder being scored
    out.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.jsonl"
    victim.write_text("precious\n", encoding="utf-8")
    name = planted.removeprefix("hard:")
    if planted.startswith("hard:"):
        os.link(victim, out / name)
    elif name == "judge_cache":
        (out / name).symlink_to(outside, target_is_directory=True)
    else:
        (out / name).symlink_to(victim)
    with judge_server(_by_colour) as server, pytest.raises(InputError, match=name):
        run_score(_options("wise", outputs, data, f"openai:{server.url}#j", out))
    assert victim.read_text(encoding="utf-8") == "precious\n"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.jsonl"]
