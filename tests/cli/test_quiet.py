"""`batch --quiet` prints no line per succeeded request (only failures are warnings), in a real
subprocess against served doubles on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.server import LocalServer
from tests.helpers.common import run_cli


def quiet_batch(tmp_path: Path, name: str, generator: str) -> subprocess.CompletedProcess[str]:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"draw {i}"}) + "\n" for i in range(3)))
    (tmp_path / "fast.yaml").write_text("remote:\n  max_retries: 0\n  timeout: 2\n")
    with LocalServer(scripted_models.handler("chat", scripted_models.State())) as planner:
        vlm = f"openai:{planner.url}/v1#scripted"
        args = ["batch", "--input", str(inputs), "--out", str(tmp_path / name), "--preset", "tiny", "--quiet"]
        args += ["--planner", vlm, "--critic", vlm, "--generator", generator]
        args += ["--config", str(tmp_path / "fast.yaml")]
        return run_cli("", *args, timeout=300, env={"OPENAI_API_KEY": "k"})


def test_quiet_prints_failures_only(tmp_path: Path) -> None:
    with LocalServer(scripted_models.handler("edit", scripted_models.State())) as generator:
        ok = quiet_batch(tmp_path, "ok", f"http:{generator.url}")
    down = quiet_batch(tmp_path, "down", "http:127.0.0.1:9")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "3 succeeded, 0 failed" in ok.stderr
    assert "WARNING" not in ok.stderr
    assert "succeeded" not in ok.stderr.replace("3 succeeded, 0 failed", "")
    quiet_lines = [
        line for line in down.stderr.splitlines() if line.startswith("WARNING interleave_thinker.batch")
    ]
    assert sorted(quiet_lines) == [f"WARNING interleave_thinker.batch: request r{i} failed" for i in range(3)]
