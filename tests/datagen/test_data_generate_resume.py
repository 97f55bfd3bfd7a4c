"""`data generate` killed with SIGKILL mid-run, then resumed: the same traces and execution records as an
uninterrupted run (teachers: the scripted servers of test_data_generate.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.server import LocalServer
from tests.helpers.common import REPO
from tests.helpers.datagen import Teachers, records, write_config


@pytest.mark.slow
def test_sigkill_then_resume_gives_identical_records(
    servers: tuple[Teachers, LocalServer, scripted_models.State], tmp_path: Path
) -> None:
    teachers, edit, state = servers
    config = write_config(tmp_path / "teacher.json", teachers, edit)
    rows = [{"id": f"r{i}", "prompt": f"Story {i} [[scene {i} hard; scene {i} end]]"} for i in range(6)]
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    command = [sys.executable, "-m", "interleave_thinker", "data", "generate", "--config", str(config)]
    command += ["--input", str(inputs), "--concurrency", "2", "--quiet", "--out"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}

    reference = tmp_path / "reference"
    subprocess.run([*command, str(reference)], env=env, check=True, capture_output=True, timeout=120)

    out = tmp_path / "killed"
    mark = len(state.log)
    proc = subprocess.Popen(
        [*command, str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    while len(state.log) - mark < 8 and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(state.log) - mark < 6 * 3  # killed mid-run
    final = subprocess.run([*command, str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr
    assert records(out) == records(reference) and len(records(out)) == 6
    assert not list(out.rglob(".*.tmp"))
