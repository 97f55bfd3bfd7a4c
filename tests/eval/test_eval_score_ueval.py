"""`eval score ueval` against a scripted judge over real HTTP: cached vs direct requests, "not sure",
missing outputs, open vs closed tasks, the reply parser's fallbacks and the official rates."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.eval.benchmarks.ueval import scorer as score_ueval
from interleave_thinker.testing.doubles.judge import judge_server
from tests.conftest import shared_path


def _t(name: str) -> str:
    return shared_path("reference", "eval", f"ueval_{name}.txt").read_bytes().decode("utf-8")


@pytest.fixture(autouse=True)
def eval_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(shared_path("reference", "eval")))


@pytest.mark.parametrize(
    ("reply", "criteria", "met"),
    [
        ('```json\n{"criteria_met": true, "explanation": "ok"}\n```', True, True),
        ('{"criteria_met": "not sure", "explanation": "hmm"}', "not sure", False),
        ('Sure. {"criteria_met": "yes", "explanation": "a\\d"}', True, True),  # escape fixed
        ('{"criteria_met": 1}', 1, False),
        ('{"criteria_met": "No"}', False, False),
        ('{"explanation": "no verdict"}', None, False),
        ('{"criteria_met": " TRUE "}', True, True),
        ('text {"a": {"criteria_met": "y"}} tail', True, True),  # the keyed inner object wins over { .. }
        ('x {"a": 1, "criteria_met": "y"} y', True, True),  # no keyed object first: first { to last }
    ],
)
def test_reply_parsing_and_values(reply: str, criteria: Any, met: bool) -> None:
    parsed = score_ueval.parse_rubric(reply)
    assert parsed["criteria_met"] == criteria and type(parsed["criteria_met"]) is type(criteria)
    assert parsed["met"] is met


@pytest.mark.parametrize("reply", ["no json here", "{broken", '```json\n{"x": }\n```'])
def test_unparsable_replies(reply: str) -> None:
    with pytest.raises(ValueError):
        score_ueval.parse_rubric(reply)


def test_task_to_template() -> None:
    assert [score_ueval.question_type(t) for t in ["Art", " textbook ", "paper", "", None, "other"]] == [
        "open", "closed", "closed", "open", "open", "open",
    ]  # fmt: skip


REPLIES = {
    "T1a": '```json\n{"criteria_met": true, "explanation": "ok"}\n```',
    "T1b": '{"criteria_met": "not sure", "explanation": "hmm"}',
    "I1a": 'Sure. {"criteria_met": "yes", "explanation": "a\\d"}',
    "T2a": '{"criteria_met": 1}',
    "I2a": '{"criteria_met": "No"}',
    "I2b": "no json here",
    "T3a": '{"explanation": "empty"}',
    "I3a": '{"criteria_met": "TRUE "}',
    "I4a": '```json\n{"criteria_met": false}\n```',
}


def _setup(tmp_path: Path) -> tuple[Path, Path, list[dict[str, Any]]]:
    items = [
        {"id": 1, "prompt": "Q1 <<text_answer>>?", "task": "art", "text_rubrics": ["T1a", "T1b"], "image_rubrics": ["I1a"]},
        {"id": 2, "prompt": "Q2", "task": "textbook", "text_rubrics": ["T2a"], "image_rubrics": ["I2a", {"criterion": "I2b"}]},
        {"id": 3, "prompt": "Q3", "text_rubrics": ["T3a"], "image_rubrics": ["I3a"]},
        {"id": 4, "prompt": "Q4", "task": "life", "text_rubrics": [], "image_rubrics": ["I4a"]},
    ]  # fmt: skip
    data = tmp_path / "ueval.json"
    data.write_text(json.dumps(items), encoding="utf-8")
    sub = tmp_path / "run"
    sub.mkdir()
    Image.new("RGB", (30, 20), (200, 1, 1)).save(sub / "u1.png")
    Image.new("RGB", (30, 20), (1, 200, 1)).save(sub / "u4.png")
    submission = [
        {"id": 1, "text_answer": "ANS1", "image_answer": [str(sub / "u1.png"), ""]},
        {"id": "2", "text_answer": "ANS2", "image_answer": "missing.png"},
        {"id": 4, "text_answer": None, "image_answer": ["u4.png"]},
        {"text_answer": "no id: ignored"},
    ]
    (sub / "results.json").write_text(json.dumps(submission), encoding="utf-8")
    return data, sub, items


def _png(path: Path) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def _expected(sub: Path, items: list[dict[str, Any]], mode: str) -> dict[str, str]:
    """Messages of each official request -> rubric, from the official replace chains and transports."""
    answers = {1: ("ANS1", [sub / "u1.png"]), 2: ("ANS2", []), 3: ("", []), 4: ("", [sub / "u4.png"])}
    system = {"role": "system", "content": [_text(_t("system_instruction"))]}
    out: dict[str, str] = {}
    for item in items:
        text, images = answers[item["id"]]
        q = item["prompt"]
        ctx = _t("text_template").replace("<<question>>", q).replace("<<text_answer>>", text)
        for rubric in item["text_rubrics"]:
            r = _t("text_rubric_template").replace("<<rubric_item>>", rubric)
            cached = mode == "cached" and len(item["text_rubrics"]) > 1
            msgs = ([system, {"role": "user", "content": [_text(ctx)]}, {"role": "user", "content": [_text(r)]}]
                    if cached else [{"role": "user", "content": [_text(ctx + "\n\n" + r)]}])  # fmt: skip
            out[json.dumps(msgs)] = rubric
        closed = item.get("task") == "textbook"
        template = _t("image_template_closed" if closed else "image_template_open")
        ctx = template.replace("<<question>>", q).replace("<<text_answer>>", text)
        for rubric in item["image_rubrics"]:
            criterion = rubric if isinstance(rubric, str) else rubric["criterion"]
            r = _t("image_rubric_template").replace("<<rubric_item>>", criterion)
            pics = [_png(p) for p in images]
            if mode == "cached" and images:
                msgs = [system, {"role": "user", "content": pics}, {"role": "user", "content": [_text(ctx)]},
                        {"role": "user", "content": [_text(r)]}]  # fmt: skip
            else:
                msgs = [{"role": "user", "content": [_text(ctx + "\n\n" + r), *pics]}]
            out[json.dumps(msgs)] = criterion
    return out


def test_ueval_rates_cached_then_direct(tmp_path: Path) -> None:
    data, sub, items = _setup(tmp_path)
    expected = {**_expected(sub, items, "cached"), **_expected(sub, items, "direct")}
    asked: list[str] = []

    def script(body: dict[str, Any]) -> str:
        assert list(body) == ["model", "messages"]  # the official code sets no generation settings
        rubric = expected.get(json.dumps(body["messages"]))
        asked.append(rubric or "UNEXPECTED")
        return REPLIES[rubric] if rubric else "UNEXPECTED"

    with judge_server(script) as server:
        judge = f"openai:{server.url}#gemini-2.5-pro"
        args = ["eval", "score", "ueval", "--outputs", str(sub), "--data", str(data), "--judge", judge,
                "--judge-attempts", "2", "--judge-cache", str(tmp_path / "cache")]  # fmt: skip
        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "cached")])
        assert result.exit_code == 0, result.output
        assert "UNEXPECTED" not in asked
        assert sorted(asked) == sorted([*REPLIES, "I2b"])  # I2b never parses: asked twice
        assert sum(1 for b in server.bodies if b["messages"][0]["role"] == "system") == 2 + 1 + 1
        cached = json.loads((tmp_path / "cached" / "summary.json").read_text())

        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "direct"), "--ueval-mode", "direct"])
        assert result.exit_code == 0, result.output
        direct = json.loads((tmp_path / "direct" / "summary.json").read_text())
        assert "UNEXPECTED" not in asked and server.calls == 10 + 4  # u2 and u3 were direct already: cached
        assert all(b["messages"][0]["role"] == "user" for b in server.bodies[10:])
    assert direct["judge_calls"] == {"this_run": 4, "cache_hits": 6}

    for summary in (cached, direct):
        assert summary["text_avg_rate"] == pytest.approx((0.5 + 0.0 + 0.0) / 3)
        assert summary["image_avg_rate"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
        assert (summary["num_items"], summary["num_items_with_text"], summary["num_items_with_image"]) == (
            4,
            3,
            3,
        )
        assert summary["counts"] == {"items": 4, "scored": 2, "failed": 1, "missing_outputs": 1}
        assert summary["judge"]["name_matches_official"] is True
    rows = {
        r["id"]: r for r in map(json.loads, (tmp_path / "cached" / "scores.jsonl").read_text().splitlines())
    }
    assert rows["1"]["text_score"] == {"met": 1, "total": 2, "rate": 0.5}
    assert rows["1"]["criteria"] == {"text": [True, "not sure"], "image": [True]}
    assert (
        rows["2"]["image_score"] == {"met": None, "total": 2, "rate": None}
        and rows["2"]["status"] == "failed"
    )
    assert rows["2"]["question_type"] == "closed" and rows["3"]["question_type"] == "open"
    assert rows["3"]["status"] == "missing" and rows["3"]["image_score"]["rate"] == 1.0  # judged as official
    assert rows["4"]["text_score"] == {"met": 0, "total": 0, "rate": None}
    assert any("missing.png" in e for e in rows["2"]["errors"])
