"""A bad backend spec answers at once: exit 2, one line naming the flag, before torch or diffusers load.

The installed console command is run in a subprocess, as a user runs it; the elapsed time is printed
(not asserted: the machine may be busy). A second check asserts what makes it fast: no model library
was imported when the error was raised.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

CONSOLE = Path(sys.executable).with_name("interleave-thinker")
HEAVY = ("torch", "diffusers", "transformers", "trl")
GRPO_CONFIG = """output_dir: out
model: {name_or_path: tiny}
data: {synthetic: 2}
training: {per_device_train_batch_size: 2, num_generations: 2}
reward: {judge: "nope:judge"}
"""

CASES = {
    "run": (["run", "a cat", "--planner", "nope:bar"], "--planner 'nope:bar'"),
    "batch": (["batch", "--input", "in.jsonl", "--out", "o", "--generator", "magic:x"], "--generator"),
    "eval generate": (["eval", "generate", "wise", "--data", "d", "--out", "o", "--critic", "x:y"], "--critic"),
    "demo": (["demo", "--generator", "nope:x"], "--generator 'nope:x'"),
    "judge": (["judge", "--before", "a.png", "--after", "b.png", "--instruction", "i", "--judge", "n:x"], "--judge"),
    "reward": (["reward", "--input", "r.jsonl", "--generator", "n:x", "--judge", "tiny:", "--out", "o"], "--generator"),
    "data build": (["data", "build", "--input", ".", "--out", "o", "--judge", "nope:x"], "--judge 'nope:x'"),
    "data stats": (["data", "stats", "--input", ".", "--judge", "nope:x"], "--judge 'nope:x'"),
    "serve vlm": (["serve", "vlm", "--model", "nope:x"], "--model 'nope:x'"),
    "serve generator": (["serve", "generator", "--generator", "nope:x"], "--generator 'nope:x'"),
    "eval score": (["eval", "score", "wise", "--outputs", "o", "--data", "d", "--judge", "n:x", "--out", "o"], "--judge"),
    "train grpo": (["train", "grpo", "--config", "grpo.yaml"], "reward.judge"),
}  # fmt: skip


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "grpo.yaml").write_text(GRPO_CONFIG)
    return tmp_path


@pytest.mark.parametrize("name", list(CASES))
def test_bad_spec_exits_2_at_once(name: str, workdir: Path) -> None:
    args, flag = CASES[name]
    start = time.perf_counter()
    result = subprocess.run(
        [str(CONSOLE), *args],
        capture_output=True,
        text=True,
        cwd=workdir,
        env={**os.environ, "COLUMNS": "300"},
        timeout=120,
    )
    elapsed = time.perf_counter() - start
    print(f"{name}: bad spec answered in {elapsed:.2f} s")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and flag in lines[0], lines[0]
    assert "Unknown backend kind" in lines[0] or "needs a target" in lines[0], lines[0]
    assert not (workdir / "o").exists()


PROBE = """
import sys
from interleave_thinker.cli.main import main
sys.argv = ["interleave-thinker", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    heavy = sorted(m for m in {heavy!r} if m in sys.modules)
    print("exit", exc.code, "heavy", ",".join(heavy) or "none")
"""


@pytest.mark.parametrize("name", ["run", "batch", "demo", "judge", "serve vlm", "train grpo"])
def test_no_model_library_is_imported_before_the_spec_check(name: str, workdir: Path) -> None:
    args, _ = CASES[name]
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        cwd=workdir,
        timeout=120,
    )
    assert result.stdout.strip().splitlines()[-1] == "exit 2 heavy none", result.stdout + result.stderr


def test_empty_target_is_refused_but_tiny_may_be_empty() -> None:
    from interleave_thinker.cli.specs import check_spec
    from interleave_thinker.core.errors import ConfigError

    check_spec("--generator", "tiny:", "image")
    check_spec("--judge", "openai:http://127.0.0.1:1/v1", "vlm")
    with pytest.raises(ConfigError, match="--judge 'openai:': the openai backend needs a target"):
        check_spec("--judge", "openai:", "vlm")
    with pytest.raises(ConfigError, match="--planner 'qwen': no backend kind"):
        check_spec("--planner", "qwen", "vlm")
    with pytest.raises(ConfigError, match="Unknown backend kind 'diffusers'; known kinds: gemini"):
        check_spec("--critic", "diffusers:x", "vlm")
