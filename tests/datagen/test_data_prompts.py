"""`data prompts`: a taxonomy and a teacher behind a real OpenAI-compatible server in, a batch input out."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import InputError
from interleave_thinker.datagen.dedupe import NearDuplicateIndex, jaccard, shingles
from interleave_thinker.datagen.taxonomy import load_taxonomy
from interleave_thinker.runtime.batch_inputs import read_batch_input
from interleave_thinker.testing.doubles.openai_chat import Call, Reply, ScriptedServer, ok
from tests.helpers.common import REPO
from tests.helpers.datagen import BATCH, COUNT, SUB, WORDS, lexicon_reply, taxonomy_file


def made_up(sub: str, batch: int, i: int) -> str:
    """A prompt of distinct words: no two made-up prompts are near-duplicates."""
    digest = hashlib.sha256(f"{sub}|{batch}|{i}".encode()).digest()
    words = [WORDS[b % len(WORDS)] for b in digest[:9]]
    return f"Show how the {words[0]} {words[1]} meets the {words[2]} {words[3]} by the {words[4]} {words[5]} ({words[6]} {words[7]} {words[8]})."


Special = Callable[[str, int, int], "list[str] | str | None"]


def teacher(special: Special | None = None) -> Callable[[int, Call], Reply]:
    """The teacher's reply as a function of what it is asked (not of the call's position), so a rerun
    or another concurrency gets the same answers. ``special(sub, batch, attempt)`` may override one."""
    seen: dict[str, int] = {}

    def script(index: int, call: Call) -> Reply:
        text = call.body["messages"][0]["content"][0]["text"]
        sub = SUB.search(text).group(1)  # type: ignore[union-attr]
        batch_match = BATCH.search(text)
        batch = int(batch_match.group(1)) if batch_match else 0
        key = f"{sub}|{batch}"
        attempt = seen[key] = seen.get(key, -1) + 1
        answer = special(sub, batch, attempt) if special else None
        if isinstance(answer, str):
            return ok(answer)
        if batch == 0:
            return ok(lexicon_reply(sub))
        count = int(COUNT.search(text).group(1))  # type: ignore[union-attr]
        prompts = answer if answer is not None else [made_up(sub, batch, i) for i in range(count)]
        return ok("<answer>" + json.dumps({"prompts": prompts}) + "</answer>")

    return script


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["data", "prompts", *args], env={"COLUMNS": "200"})


def run_cli(server: ScriptedServer, tax: Path, out: Path, *extra: str) -> Any:
    result = invoke(
        "--taxonomy", str(tax), "--out", str(out), "--llm", f"openai:{server.url}#teacher",
        "--per-subcategory", "4", "--quiet", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return result


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_48_prompts_balanced_deduplicated_and_readable_by_batch(tmp_path: Path) -> None:
    """4 domains x 3 sub-categories x 4 prompts; repeats are dropped and asked again; a bad reply is retried."""
    repeat = made_up("Topic 1.2", 1, 0)

    def special(sub: str, batch: int, attempt: int) -> list[str] | str | None:
        if sub == "Topic 1.2" and batch == 1:  # two near-duplicates of the first prompt among four
            return [repeat, made_up(sub, 1, 1), repeat.upper() + "!", "  " + repeat.replace("(", "[ ") + " "]
        if sub == "Topic 2.0" and batch == 1 and attempt == 0:
            return "I would rather not answer in JSON."
        return None

    tax = taxonomy_file(tmp_path / "tax.yaml")
    out = tmp_path / "prompts.jsonl"
    with ScriptedServer(teacher(special)) as server:
        result = run_cli(server, tax, out, "--subcategory-concurrency", "4")
    records = rows(out)
    assert len(records) == 48
    assert [r["id"] for r in records][:5] == [f"domain-0.sub-0-0.00{i}" for i in range(1, 5)] + [
        "domain-0.sub-0-1.001"
    ]
    per_sub: dict[str, int] = {}
    for record in records:
        per_sub[record["subcategory"]] = per_sub.get(record["subcategory"], 0) + 1
    assert set(per_sub.values()) == {4} and len(per_sub) == 12
    items = read_batch_input(str(out))
    assert [i.id for i in items] == [r["id"] for r in records] and all(i.problem is None for i in items)
    topic12 = [r["prompt"] for r in records if r["subcategory"] == "sub-1-2"]
    assert topic12 == [
        repeat,
        made_up("Topic 1.2", 1, 1),
        made_up("Topic 1.2", 2, 0),
        made_up("Topic 1.2", 2, 1),
    ]
    work = tmp_path / "prompts.jsonl.teacher"
    dropped = rows(work / "dropped.jsonl")
    assert [d["prompt"] for d in dropped] == [repeat.upper() + "!", repeat.replace("(", "[ ")]
    assert {d["duplicate_of"] for d in dropped} == {repeat}
    retried = json.loads((work / "domain-2" / "sub-2-0" / "prompts-001.json").read_text())
    assert len(retried["replies"]) == 2 and retried["failed"] is None and "no JSON" in retried["errors"][0]
    summary = json.loads((work / "summary.json").read_text())
    # 12 lexicons + 12 first batches + 1 retry + 1 second batch for the sub-category that lost two
    assert summary["teacher_calls"] == len(server.posts()) == 26
    assert summary["dropped_near_duplicates"] == 2 and summary["failures"] == [] and summary["short"] == []
    assert "wrote 48 prompt(s)" in result.output


def test_rerun_makes_no_call_and_gives_identical_output(tmp_path: Path) -> None:
    tax = taxonomy_file(tmp_path / "tax.yaml", domains=2, subs=2)
    out = tmp_path / "p.jsonl"
    with ScriptedServer(teacher()) as server:
        run_cli(server, tax, out)
        first = out.read_bytes()
        calls = len(server.posts())
        again = run_cli(server, tax, out, "--subcategory-concurrency", "3")
    assert calls == 8 and len(server.posts()) == calls
    assert out.read_bytes() == first and "replies reused: 8" in again.output


def test_killed_run_resumes_without_asking_again(tmp_path: Path) -> None:
    """SIGKILL while the 8th call waits; the rerun asks only what was not stored, and writes the same file."""
    tax = taxonomy_file(tmp_path / "tax.yaml")
    script = teacher()
    killed = tmp_path / "killed.jsonl"
    hang = lambda index, call: Reply(delay=60) if index >= 7 else script(index, call)  # noqa: E731
    with ScriptedServer(hang) as server:
        args = ["data", "prompts", "--taxonomy", str(tax), "--out", str(killed), "--per-subcategory", "4",
                "--llm", f"openai:{server.url}#teacher", "--subcategory-concurrency", "1", "--quiet"]  # fmt: skip
        process = subprocess.Popen([sys.executable, "-m", "interleave_thinker", *args], env=dict(os.environ))
        deadline = time.monotonic() + 60
        while len(server.calls) < 8 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert len(server.calls) == 8 and not killed.exists()
    with ScriptedServer(teacher()) as server:
        run_cli(server, tax, killed)
        asked = [SUB.search(c.body["messages"][0]["content"][0]["text"]).group(1) for c in server.posts()]  # type: ignore[union-attr]
    assert len(asked) == 24 - 7
    assert not {"Topic 0.0", "Topic 0.1", "Topic 0.2"} & set(asked)
    whole = tmp_path / "whole.jsonl"
    with ScriptedServer(teacher()) as server:
        run_cli(server, tax, whole, "--subcategory-concurrency", "5")
    assert killed.read_bytes() == whole.read_bytes() and len(rows(whole)) == 48


def test_bad_replies_are_retried_then_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    tax = taxonomy_file(tmp_path / "tax.yaml", domains=1, subs=2)
    out = tmp_path / "p.jsonl"

    def special(sub: str, batch: int, attempt: int) -> list[str] | str | None:
        if sub == "Topic 0.1" and batch == 0:
            return "<answer>{'lexicon': [], 'templates': ['x']}</answer>"
        return None

    with ScriptedServer(teacher(special)) as server:
        result = run_cli(server, tax, out, "--max-parse-attempts", "2")
        assert len(server.posts()) == 1 + 1 + 2  # good lexicon, one batch; the bad lexicon asked twice
    assert [r["subcategory"] for r in rows(out)] == ["sub-0-0"] * 4
    stored = json.loads((tmp_path / "p.jsonl.teacher" / "domain-0" / "sub-0-1" / "lexicon.json").read_text())
    assert len(stored["replies"]) == 2
    assert stored["failed"].startswith(
        "lexicon: no usable reply after 2 attempt(s): the answer's 'lexicon' list"
    )
    assert "\n" not in stored["failed"]
    summary = json.loads((tmp_path / "p.jsonl.teacher" / "summary.json").read_text())
    assert summary["short"] == ["domain-0/sub-0-1"] and len(summary["failures"]) == 1
    assert "1 failed teacher call(s)" in result.output
    with ScriptedServer(teacher()) as server:  # a rerun asks the failed call again, and only it
        run_cli(server, tax, out)
        assert len(server.posts()) == 2
    assert len(rows(out)) == 8


def test_a_30_mb_teacher_reply_is_stored_cut_with_a_marker(tmp_path: Path) -> None:
    tax = taxonomy_file(tmp_path / "tax.yaml", domains=1, subs=1)
    out = tmp_path / "p.jsonl"
    huge = "<think>" + "x" * 30_000_000 + "</think>"

    def special(sub: str, batch: int, attempt: int) -> list[str] | str | None:
        return huge if batch == 0 and attempt == 0 else None

    with ScriptedServer(teacher(special)) as server:
        run_cli(server, tax, out)
    stored_path = tmp_path / "p.jsonl.teacher" / "domain-0" / "sub-0-0" / "lexicon.json"
    assert stored_path.stat().st_size < 2 * 2**20  # was 30 MB
    stored = json.loads(stored_path.read_text())
    first, second = stored["replies"]
    assert len(first) < 1_048_576 + 100 and first.startswith("<think>xxx")
    assert first.endswith(f"[cut by interleave-thinker: {len(huge) - 1_048_576} more characters not stored]")
    assert second == lexicon_reply("Topic 0.0") and stored["failed"] is None
    assert "over the limit of 1048576" in stored["errors"][0]
    assert len(rows(out)) == 4
    with ScriptedServer(teacher()) as server:  # the stored call is read back and reused
        run_cli(server, tax, out)
        assert server.posts() == []


def test_near_duplicates_across_subcategories_keep_the_first(tmp_path: Path) -> None:
    tax = taxonomy_file(tmp_path / "tax.yaml", domains=1, subs=2)
    first = made_up("Topic 0.0", 1, 2)

    def special(sub: str, batch: int, attempt: int) -> list[str] | str | None:
        if sub == "Topic 0.1" and batch == 1:
            return [first.replace(").", " again)."), *(made_up(sub, 1, i) for i in range(3))]
        return None

    with ScriptedServer(teacher(special)) as server:
        run_cli(server, tax, tmp_path / "p.jsonl")
    records = rows(tmp_path / "p.jsonl")
    assert first in [r["prompt"] for r in records if r["subcategory"] == "sub-0-0"]
    assert [r["id"] for r in records if r["subcategory"] == "sub-0-1"] == [
        f"domain-0.sub-0-1.00{i}" for i in (1, 2, 3)
    ]
    summary = json.loads((tmp_path / "p.jsonl.teacher" / "summary.json").read_text())
    assert summary["short"] == ["domain-0/sub-0-1"] and summary["dropped_near_duplicates"] == 1


def test_dedupe_method() -> None:
    long = "How do I fold a paper crane from one square sheet, showing every fold in its own picture?"
    assert jaccard(shingles(long), shingles(long.replace("?", " please?"))) >= 0.8
    assert jaccard(shingles(long), shingles(long.replace("crane", "frog"))) < 0.8
    index = NearDuplicateIndex()
    assert index.add("a", long) is None
    assert index.add("b", long.upper()) == "a"
    assert index.add("c", long.replace("crane", "frog")) is None
    assert index.add("d", "Fold a frog") is None and index.add("e", "fold, a FROG!") == "d"


def test_shipped_taxonomy_has_8_domains() -> None:
    taxonomy, digest = load_taxonomy(None)
    assert len(taxonomy.domains) == 8 and len(digest) == 64
    assert len(taxonomy.pairs()) == 75 and all(len(d.subcategories) >= 6 for d in taxonomy.domains)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["domains"][2].update(subcategories=[]), "domains[2].subcategories is empty"),
        (
            lambda d: d["domains"][1]["subcategories"][0].pop("name"),
            "domains[1].subcategories[0].name is missing",
        ),
        (lambda d: d["domains"][0].update(id="Not a slug"), "domains[0].id must be a slug"),
        (
            lambda d: d["domains"][3]["subcategories"][1].update(id="sub-3-0"),
            "domains[3].subcategories[1].id 'sub-3-0' is already used by subcategories[0]",
        ),
        (lambda d: d["domains"][0].update(colour="red"), "domains[0].colour is not a known field"),
    ],
)
def test_taxonomy_errors_name_the_file_and_field(tmp_path: Path, edit: Any, message: str) -> None:
    path = taxonomy_file(tmp_path / "taxonomy.yaml")
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as info:
        load_taxonomy(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    result = invoke(
        "--taxonomy", str(path), "--out", str(tmp_path / "p.jsonl"), "--llm", "openai:http://127.0.0.1:9/v1"
    )
    assert result.exit_code != 0 and not (tmp_path / "p.jsonl").exists()


def test_shipped_taxonomy_and_teacher_templates_are_package_data() -> None:
    import fnmatch
    import tomllib

    repo = REPO
    config = tomllib.loads((repo / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["interleave_thinker"]
    for name in ("datagen/taxonomy.yaml", "prompts/datagen/lexicon.txt", "prompts/datagen/prompts.txt"):
        assert (repo / "src" / "interleave_thinker" / name).is_file()
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name


def test_settings_reach_the_teacher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--config works as in the other commands: remote.* reaches the teacher, model.device is checked."""
    from interleave_thinker.core.errors import ConfigError

    monkeypatch.setenv("TEACHER_TEST_KEY", "sk-test-123")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"remote": {"api_key_env": "TEACHER_TEST_KEY"}}))
    tax = taxonomy_file(tmp_path / "tax.yaml", domains=1, subs=1)
    with ScriptedServer(teacher()) as server:
        run_cli(server, tax, tmp_path / "p.jsonl", "--config", str(config))
        headers = [{k.lower(): v for k, v in c.headers.items()} for c in server.posts()]
    assert headers and all(h["authorization"] == "Bearer sk-test-123" for h in headers)
    config.write_text(yaml.safe_dump({"model": {"device": "cuda:7"}}))
    result = invoke("--taxonomy", str(tax), "--out", str(tmp_path / "q.jsonl"), "--llm", "tiny:planner",
                    "--config", str(config))  # fmt: skip
    assert isinstance(result.exception, ConfigError) and "model.device" in str(result.exception)


def test_concurrency_bounds_calls_in_flight_and_a_spoilt_stored_reply_is_asked_again(tmp_path: Path) -> None:
    import threading

    tax = taxonomy_file(tmp_path / "tax.yaml", domains=2, subs=3)
    script, lock = teacher(), threading.Lock()
    state = {"now": 0, "most": 0}

    def counted(index: int, call: Call) -> Reply:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.02)  # lets calls overlap; nothing is asserted about time
        with lock:
            state["now"] -= 1
        return script(index, call)

    out = tmp_path / "p.jsonl"
    with ScriptedServer(counted) as server:
        run_cli(server, tax, out, "--subcategory-concurrency", "2")
    assert 1 <= state["most"] <= 2 and len(rows(out)) == 24
    first = out.read_bytes()
    stored = tmp_path / "p.jsonl.teacher" / "domain-1" / "sub-1-2" / "prompts-001.json"
    record = json.loads(stored.read_text())
    stored.write_text(json.dumps({**record, "replies": ["<answer>{'prompts': []}</answer>"]}))
    with ScriptedServer(teacher()) as server:
        run_cli(server, tax, out)
        assert len(server.posts()) == 1
    assert out.read_bytes() == first
