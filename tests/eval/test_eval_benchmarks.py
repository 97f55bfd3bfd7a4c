"""The benchmark registry and `eval run`: no benchmark name compared outside its own module, the CLI's
choices from the registry, a `custom` rubric benchmark end to end, and a WISE slice scored as a slice."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.eval_generate import BenchmarkName
from interleave_thinker.cli.eval_score import ProtocolName
from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import TemplateError
from interleave_thinker.eval import benchmarks
from interleave_thinker.eval.benchmarks.custom import protocol as custom
from interleave_thinker.eval.benchmarks.ueval import scorer as score_ueval
from interleave_thinker.eval.benchmarks.wise.prompts import VERIFIED_PROMPTS as WISE_VERIFIED_PROMPTS
from interleave_thinker.eval.prompts import DOWNLOAD_COMMAND, FOLDER_ENV, EvalPromptStore
from interleave_thinker.eval.report_data import load_run, markdown_table
from interleave_thinker.testing.doubles.judge import judge_server, user_text
from tests.conftest import REPO, shared_path

SRC = REPO / "src" / "interleave_thinker"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def ok(*args: str) -> str:
    """The command's output with its whitespace made single spaces: lines wrap at the terminal's width."""
    result = invoke(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return " ".join(str(result.output).split())


# --- the registry ------------------------------------------------------------------------------------


def name_uses(root: Path, names: list[str]) -> list[str]:
    """Places under ``root`` outside a benchmark's own modules (``eval/benchmarks/*.py``,
    ``eval/score_<name>.py``) where a benchmark or protocol name is compared, tested for membership,
    used as a table key, listed in a ``Literal`` or beside another name. (Today's code before the
    registry had 36 such lines: 2 Literals, the tables, the branches.)"""
    quoted = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    name = rf"[\"'](?:{quoted})[\"']"
    patterns = [
        rf"[!=]=\s*{name}",
        rf"{name}\s*[!=]=",
        rf"\bin\s*[(\[{{][^)\]}}]*{name}",
        rf"startswith\(\s*[\"'](?:{quoted})",
        rf"{name}\s*:(?!\S)",
        rf"Literal\[[^\]]*{name}",
        rf"[(\[{{]\s*{name}\s*,\s*{name}",  # a tuple, list or set of names: a table by another name
    ]
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        own = {f"eval/score_{n}.py" for n in benchmarks.names()}
        if rel.startswith(("eval/benchmarks/", "testing/")) or rel in own:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if any(re.search(p, line) for p in patterns):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


GENERIC = {"custom"}
"""Names that are also ordinary words elsewhere (a template kind is "custom"): checked in eval/ and cli/."""


def test_no_benchmark_name_is_compared_outside_its_own_module() -> None:
    names = [*benchmarks.names(), *benchmarks.protocol_names()]
    assert {"ueval", "wise", "wise-legacy", "rise", "custom"} <= set(names)
    assert name_uses(SRC, [n for n in names if n not in GENERIC]) == []
    assert name_uses(SRC / "eval", names) + name_uses(SRC / "cli", names) == []


def test_the_cli_choices_are_the_registry() -> None:
    assert [m.value for m in BenchmarkName] == list(benchmarks.names())
    assert [m.value for m in ProtocolName] == list(benchmarks.protocol_names())
    result = invoke("eval", "generate", "nosuch", "--data", "d", "--out", "o")
    assert result.exit_code == 2 and "custom" in result.output


# --- custom: a benchmark added as one module and one registry line --------------------------------

ROWS = [
    {"id": "a1", "prompt": "Draw a red apple and say what it is", "category": "food",
     "text_rubrics": ["Does the text name the fruit?"],
     "image_rubrics": ["Is there a red apple?", "Is the background plain?"]},
    {"id": "b2", "prompt": "Show a small boat", "category": "travel", "image_rubrics": ["Is there a boat?"]},
]  # fmt: skip


def rubric_judge(body: dict[str, Any]) -> str:
    """Every rubric met but the plain background."""
    met = "plain" not in user_text(body)
    return json.dumps({"criteria_met": met, "explanation": "scripted"})


@pytest.mark.slow
def test_custom_benchmark_generates_scores_and_reports(tmp_path: Path) -> None:
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "run"
    with judge_server(rubric_judge) as judge:
        args = ["eval", "run", "custom", "--data", str(data), "--out", str(out), "--judge",
                f"openai:{judge.url}#my-judge", "--preset", "tiny", "--mode", "base", "--quiet"]  # fmt: skip
        output = ok(*args)
        assert "2 of 2 scored, 0 failed, 0 missing outputs" in output
        assert len(judge.bodies) == 4  # one question per rubric
        systems = [m for b in judge.bodies for m in b["messages"] if m["role"] == "system"]
        assert systems and all(m["content"][0]["text"] == custom.TEXTS["system_instruction"] for m in systems)
        image_bodies = [b for b in judge.bodies if "images (attached)" in user_text(b)]
        assert len(image_bodies) == 3 and all(
            any(p.get("type") == "image_url" for m in b["messages"] for p in m["content"])
            for b in image_bodies
        )
        # resumable as its parts: nothing generated (no model) and nothing asked again
        again = ok(*args)
        assert "no model loaded" in again and len(judge.bodies) == 4
    summary = json.loads((out / "scores-custom" / "summary.json").read_text())
    assert summary["text_avg_rate"] == 1.0 and summary["image_avg_rate"] == 0.75
    assert summary["tasks"]["food"]["score"] == 75.0 and summary["tasks"]["travel"]["score"] == 100.0
    assert summary["average"] == 87.5 and summary["slice"] is None
    assert summary["judge"]["official_model"] is None and "no official judge" in summary["judge"]["note"]
    submission = json.loads((out / "submission.json").read_text())
    assert [e["id"] for e in submission] == ["a1", "b2"] and all(e["image_answer"] for e in submission)
    assert "average 87.5" in (out / "report.html").read_text()


def test_custom_items_need_a_rubric_question(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"id": "x", "prompt": "p", "category": "c"}) + "\n")
    result = invoke("eval", "generate", "custom", "--data", str(data), "--out", str(tmp_path / "o"),
                    "--preset", "tiny")  # fmt: skip
    assert result.exit_code != 0 and "needs at least one rubric question" in str(result.exception)


# --- eval run on a WISE slice ------------------------------------------------------------------------


@pytest.fixture
def eval_prompts(monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = shared_path("reference", "eval")
    monkeypatch.setenv(FOLDER_ENV, str(folder))
    return folder


@pytest.mark.slow
def test_eval_run_wise_limit_3_is_scored_and_reported_as_a_slice(
    tmp_path: Path, eval_prompts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = str(shared_path("benchmarks", "wise"))
    out = tmp_path / "wise"
    with judge_server(lambda body: "Score: 1") as judge:
        spec = f"openai:{judge.url}#Qwen3.5-35B-A3B"
        output = ok("eval", "run", "wise", "--data", data, "--out", str(out), "--judge", spec, "--limit", "3",
                    "--preset", "tiny", "--mode", "base", "--quiet")  # fmt: skip
        assert "3 of 3 scored (a 3-item slice of 1000), 0 failed, 0 missing outputs" in output
        assert "not verified" in output and len(judge.bodies) == 3
        summary = json.loads((out / "scores-wise" / "summary.json").read_text())
        assert summary["overall"] == 1.0 and summary["overall_on_slice"] is True
        assert summary["slice"] == {"items": 3, "of": 1000, "chosen_by": "--limit 3"}
        assert summary["counts"]["items"] == 3 and summary["judge"]["verified"] is False
        page = (out / "report.html").read_text()
        assert "<td>Overall</td><td>1.0000 (on a 3-item slice of 1000)</td>" in page
        table = markdown_table([load_run(out / "scores-wise")])
        assert "named as the official judge Qwen3.5-35B-A3B; not verified" in table
        assert "(not the official judge)" not in table

        # `eval score` on the generated folder scores the generated slice, not 997 missing outputs
        plain = ok("eval", "score", "wise", "--outputs", str(out), "--data", data, "--judge", spec,
                   "--out", str(tmp_path / "again"), "--quiet")  # fmt: skip
        assert "3 of 3 scored (a 3-item slice of 1000)" in plain
        one = ok("eval", "score", "wise", "--outputs", str(out), "--data", data, "--judge", spec,
                 "--out", str(tmp_path / "one"), "--ids", "2", "--quiet")  # fmt: skip
        assert "1 of 1 scored (a 1-item slice of 1000)" in one

    # a finished generation exits before loading any model
    def no_models(run: Any) -> Any:
        raise AssertionError("a finished run loaded its models")

    monkeypatch.setattr("interleave_thinker.eval.generate.load_pipeline", no_models)
    again = ok("eval", "generate", "wise", "--data", data, "--out", str(out), "--limit", "3",
               "--preset", "tiny", "--mode", "base", "--quiet")  # fmt: skip
    assert "all 3 items already finished" in again and "no model loaded" in again
    assert "3 of 3 items have an output" in again


# --- prompts, UEval average -----------------------------------------------------------------------


def test_eval_run_without_judge_prompts_stops_before_generating(tmp_path: Path) -> None:
    data = str(shared_path("benchmarks", "wise"))
    out = tmp_path / "wise"
    result = invoke("eval", "run", "wise", "--data", data, "--out", str(out), "--judge", "openai:http://127.0.0.1:9/v1#j",
                    "--limit", "1", "--preset", "tiny")  # fmt: skip
    assert isinstance(result.exception, TemplateError) and not out.exists()
    assert FOLDER_ENV in str(result.exception) and f"{DOWNLOAD_COMMAND} wise" in str(result.exception)


def test_the_prompts_error_names_the_variable_and_the_download_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(TemplateError) as offline:
        EvalPromptStore(cache_dir=tmp_path / "c0").load(WISE_VERIFIED_PROMPTS, "wise")
    monkeypatch.delenv("INTERLEAVE_THINKER_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(TemplateError) as unreachable:  # port 9 (discard) refuses at once on 127.0.0.1
        EvalPromptStore(base_url="http://127.0.0.1:9", cache_dir=tmp_path / "c1", timeout=5).load(
            WISE_VERIFIED_PROMPTS, "wise"
        )
    for error in (offline.value, unreachable.value):
        assert FOLDER_ENV in str(error) and f"{DOWNLOAD_COMMAND} wise" in str(error), str(error)


def test_ueval_average_is_the_mean_of_task_scores() -> None:
    def row(task: str, text: float | None, image: float | None) -> dict[str, Any]:
        return {"category": task, "text_score": {"rate": text}, "image_score": {"rate": image}}

    rows = [row("art", 1.0, 0.5), row("art", 0.0, 0.5), row("space", None, 0.2), row("life", 0.6, 0.4)]
    summary = score_ueval.summarize(rows)
    assert summary["tasks"]["art"]["score"] == 50.0  # (mean text 0.5 + mean image 0.5) / 2
    assert summary["tasks"]["space"]["score"] == pytest.approx(20.0)  # only an image rate
    assert summary["tasks"]["life"]["score"] == 50.0
    assert summary["average"] == pytest.approx(40.0)  # unweighted over tasks, not over items
    assert "mean of the task scores" in summary["average_formula"]
