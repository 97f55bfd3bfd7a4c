"""The command line: clear one-line errors with exit code 2 on bad input, nothing written; a full tiny run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "interleave_thinker", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=300,
    )


def assert_usage_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_missing_image(tmp_path: Path) -> None:
    result = cli(
        "run", "<image> continue", "--image", "nope.png", "--preset", "tiny", "--out", "out", cwd=tmp_path
    )
    assert_usage_error(result, "error:", "nope.png", "does not exist")
    assert not (tmp_path / "out").exists()


def test_unreadable_image(tmp_path: Path) -> None:
    (tmp_path / "bad.png").write_text("not a png")
    result = cli(
        "run", "<image> continue", "--image", "bad.png", "--preset", "tiny", "--out", "out", cwd=tmp_path
    )
    assert_usage_error(result, "bad.png", "cannot be read as an image")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "n_images", "needle"),
    [
        ("<image> <image> next", 1, "2 <image> marker(s) but 1"),
        ("<image> next", 2, "1 <image> marker(s) but 2"),
    ],
)
def test_marker_mismatch(tmp_path: Path, text: str, n_images: int, needle: str) -> None:
    args = []
    for i in range(n_images):
        Image.new("RGB", (64, 64)).save(tmp_path / f"{i}.png")
        args += ["--image", f"{i}.png"]
    result = cli("run", text, *args, "--preset", "tiny", "--out", "out", cwd=tmp_path)
    assert_usage_error(result, needle)
    assert not (tmp_path / "out").exists()


def test_unknown_preset(tmp_path: Path) -> None:
    result = cli("run", "a cat", "--preset", "huge", cwd=tmp_path)
    assert result.returncode == 2
    assert "huge" in result.stderr and "official" in result.stderr
    config = tmp_path / "c.yaml"
    config.write_text("preset: huge\n")
    assert_usage_error(
        cli("run", "a cat", "--config", str(config), cwd=tmp_path), "Unknown preset 'huge'", "tiny"
    )


def test_missing_checkpoint_path(tmp_path: Path) -> None:
    result = cli(
        "run",
        "a cat",
        "--preset",
        "tiny",
        "--planner",
        "transformers:./no/such/ckpt",
        "--out",
        "out",
        cwd=tmp_path,
    )
    assert_usage_error(result, "./no/such/ckpt", "does not exist", "--preset tiny")
    assert not (tmp_path / "out").exists()


def test_invalid_config_key(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("preset: tiny\nloop:\n  max_atempts: 4\n")
    result = cli("run", "a cat", "--config", str(config), "--out", "out", cwd=tmp_path)
    assert_usage_error(result, "c.yaml", "unknown key 'loop.max_atempts'")
    assert not (tmp_path / "out").exists()


def test_unknown_backend_kind(tmp_path: Path) -> None:
    result = cli("run", "a cat", "--preset", "tiny", "--generator", "magic:thing", cwd=tmp_path)
    assert_usage_error(result, "Unknown backend kind 'magic'", "diffusers")


@pytest.mark.slow
def test_tiny_run_end_to_end(tmp_path: Path) -> None:
    Image.new("RGB", (64, 64), (0, 200, 0)).save(tmp_path / "in.png")
    result = cli(
        "run",
        "<image> Continue this picture",
        "--image",
        "in.png",
        "--preset",
        "tiny",
        "--planner",
        "tiny:planner",  # the random (untrained) tiny planner: exercises the single-step fallback
        "--critic",
        "tiny:critic",
        "--out",
        "run",
        "--max-attempts",
        "2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(Path("run") / "index.html")
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert trace["schema_version"] == 4 and trace["status"] == "succeeded"
    assert trace["planner"]["plan"]["fallback"] is True and len(trace["planner"]["raw_replies"]) == 3
    attempts = trace["steps"][0]["attempts"]
    assert [a["seed"] for a in attempts] == [100, 101]
    assert attempts[0]["before_image"] == "input_1.png"
    images = sorted(p.name for p in (tmp_path / "run" / "images").iterdir())
    assert images == ["input_1.png", "step01_attempt0.png", "step01_attempt1.png"]
    with Image.open(tmp_path / "run" / "images" / "step01_attempt1.png") as produced:
        assert produced.size == (64, 64)
    html = (tmp_path / "run" / "index.html").read_text()
    assert "tiny stand-in models" in html and "single step" in html
    assert (tmp_path / "run" / "document.md").read_text().startswith("# &lt;image&gt; Continue this picture")
    again = cli("run", "x", "--preset", "tiny", "--out", "run", cwd=tmp_path)
    assert_usage_error(again, "already holds a run")


@pytest.mark.slow
def test_demo_shows_a_real_plan_and_verdicts(tmp_path: Path) -> None:
    """What `make demo` runs: the format-trained tiny planner and critic write parsable replies."""
    from interleave_thinker.tiny.format_trained import ensure_format_trained_tiny

    ensure_format_trained_tiny()  # built here, once, without the command's timeout (minutes on a busy CI)
    result = cli("run", "How to draw a cat step by step?", "--preset", "tiny", "--out", "demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    trace = json.loads((tmp_path / "demo" / "trace.json").read_text())
    plan = trace["planner"]["plan"]
    assert plan["fallback"] is False
    image_steps = [s for s in plan["steps"] if s["prompt"] or s["instruction"]]
    assert len(image_steps) >= 2
    verdicts = [a["verdict"] for s in trace["steps"] for a in s["attempts"] if a["verdict"] is not None]
    assert len(verdicts) >= 1
    assert (tmp_path / "demo" / "index.html").read_text().count('class="step"') == len(plan["steps"])
    # A line per phase with its time, in order (off a terminal no bar is drawn: these lines are the progress).
    lines = result.stderr.splitlines()
    total = len(plan["steps"])
    phases = [r"loading models \(tiny preset\): done in", "planned in"]
    phases += [rf"  step {n}/{total} done in" for n in range(1, total + 1)]
    found = [
        next((i for i, ln in enumerate(lines) if re.fullmatch(rf"{p} \d+\.\d s", ln)), -1) for p in phases
    ]
    assert -1 not in found and found == sorted(found), (phases, found, result.stderr)
    # no warning or line said twice (the hub's retries and a library's FutureWarning were, once)
    assert [ln for ln in set(lines) if ln.strip() and lines.count(ln) > 1] == [], result.stderr
    assert "Warning" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["run"], ["[default: official]", "[default:", "--critic-on-last-attempt"]),
        (["batch"], ["[default: official]", "--critic-on-last-attempt", "--per-backend-limit"]),
        (["train", "grpo"], ["[default: the config's role]"]),
        (["data", "validate"], ["[default: the file's folder]"]),
    ],
)
def test_help_shows_defaults_and_shared_options(command: list[str], expected: list[str]) -> None:
    """Rich markup would swallow an unescaped ``[default: ...]``; run and batch share their pipeline options."""
    from typer.testing import CliRunner

    from interleave_thinker.cli.main import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    for text in expected:
        assert text in result.output, text


def test_version_is_printed(tmp_path: Path) -> None:
    from interleave_thinker import __version__

    result = cli("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"interleave-thinker {__version__}"


def test_serve_vlm_takes_vllms_served_model_name_and_the_old_spelling_once(tmp_path: Path) -> None:
    from interleave_thinker.cli.serve_options import renamed
    from interleave_thinker.core.errors import ConfigError

    assert renamed("--served-name", None, "--served-model-name", "m") == "m"
    with pytest.raises(ConfigError, match="give only --served-model-name"):
        renamed("--served-name", "a", "--served-model-name", "b")
    both = cli(
        "serve",
        "vlm",
        "--model",
        "tiny:planner",
        "--served-name",
        "a",
        "--served-model-name",
        "b",
        cwd=tmp_path,
    )
    assert_usage_error(both, "--served-name is the old spelling of --served-model-name")
    shown = cli("serve", "vlm", "--help", cwd=tmp_path).stdout
    assert "--served-model-name" in shown and "--served-name " not in shown


def test_serve_generator_help_lists_its_routes(tmp_path: Path) -> None:
    shown = cli("serve", "generator", "--help", cwd=tmp_path).stdout
    for route in ("/edit", "/v1/images/generations", "/v1/images/edits", "/v1/models", "/health", "/metrics"):
        assert route in shown, route
