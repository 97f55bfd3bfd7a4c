"""`eval score wise|wise-legacy` against a scripted judge over real HTTP: requests, regexes, formulas, resume."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.eval.benchmarks.wise import scorer as score_wise
from interleave_thinker.eval.score_run import ScoreOptions, run_score
from interleave_thinker.testing.doubles.judge import image_urls, judge_server, user_text
from tests.conftest import shared_path

P_FIELD, E_FIELD = "{prompt_data['Prompt']}", "{prompt_data['Explanation']}"


def _shared_text(name: str) -> str:
    return shared_path("reference", "eval", f"{name}.txt").read_bytes().decode("utf-8")


def official_user(template: str, record: dict[str, Any]) -> str:
    """The official f-string's value, computed another way: mark the fields, then substitute once."""
    marked = template.replace(P_FIELD, "\0P\0").replace(E_FIELD, "\0E\0")
    pieces = marked.split("\0")
    values = {"P": record["Prompt"], "E": record["Explanation"]}
    return "".join(values.get(p, p) if i % 2 else p for i, p in enumerate(pieces))


def _png(path: Path, color: tuple[int, int, int]) -> None:
    Image.new("RGB", (32, 24), color).save(path)


@pytest.fixture
def eval_prompts(monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = shared_path("reference", "eval")
    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(folder))
    return folder


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ("Score: 1", 1.0),
        ("**Score**: 1", 1.0),
        ("score 1", 1.0),
        ("The final score: 1", 1.0),
        ("Score: 2\nScore: 1", 1.0),
        ("0", 0.0),
        ("<think>Score: 0</think>\n1", 1.0),
        ("**Score:** 0", None),
        ("Score: 10", None),
        ("Scores: 1", None),
        ("Score：1", None),
        ("0\n1", None),
    ],
)
def test_verified_regex_edge_cases(reply: str, value: float | None) -> None:
    if value is None:
        with pytest.raises(ValueError):
            score_wise.parse_verified(reply)
    else:
        assert score_wise.parse_verified(reply) == value


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        (
            "Consistency: 2\nRealism: 1\nAesthetic Quality: 2",
            {"consistency": 2, "realism": 1, "aesthetic_quality": 2},
        ),
        ("**Consistency**: 1\nRealism: 1\nAesthetic Quality: 0\nConsistency: 2", None),
        ("2\n2\n1\n0", {"consistency": 2, "realism": 2, "aesthetic_quality": 1}),
        (
            "Consistency: 9\nRealism: 0\nAesthetic Quality: 0",
            {"consistency": 9, "realism": 0, "aesthetic_quality": 0},
        ),
        ("**Consistency:** 2\nRealism: 1\nAesthetic Quality: 1", "missing"),
        ("Consistency: 2\n1\n0", "missing"),
    ],
)
def test_legacy_regex_edge_cases(reply: str, value: Any) -> None:
    if value == "missing":
        with pytest.raises(ValueError):
            score_wise.parse_legacy(reply)
        return
    parsed = score_wise.parse_legacy(reply)
    if value is None:  # later duplicates win
        assert parsed == {"consistency": 2.0, "realism": 1.0, "aesthetic_quality": 0.0}
    else:
        assert parsed == value


VERIFIED_REPLIES = {
    1: ["Score: 1"],
    2: ["**Score**: 0"],
    3: ["**Score:** 0"],
    401: ["score 1"],
    402: ["<think>Score: 0</think>\n1"],
    521: ["The final score: 1"],
    522: ["Score: 2\nScore: 1"],
    641: ["0"],
    642: ["0\n1"],
    761: ["Score: 10", "Score：1", "Score: 1"],
    881: ["Scores: 1"],
    882: ["Score: 1"],
}


def _verified_setup(tmp_path: Path) -> tuple[Path, dict[int, Any], dict[str, int]]:
    data = shared_path("benchmarks", "wise")
    records = {
        r["prompt_id"]: r
        for f in sorted(data.glob("*_verified.json"))
        for r in json.loads(f.read_text("utf-8"))
    }
    outputs = tmp_path / "images"
    outputs.mkdir()
    for number, pid in enumerate(VERIFIED_REPLIES):
        _png(outputs / f"{pid}.png", (number * 20, 10, 200))
    template = _shared_text("wise_verified_user")
    by_text = {official_user(template, records[pid]): pid for pid in VERIFIED_REPLIES}
    return outputs, records, by_text


def _scripted(by_text: dict[str, int], replies: dict[int, list[str]]) -> tuple[Any, dict[int, int]]:
    asked: dict[int, int] = {}

    def script(body: dict[str, Any]) -> str:
        pid = by_text.get(user_text(body))
        if pid is None:
            return "UNEXPECTED REQUEST"
        n = asked[pid] = asked.get(pid, 0) + 1
        answers = replies[pid]
        return answers[min(n, len(answers)) - 1]

    return script, asked


def test_wise_verified_scores_exactly_and_resumes(tmp_path: Path, eval_prompts: Path) -> None:
    outputs, records, by_text = _verified_setup(tmp_path)
    script, asked = _scripted(by_text, VERIFIED_REPLIES)
    out = tmp_path / "scored"
    with judge_server(script) as server:
        judge = f"openai:{server.url}#Qwen3.5-35B-A3B"
        result = CliRunner().invoke(
            app,
            ["eval", "score", "wise", "--outputs", str(outputs), "--data", str(shared_path("benchmarks", "wise")),
             "--judge", judge, "--out", str(out), "--judge-concurrency", "4"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        # every request is the official body: system text, filled user text, raw PNG bytes, settings
        body = next(b for b in server.bodies if by_text.get(user_text(b)) == 1)
        raw = (outputs / "1.png").read_bytes()
        assert list(body) == ["model", "messages", "temperature", "max_tokens", "chat_template_kwargs"]
        assert body["messages"] == [
            {"role": "system", "content": [{"type": "text", "text": _shared_text("wise_verified_system")}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": official_user(_shared_text("wise_verified_user"), records[1])},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + base64.b64encode(raw).decode()},
                    },
                ],
            },
        ]
        assert (body["temperature"], body["max_tokens"]) == (0.0, 500)
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert all(user_text(b) in by_text for b in server.bodies)
        # 9 parsed at once except 761 (3 tries); 3, 642 and 881 never parse: 3 tries each, then failures
        assert server.calls == 8 + 3 + 3 * 3
        assert asked[3] == asked[642] == asked[881] == 3

        summary = json.loads((out / "summary.json").read_text())
        cats = summary["categories"]
        assert {k: v["score"] for k, v in cats.items()} == {
            "CULTURE": 0.5, "TIME": 1.0, "SPACE": 1.0, "BIOLOGY": 0.0, "PHYSICS": 1.0, "CHEMISTRY": 1.0,
        }  # fmt: skip
        assert summary["overall"] == pytest.approx(0.4 * 0.5 + 0.12 * 4)
        assert summary["counts"] == {"items": 1000, "scored": 9, "failed": 3, "missing_outputs": 988}
        assert summary["complete"] is False
        assert summary["judge"]["name_matches_official"] is True and "note" not in summary["judge"]
        assert summary["judge"]["verified"] is False
        assert summary["prompts"]["sha256"]["wise_verified_user"].startswith("b72932ce")
        rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rows[:3]] == ["1", "2", "3"]
        failed = next(r for r in rows if r["id"] == "3")
        assert (
            failed["status"] == "failed" and failed["score"] is None and len(failed["replies"]["judge"]) == 3
        )
        replies = (out / "replies.jsonl").read_text().splitlines()
        assert len(replies) == server.calls

        # a killed run: keep 4 lines and a torn fifth; the rest is answered from the cache, nothing re-asked
        lines = (out / "scores.jsonl").read_text().splitlines(keepends=True)
        (out / "scores.jsonl").write_text("".join(lines[:4]) + lines[4][:10])
        calls = server.calls
        reported: list[tuple[int, int]] = []
        again = run_score(_options("wise", outputs, out, judge), on_scored=lambda *n: reported.append(n))
        assert server.calls == calls
        # the counted bar's hook: starts at the kept rows, then one call per item written, up to all
        kept = len(lines[:4])
        assert reported == [(n, 1000) for n in range(kept, 1001)]
        assert again["judge_calls"] == {"this_run": 0, "cache_hits": 15}  # kept: ids 1, 2, 3 (5 calls)
        assert again["overall"] == summary["overall"] and again["counts"] == summary["counts"]
        assert (out / "scores.jsonl").read_text().count("\n") == 1000


def _options(protocol: str, outputs: Path, out: Path, judge: str, **kw: Any) -> ScoreOptions:
    data = kw.pop("data", str(shared_path("benchmarks", "wise")))
    return ScoreOptions(protocol=protocol, outputs=outputs, data=data, judge=judge, out=out, **kw)


def test_identical_requests_come_from_a_shared_cache(tmp_path: Path, eval_prompts: Path) -> None:
    outputs, _, by_text = _verified_setup(tmp_path)
    script, _ = _scripted(by_text, VERIFIED_REPLIES)
    with judge_server(script) as server:
        judge = f"openai:{server.url}#scripted"
        first = run_score(_options("wise", outputs, tmp_path / "a", judge, judge_cache=tmp_path / "cache"))
        calls = server.calls
        second = run_score(_options("wise", outputs, tmp_path / "b", judge, judge_cache=tmp_path / "cache"))
        assert server.calls == calls == 20
        assert second["judge_calls"] == {"this_run": 0, "cache_hits": 20}
        assert second["categories"] == first["categories"]
        assert "not comparable to the published leaderboard" in second["judge"]["note"]


def test_transport_failures_are_counted_and_asked_again(tmp_path: Path, eval_prompts: Path) -> None:
    outputs, _, by_text = _verified_setup(tmp_path)
    down = {"on": True}

    def script(body: dict[str, Any]) -> str | int:
        return 400 if down["on"] and by_text.get(user_text(body)) == 1 else "Score: 1"

    with judge_server(script) as server:
        judge = f"openai:{server.url}#scripted"
        first = run_score(_options("wise", outputs, tmp_path / "o", judge))
        assert first["counts"]["failed"] == 1 and server.calls == 12 + 2  # 3 tries for id 1
        down["on"] = False
        (tmp_path / "o" / "scores.jsonl").write_text("")  # rescore all: failures were never cached
        second = run_score(_options("wise", outputs, tmp_path / "o", judge))
        assert server.calls == 14 + 1
        assert second["counts"]["failed"] == 0 and second["categories"]["CULTURE"]["score"] == 1.0


LEGACY = [
    (1, "Cultural knowledge", "Consistency: 2\nRealism: 1\nAesthetic Quality: 2"),  # 0.9
    (401, "time", "2\n2\n1"),  # 0.95
    (530, "time", "**Consistency**: 1\n**Realism**: 0\n**Aesthetic Quality**: 2"),  # 0.45
    (568, "Space", "Consistency: 9\nRealism: 0\nAesthetic Quality: 0"),  # 3.15, no range check
    (701, "Biology", "**Consistency:** 2\nRealism: 1\nAesthetic Quality: 1"),  # never parses
    (702, "Biology", "Consistency: 0\nRealism: 0\nAesthetic Quality: 0"),  # 0
    (801, "Physical Knowledge", "Consistency: 1\nRealism: 1\nAesthetic Quality: 1"),  # 0.5
    (901, "Chemistry", "Consistency: 2\nRealism: 2\nAesthetic Quality: 2"),  # 1.0
]


def _legacy_data(tmp_path: Path) -> Path:
    folder = tmp_path / "legacy"
    folder.mkdir()
    files: dict[str, list[dict[str, Any]]] = {
        "cultural_common_sense.json": [],
        "spatio-temporal_reasoning.json": [],
        "natural_science.json": [],
    }
    for pid, category, _ in LEGACY:
        name = "cultural_common_sense.json" if pid <= 400 else "spatio-temporal_reasoning.json"
        name = "natural_science.json" if pid > 700 else name
        prompt = f"prompt {pid} with {{braces}} and {E_FIELD} inside"
        files[name].append({"Prompt": prompt, "Explanation": f"why {pid} {P_FIELD}", "Category": category,
                            "Subcategory": "s", "prompt_id": pid})  # fmt: skip
    for name, rows in files.items():
        (folder / name).write_text(json.dumps(rows), encoding="utf-8")
    return folder


def test_wise_legacy_weights_ranges_and_request(tmp_path: Path, eval_prompts: Path) -> None:
    data = _legacy_data(tmp_path)
    outputs = tmp_path / "images"
    outputs.mkdir()
    template = _shared_text("wise_legacy_user")
    by_text: dict[str, int] = {}
    for number, (pid, _category, _) in enumerate(LEGACY):
        _png(outputs / f"{pid}.png", (number * 25, 0, 0))
        record = {
            "Prompt": f"prompt {pid} with {{braces}} and {E_FIELD} inside",
            "Explanation": f"why {pid} {P_FIELD}",
        }
        by_text[official_user(template, record)] = pid
    script, asked = _scripted(by_text, {pid: [reply] for pid, _, reply in LEGACY})
    with judge_server(script) as server:
        judge = f"openai:{server.url}#gpt-4o-2024-05-13"
        summary = run_score(_options("wise-legacy", outputs, tmp_path / "o", judge, data=str(data)))
        assert all(user_text(b) in by_text for b in server.bodies)
        body = server.bodies[0]
        assert list(body) == ["model", "messages", "temperature", "max_tokens"]
        assert (body["temperature"], body["max_tokens"]) == (0.0, 2000)
        assert body["messages"][0]["content"][0]["text"] == _shared_text("wise_legacy_system")
        assert image_urls(body)[0].startswith("data:image/png;base64,")
        assert asked[701] == 3
    cats = {k: v["score"] for k, v in summary["categories"].items()}
    assert cats == pytest.approx(
        {
            "CULTURE": 0.9,
            "TIME": (0.95 + 0.45) / 2,
            "SPACE": 3.15,
            "BIOLOGY": 0.0,
            "PHYSICS": 0.5,
            "CHEMISTRY": 1.0,
        }
    )
    expected = 0.4 * 0.9 + 0.167 * 0.7 + 0.133 * 3.15 + 0.1 * 0.0 + 0.1 * 0.5 + 0.1 * 1.0
    assert summary["overall"] == pytest.approx(expected)
    assert summary["counts"]["failed"] == 1
    rows = {
        json.loads(x)["id"]: json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()
    }
    assert rows["530"]["category"] == "TIME" and rows["568"]["category"] == "SPACE"
    assert rows["1"]["consistency"] == 2.0 and rows["1"]["score"] == pytest.approx(0.9)


def test_protocols_never_mix(tmp_path: Path, eval_prompts: Path) -> None:
    legacy = _legacy_data(tmp_path)
    outputs = tmp_path / "images"
    outputs.mkdir()
    with judge_server(lambda body: "Score: 1") as server:
        judge = f"openai:{server.url}#j"
        with pytest.raises(InputError, match="wise-legacy"):
            run_score(_options("wise", outputs, tmp_path / "a", judge, data=str(legacy)))
        with pytest.raises(InputError, match="verified"):
            run_score(_options("wise-legacy", outputs, tmp_path / "b", judge))
        run_score(_options("wise", outputs, tmp_path / "c", judge))
        with pytest.raises(ConfigError, match="never mix"):
            run_score(_options("wise-legacy", outputs, tmp_path / "c", judge, data=str(legacy)))
        result = CliRunner().invoke(
            app,
            ["eval", "score", "wise-legacy", "--outputs", str(outputs), "--data", str(shared_path("benchmarks", "wise")),
             "--judge", judge, "--out", str(tmp_path / "d")],
        )  # fmt: skip
        assert isinstance(result.exception, InputError)  # main() maps it to exit code 2
        assert server.calls == 0


def test_sigkilled_run_resumes_without_asking_again(tmp_path: Path, eval_prompts: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    outputs = tmp_path / "images"
    outputs.mkdir()
    ids = [*range(1, 31), *range(401, 411), *range(641, 661)]
    for pid in ids:
        _png(outputs / f"{pid}.png", (pid % 256, 3, 3))
    data = str(shared_path("benchmarks", "wise"))
    with judge_server(lambda body: "Score: 1", latency=0.05, capacity=4) as server:
        judge = f"openai:{server.url}#j"
        out = tmp_path / "killed"
        args = ["eval", "score", "wise", "--outputs", str(outputs), "--data", data, "--judge", judge,
                "--out", str(out), "--judge-concurrency", "4"]  # fmt: skip
        process = subprocess.Popen([sys.executable, "-m", "interleave_thinker", *args], env=dict(os.environ))
        deadline = time.monotonic() + 60
        while server.calls < 25 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
        # A request the killed process had already written reaches the server after the kill: wait until
        # the count is still for 0.5 s (10 replies' latency), or it is counted as the resume's (seen once
        # on a fresh clone: 38 calls asked for 37).
        settled = server.calls
        while True:
            time.sleep(0.5)
            if server.calls == settled:
                break
            settled = server.calls
        assert 25 <= server.calls < len(ids)
        lines = (out / "judge_cache" / "replies-cache.jsonl").read_text().splitlines()
        answered = sum(1 for line in lines if line.endswith("}"))  # a line torn by the kill is not an answer
        before = server.calls
        resumed = run_score(_options("wise", outputs, out, judge, judge_concurrency=4))
        assert server.calls - before == len(ids) - answered  # only what never came back is asked
        assert resumed["judge_calls"]["this_run"] == len(ids) - answered
        whole = run_score(_options("wise", outputs, tmp_path / "whole", judge, judge_concurrency=4))
    assert resumed["categories"] == whole["categories"] and resumed["counts"] == whole["counts"]
    killed_rows = (out / "scores.jsonl").read_text().splitlines()
    whole_rows = (tmp_path / "whole" / "scores.jsonl").read_text().splitlines()
    assert [json.loads(r)["score"] for r in killed_rows] == [json.loads(r)["score"] for r in whole_rows]


def test_any_chat_backend_judges_through_chat(tmp_path: Path, eval_prompts: Path) -> None:
    """A non-openai judge gets the same conversation through ``chat``: system text, user text, the image."""
    from interleave_thinker.eval.judging import ChatTransport
    from interleave_thinker.testing.scripted import ScriptedVLMBackend

    outputs, records, _ = _verified_setup(tmp_path)
    backend = ScriptedVLMBackend(["Score: 1"], name="scripted", repeat_last=True)
    summary = run_score(
        _options("wise", outputs, tmp_path / "o", "scripted:x"), ChatTransport(backend, "scripted:x")
    )
    assert len(backend.calls) == len(VERIFIED_REPLIES) and summary["counts"]["scored"] == len(
        VERIFIED_REPLIES
    )
    assert summary["judge"]["model"] == "scripted:x" and "not comparable" in summary["judge"]["note"]
    first = next(c for c in backend.calls if records[1]["Prompt"] in ScriptedVLMBackend.text_in(c))
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[0]["content"][0]["text"] == _shared_text("wise_verified_system")
    image = ScriptedVLMBackend.images_in(first)[0]
    assert image.size == (32, 24) and image.getpixel((0, 0)) == (0, 10, 200)
    assert backend.temperatures == [0.0] * len(VERIFIED_REPLIES)


class _LoadedModule:
    """Stands for a local backend's torch module: a repr of many lines, which is no name."""

    def __repr__(self) -> str:
        return "Qwen3VLForConditionalGeneration(\n" + "  (layer): Linear()\n" * 90 + ")"


def test_a_local_judge_is_named_by_its_spec_not_its_models_repr(tmp_path: Path, eval_prompts: Path) -> None:
    """A local judge's ``model`` is the loaded module: the name in summary.json, run.json and the console
    is the spec, on one short line; a served name (a string) is kept where the backend has one."""
    from interleave_thinker.eval.judging import ChatTransport
    from interleave_thinker.testing.scripted import ScriptedVLMBackend

    outputs, _, _ = _verified_setup(tmp_path)
    backend = ScriptedVLMBackend(["Score: 1"], name="transformers:/some/checkpoint", repeat_last=True)
    backend.model = _LoadedModule()  # type: ignore[attr-defined]
    out = tmp_path / "o"
    summary = run_score(_options("wise", outputs, out, "tiny:judge"), ChatTransport(backend, "tiny:judge"))
    assert summary["judge"]["model"] == "tiny:judge"
    run = json.loads((out / "run.json").read_text())
    assert run["judge"]["model"] == "tiny:judge"
    assert all("Linear()" not in p.read_text() for p in out.rglob("*") if p.is_file())
    backend.model = "gemini-2.5-pro"  # type: ignore[attr-defined]
    assert ChatTransport(backend, "gemini:gemini-2.5-pro").model_id() == "gemini-2.5-pro"


def test_fresh_scores_rescores_another_judge_into_the_same_folder(tmp_path: Path, eval_prompts: Path) -> None:
    """Another judge on a scored folder is refused with advice that works (``--fresh-scores``, a flag of
    `eval score` and `eval run`); with it the old scores move aside, nothing deleted, and the folder is
    scored again by the new judge."""
    outputs, _, by_text = _verified_setup(tmp_path)
    script, _ = _scripted(by_text, VERIFIED_REPLIES)
    out = tmp_path / "scores"
    with judge_server(script) as server:
        base = ["eval", "score", "wise", "--outputs", str(outputs), "--out", str(out), "--quiet",
                "--data", str(shared_path("benchmarks", "wise"))]  # fmt: skip
        first = CliRunner().invoke(app, [*base, "--judge", f"openai:{server.url}#a"])
        assert first.exit_code == 0, first.output
        refused = CliRunner().invoke(app, [*base, "--judge", f"openai:{server.url}#b"])
        assert isinstance(refused.exception, ConfigError) and "--fresh-scores" in str(refused.exception)
        again = CliRunner().invoke(app, [*base, "--judge", f"openai:{server.url}#b", "--fresh-scores"])
        assert again.exit_code == 0, again.output
    assert json.loads((out / "summary.json").read_text())["judge"]["model"] == "b"
    (aside,) = tmp_path.glob("scores.old-*")
    assert json.loads((aside / "run.json").read_text())["judge"]["model"] == "a"
    ids = [[json.loads(x)["id"] for x in (d / "scores.jsonl").read_text().splitlines()] for d in (aside, out)]
    assert ids[0] == ids[1] and len(ids[0]) > len(VERIFIED_REPLIES)  # every item, in both
    for command in (["eval", "score"], ["eval", "run"]):
        group = typer.main.get_command(app)
        sub = group.get_command(typer.Context(group), command[0])  # type: ignore[attr-defined]
        cmd = sub.get_command(typer.Context(sub), command[1])
        assert "--fresh-scores" in {o for p in cmd.params for o in getattr(p, "opts", [])}
