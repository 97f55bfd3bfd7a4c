"""The changed-settings refusal of a resumed batch: each differing setting named, the way out (`--fresh`,
which moves the earlier work aside and never deletes it, or another `--out`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import InputError
from interleave_thinker.core.run_folder import LOCK_FILE
from interleave_thinker.core.settings_diff import MAX_LINES, MAX_VALUE_CHARS, setting_differences, shown
from interleave_thinker.runtime.resume import aside_path, merged_manifest, move_aside
from tests.helpers.batch import batch_command
from tests.helpers.common import REPO, write

SETTINGS = {
    "planner": "openai:http://127.0.0.1:1/v1#scripted",
    "loop": {"max_attempts": 3, "seed_base": 7, "planner_fallback": "error"},
    "generation": {"width": 64, "height": 64},
}


def changed(**loop: object) -> dict[str, object]:
    return {**SETTINGS, "loop": {**SETTINGS["loop"], **loop}}  # type: ignore[dict-item]


def test_differences_are_one_line_per_dotted_key_old_to_new() -> None:
    new = {**changed(max_attempts=1, seed_base=8), "critic": "tiny:critic"}
    assert setting_differences(SETTINGS, new) == [
        'critic: (not set) -> "tiny:critic"',
        "loop.max_attempts: 3 -> 1",
        "loop.seed_base: 7 -> 8",
    ]
    assert setting_differences(SETTINGS, json.loads(json.dumps(SETTINGS))) == []
    assert setting_differences({"loop": {"a": [1, 2]}}, {"loop": {}}) == [
        "loop: (not set) -> {}",
        "loop.a: [1, 2] -> (not set)",
    ]


def test_values_are_bounded_and_secrets_never_shown() -> None:
    long = "x" * 500
    line = setting_differences({"planner": long}, {"planner": "y"})[0]
    assert len(line) < 2 * MAX_VALUE_CHARS + 20 and line.endswith('-> "y"')
    spec = "openai:https://user:hunter2@host/v1?key=sk-live-123&x=1#m"
    assert "hunter2" not in shown("planner", spec) and "sk-live-123" not in shown("planner", spec)
    assert shown("remote.api_key", "sk-abc") == '"***"' and shown("remote.token", None) == "null"
    assert "\x07" not in shown("a", "bell\x07") and "\x85" not in shown("a", "nel\x85")
    many = setting_differences({f"k{i:02}": i for i in range(30)}, {})
    assert len(many) == MAX_LINES + 1 and many[-1] == "... and 10 more"


def test_the_refusal_lists_the_changes_and_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "out" / "batch.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"input": "in", "ids": ["a"], "settings": SETTINGS}), encoding="utf-8")
    os.utime(path, (0, 0))  # 1970-01-01 00:00:00 UTC: the aside folder's name
    with pytest.raises(InputError) as caught:
        merged_manifest(path, {"input": "in", "ids": ["a"], "settings": changed(seed_base=8)}, resume=True)
    message = str(caught.value)
    assert message.splitlines() == [
        f"{path} was written with other settings (recorded -> given):",
        "  loop.seed_base: 7 -> 8",
        "Resume with the same options, or run it with --fresh to move the earlier one aside "
        f"(to {tmp_path / 'out.old-19700101-000000'}) and start over, or use another --out.",
    ]
    with pytest.raises(
        InputError, match="already holds a batch; use --resume to continue it, or run it with --fresh"
    ):
        merged_manifest(path, {"input": "in", "ids": ["a"], "settings": SETTINGS}, resume=False)


def test_fresh_moves_everything_but_the_lock_aside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert move_aside(out) is None  # nothing there: nothing to move
    (out / "requests" / "a").mkdir(parents=True)
    (out / "requests" / "a" / "trace.json").write_text("{}", encoding="utf-8")
    (out / "batch.json").write_text("{}", encoding="utf-8")
    (out / LOCK_FILE).write_text("123\n", encoding="utf-8")
    os.utime(out / "batch.json", (0, 0))
    (tmp_path / "out.old-19700101-000000").mkdir()  # a taken name gets a suffix
    expected = aside_path(out)
    assert expected.name == "out.old-19700101-000000-2"
    assert move_aside(out) == expected
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    assert (expected / "requests" / "a" / "trace.json").read_text(encoding="utf-8") == "{}"


@pytest.mark.slow
def test_a_typo_then_the_corrected_command_then_fresh(servers: dict[str, str], tmp_path: Path) -> None:
    inputs = write(tmp_path / "in.jsonl", json.dumps({"id": "cat", "prompt": "How to draw a cat?"}) + "\n")
    out = tmp_path / "runs" / "eval"
    command = batch_command(servers, inputs, out)
    typo = subprocess.run(
        [*command, "--max-attempts", "11", "--seed", "70"], cwd=REPO, capture_output=True, text=True
    )
    assert typo.returncode == 0, typo.stderr
    first_trace = (out / "requests" / "cat" / "trace.json").read_text(encoding="utf-8")

    corrected = [*command, "--max-attempts", "1", "--seed", "7"]
    refused = subprocess.run(corrected, cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 2, refused.stderr
    listed = [line.strip() for line in refused.stderr.splitlines() if line.startswith("  ")]
    assert listed == ["loop.max_attempts: 11 -> 1", "loop.seed_base: 70 -> 7"]
    named = re.search(r"\(to (\S+)\)", refused.stderr)
    assert named is not None and "--fresh" in refused.stderr and "another --out" in refused.stderr

    fresh = subprocess.run([*corrected, "--fresh"], cwd=REPO, capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr
    aside = Path(named[1])
    assert f"moved the earlier contents of {out} to {aside}" in fresh.stderr
    assert (aside / "requests" / "cat" / "trace.json").read_text(encoding="utf-8") == first_trace
    assert json.loads((aside / "batch.json").read_text())["settings"]["loop"]["seed_base"] == 70
    new_manifest = json.loads((out / "batch.json").read_text())
    assert new_manifest["settings"]["loop"]["seed_base"] == 7
    assert json.loads((out / "summary.json").read_text())["requests"]["total"] == 1


def test_a_changed_input_is_refused_naming_the_first_difference_or_accepted_and_run_again(
    servers: dict[str, str], tmp_path: Path
) -> None:
    """Issue 41, item 10: a rerun into the same --out with a changed input file used to say
    "2 succeeded (1 already finished)" and go on, mixing two inputs in one folder."""
    rows = [{"id": "a", "prompt": "Draw a cat"}, {"id": "b", "prompt": "Draw a dog"}]
    inputs = write(tmp_path / "in.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    args = batch_command(servers, inputs, out)[3:]  # the words after `python -m interleave_thinker`

    def batch(*extra: str) -> Any:
        return CliRunner().invoke(app, [*args, *extra], env={"COLUMNS": "400"})

    assert batch().exit_code == 0
    first_b = (out / "requests" / "b" / "trace.json").read_text(encoding="utf-8")
    rows[0]["prompt"] = "Draw a tiger"
    rows.append({"id": "c", "prompt": "Draw a cow"})
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.utime(out / "batch.json", (0, 0))
    refused = batch()
    assert isinstance(refused.exception, InputError)  # `main` turns it into exit 2 with this line
    message = str(refused.exception)
    assert (
        f"{out / 'batch.json'}: request 'a' differs from the one this batch started with: its prompt changed"
        in message
    )
    assert "--accept-changed-input" in message and "--fresh" in message
    assert not (out / "requests" / "c").exists()  # nothing ran

    accepted = batch("--accept-changed-input")
    assert accepted.exit_code == 0, accepted.output
    trace_a = json.loads((out / "requests" / "a" / "trace.json").read_text(encoding="utf-8"))
    assert trace_a["request"]["text"] == rows[0]["prompt"]
    assert (out / "requests" / "b" / "trace.json").read_text(encoding="utf-8") == first_b  # kept as it was
    aside = tmp_path / "out.old-19700101-000000" / "requests" / "a" / "trace.json"
    assert json.loads(aside.read_text(encoding="utf-8"))["request"]["text"] == "Draw a cat"
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [(r["id"], r["prompt"]) for r in results] == [(r["id"], r["prompt"]) for r in rows]
    assert batch().exit_code == 0  # the folder now records the new input: a plain resume goes on
