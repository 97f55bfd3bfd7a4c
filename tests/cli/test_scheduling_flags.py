"""The commands on the batch scheduler take one set of scheduling flags, and read them the same way."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from interleave_thinker.cli.main import app
from interleave_thinker.core.errors import ConfigError
from interleave_thinker.runtime.store import RunStore
from interleave_thinker.testing.doubles.judge import judge_server
from tests.conftest import shared_path

SCHEDULED = (("batch",), ("data", "generate"), ("eval", "generate"), ("eval", "run"))
SCHEDULING = {
    "concurrency": 16,
    "per_backend_limit": None,
    "micro_batch": None,
    "shard": None,
    "limit": None,
    "resume": True,
    "retry_failed": True,
    "quiet": False,
    "fresh": False,
    "accept_changed_input": False,
}
"""Every scheduling flag and its default, as the commands took them before they shared one declaration."""


def command(path: tuple[str, ...]) -> Any:
    """The click command typer builds (typer ships its own click, hence no isinstance checks)."""
    found: Any = typer.main.get_command(app)
    for name in path:
        found = found.commands[name]
    return found


def scheduling_params(path: tuple[str, ...]) -> dict[str, tuple[Any, ...]]:
    """name -> (spellings, default, help, hidden) of the command's scheduling flags."""
    return {
        p.name: (tuple(p.opts), tuple(p.secondary_opts), p.default, getattr(p, "help", None), p.hidden)
        for p in command(path).params
        if p.param_type_name == "option" and p.name in SCHEDULING
    }


def test_scheduled_commands_take_the_identical_scheduling_flags() -> None:
    first = scheduling_params(SCHEDULED[0])
    assert set(first) == set(SCHEDULING)
    assert {name: spec[2] for name, spec in first.items()} == SCHEDULING
    assert first["retry_failed"][:2] == (("--retry-failed",), ("--no-retry-failed",))
    assert all(spec[3] and not spec[4] for spec in first.values())  # each has help and is shown
    for path in SCHEDULED[1:]:
        assert scheduling_params(path) == first, " ".join(path)


def _eval_generate(data: Path, out: Path, *extra: str) -> str:
    args = ["eval", "generate", "ueval", "--data", str(data), "--out", str(out), "--mode", "base",
            "--preset", "tiny", "--quiet", *extra]  # fmt: skip
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


@pytest.mark.slow  # two runs with the tiny generator (~13 s here)
def test_eval_generate_reruns_a_failed_item_only_with_retry_failed(tmp_path: Path) -> None:
    data = tmp_path / "ueval.json"
    data.write_text(json.dumps([{"id": "a", "prompt": "a red cube", "task": "space"}]))
    out = tmp_path / "run"
    _eval_generate(data, out)
    journal = out / "journal.jsonl"
    RunStore(out).mark("a", "failed", "a failure the run should take again")
    lines = journal.read_text().count("\n")

    _eval_generate(data, out, "--no-retry-failed")
    assert journal.read_text().count("\n") == lines and RunStore(out).finished() == {"a": "failed"}

    output = _eval_generate(data, out, "--retry-failed")
    assert "no model loaded" not in output
    assert journal.read_text().count("\n") == lines + 1 and RunStore(out).finished() == {"a": "succeeded"}
    assert json.loads((out / "eval.json").read_text())["written"] == 1


@pytest.mark.slow  # two items with the tiny generator, judged by a local double (~6 s here)
def test_eval_run_scores_the_shard_it_generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLEAVE_THINKER_EVAL_PROMPTS", str(shared_path("reference", "eval")))
    data, out = str(shared_path("benchmarks", "wise")), tmp_path / "wise"
    with judge_server(lambda body: "Score: 1") as judge:
        args = ["eval", "run", "wise", "--data", data, "--out", str(out), "--judge", f"openai:{judge.url}#j",
                "--limit", "4", "--shard", "1/2", "--preset", "tiny", "--mode", "base", "--quiet"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, (result.output, result.exception)
        assert len(judge.bodies) == 2
    assert sorted(RunStore(out).traces()) == ["2", "4"]  # items 1..4 (--limit), every 2nd from the 2nd
    summary = json.loads((out / "scores-wise" / "summary.json").read_text())
    assert summary["counts"]["items"] == 2 and summary["slice"]["items"] == 2


@pytest.mark.parametrize("command", ["batch", "data generate"])
def test_ray_without_the_package_is_one_line_naming_the_extra(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "prompt": "draw"}\n')
    args = [*command.split(), "--input", str(source), "--out", str(tmp_path / "out"), "--preset", "tiny"]
    judge = ["--judge", "tiny:judge"] if command == "data generate" else []
    result = CliRunner().invoke(app, [*args, *judge, "--ray", "auto"])
    assert isinstance(result.exception, ConfigError)  # main() prints it as one line, exit 2
    assert str(result.exception) == "--ray needs Ray: pip install 'interleave-thinker[ray]'"
    assert not (tmp_path / "out").exists()  # refused before anything is written
