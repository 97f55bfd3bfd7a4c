"""No silence and no noise (issue 33 item 3): phase lines with their times before `train sft`'s bar and
while `eval generate` loads off a terminal, bars whose figures fit 80 columns, and a dead generator's
retries announced with their wait and its failure reported once."""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from interleave_thinker.cli.progress import counter_bar
from tests.conftest import REPO, shared_path
from tests.helpers.common import grpo_config

SECONDS = r"\d+\.\d s"


def cli_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command with stdout and stderr pipes (not a terminal) at 80 columns."""
    env = {**os.environ, "COLUMNS": "80", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-m", "interleave_thinker", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )


@pytest.mark.slow
def test_train_sft_says_each_phase_before_the_bar_with_its_time(tmp_path: Path) -> None:
    from interleave_thinker.cli.main import app

    runner = CliRunner()
    made = runner.invoke(app, ["data", "synth", "--role", "critic", "--n", "4", "--out", str(tmp_path / "d")])
    assert made.exit_code == 0, made.output
    args = ["train", "sft", "--config", str(REPO / "configs" / "sft_critic_tiny.yaml"), "--max_steps", "1"]
    args += ["--set", f"data.train=[{tmp_path / 'd' / 'critic_sft.json'}]", "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    lines = result.stderr.splitlines()
    phases = [
        "importing TRL",
        "reading the training data",
        "loading model tiny:critic",
        "building the trainer (4 rows)",
    ]
    for phase in phases:
        assert f"{phase} ..." in lines
        assert any(line.startswith(f"{phase}: ") and line.endswith(" s") for line in lines), phase
    starts = [lines.index(f"{phase} ...") for phase in phases]
    assert starts == sorted(starts)  # in the order the run builds them
    assert "trained 1 steps" in result.stdout


@pytest.mark.slow
def test_eval_generate_off_a_terminal_says_it_loads_and_its_bar_fits_80_columns(tmp_path: Path) -> None:
    data = str(shared_path("benchmarks", "wise"))
    result = cli_process(
        *("eval", "generate", "wise", "--data", data, "--limit", "2", "--mode", "base"),
        *("--preset", "tiny", "--out", str(tmp_path / "out")),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert lines[0] == "loading models (base mode)…"
    assert any(line.startswith("loading models (base mode): done in ") for line in lines)
    (bar,) = [line for line in lines if line.startswith("items (ok 2, failed 0)")]
    assert len(bar) <= 80 and " 2/2 " in bar and "…" not in bar


def test_counter_bar_keeps_its_figures_whole_at_80_columns() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    for label in (
        "items (ok 1000, failed 1000)",
        "requests (ok 1000, failed 1000) calls planner:12 critic:9",
    ):
        bar = counter_bar(console)
        bar.add_task(label, total=1000, completed=500)
        with bar:
            pass
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    figures = [line for line in lines if "500/1000 0:00:00 -:--:--" in line]
    assert len(figures) == 2 and lines[0].startswith("items (ok 1000, failed 1000) ")
    assert "planner:12 critic:9" in " ".join(lines)  # the long label wraps onto a second line, whole


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_a_dead_generator_announces_each_retry_and_fails_once(tmp_path: Path) -> None:
    (tmp_path / "fast.yaml").write_text("remote:\n  max_retries: 2\n  backoff_base: 0.05\n  timeout: 2\n")
    dead = f"http://127.0.0.1:{closed_port()}"
    result = cli_process(
        *("run", "draw a cat", "--preset", "tiny", "--generator", f"http:{dead}"),
        *("--config", str(tmp_path / "fast.yaml"), "--out", str(tmp_path / "run")),
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    retries = [line for line in lines if "; retry " in line]
    # three attempts (loop.max_attempts), each with its two retries, each retry with its wait
    assert len(retries) == 6 and all(line.startswith("WARNING ") for line in retries)
    retry = re.compile(
        rf"^WARNING \S+: http:{dead}#\w+: {dead}: ConnectError: .+; retry ([12])/2 in {SECONDS}$"
    )
    assert sorted(m.group(1) for m in map(retry.match, retries) if m) == ["1"] * 3 + ["2"] * 3
    (error,) = [line for line in lines if line.startswith("error: ")]
    assert error.count("3 tries failed") == 1 and "(3 attempts)" in error


@pytest.mark.slow
def test_grpo_names_its_phases_in_order(tmp_path: Path) -> None:
    import contextlib
    from collections.abc import Iterator

    from interleave_thinker.train.grpo import build_grpo_trainer

    config = grpo_config(
        tmp_path / "grpo",
        "critic",
        "tiny:critic",
        {"synthetic": 2},
        reward={"stepwise": False},
        training={"max_steps": 1},
    )
    seen: list[str] = []

    @contextlib.contextmanager
    def phase(text: str) -> Iterator[None]:
        seen.append(text)
        yield

    build_grpo_trainer(config, phase=phase)
    assert seen == [  # the rewards (and their preflight) first: a dead judge stops before TRL loads
        "setting up the rewards",
        "importing TRL",
        "loading model tiny:critic",
        "building the prompts",
        "building the trainer (2 prompts)",
    ]
