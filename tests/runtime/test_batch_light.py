"""A batch (or a run) whose backends are all served loads no model library (torch, transformers, diffusers).

Each batch runs in a fresh interpreter (the test process itself may have loaded torch) against real
HTTP servers on 127.0.0.1: a scripted OpenAI chat server for planner and critic, and a generator of
each served kind. Start-up time and peak RSS are printed, not asserted (``benchmarks/bench_batch_light.py``
measures them with the goals beside).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.omni import OmniServer, OmniState, scripted_engine
from interleave_thinker.testing.doubles.openai_images import openai_images_server
from interleave_thinker.testing.doubles.server import Handle, LocalServer, Reply, Request

PROBE = """
import json, re, sys
from pathlib import Path
from interleave_thinker.cli.main import app
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    heavy = sorted(m for m in ("torch", "transformers", "diffusers", "ray") if m in sys.modules)
    status = Path("/proc/self/status").read_text() if Path("/proc/self/status").exists() else ""
    peak = re.search(r"VmHWM:\\s+(\\d+)", status)  # not ru_maxrss, which survives exec
    print(json.dumps({"heavy": heavy, "rss_mb": round(int(peak.group(1)) / 1024) if peak else None}))
"""
KEY = "sk-light-test"


def noting_first(handle: Handle, first: list[float]) -> Handle:
    """``handle``, appending the wall-clock time of the first POST to ``first``."""

    def note(request: Request) -> Reply | None:
        if request.method == "POST" and not first:
            first.append(time.time())
        return handle(request)

    return note


def run_probe(args: list[str]) -> dict[str, Any]:
    """``interleave-thinker ARGS`` in a fresh interpreter (it must exit 0): the modules and RSS PROBE saw."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPENAI_API_KEY": KEY},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@contextmanager
def generators() -> Iterator[dict[str, str]]:
    """One running generator of each served kind, as the spec that drives it."""
    with ExitStack() as stack:
        edit = stack.enter_context(LocalServer(scripted_models.handler("edit", scripted_models.State())))
        omni = stack.enter_context(OmniServer(OmniState(engine=scripted_engine)))
        _, images_url = stack.enter_context(openai_images_server(KEY))
        yield {
            "http": f"http:{edit.url}",
            "vllm-omni": f"vllm-omni:{omni.url}#{OmniState.model_name}",
            "openai-images": f"openai-images:gpt-image-1@{images_url}",
        }


@pytest.mark.parametrize("kind", ["http", "vllm-omni", "openai-images"])
def test_served_only_batch_imports_no_model_library(kind: str, tmp_path: Path) -> None:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"draw {i}"}) + "\n" for i in range(4)))
    first: list[float] = []
    chat = noting_first(scripted_models.handler("chat", scripted_models.State()), first)
    with LocalServer(chat) as planner, generators() as specs:
        args = ["batch", "--input", str(inputs), "--out", str(tmp_path / "out"), "--preset", "tiny"]
        args += [
            "--planner",
            f"openai:{planner.url}/v1#scripted",
            "--critic",
            f"openai:{planner.url}/v1#scripted",
        ]
        args += ["--generator", specs[kind], "--concurrency", "4", "--quiet"]
        start = time.time()
        probe = run_probe(args)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["requests"]["succeeded"] == 4
    assert probe["heavy"] == []
    assert len(first) == 1
    print(f"{kind}: first request after {first[0] - start:.2f}s, peak RSS {probe['rss_mb']} MB")


def test_served_only_run_imports_no_model_library(tmp_path: Path) -> None:
    """`run` quiets diffusers only when the generator is local, so served backends alone load no torch."""
    chat = scripted_models.handler("chat", scripted_models.State())
    edit = scripted_models.handler("edit", scripted_models.State())
    with LocalServer(chat) as planner, LocalServer(edit) as generator:
        vlm = f"openai:{planner.url}/v1#scripted"
        args = ["run", "draw a cat", "--out", str(tmp_path / "run"), "--preset", "tiny"]
        args += ["--planner", vlm, "--critic", vlm, "--generator", f"http:{generator.url}"]
        heavy = run_probe(args)["heavy"]
    assert heavy == []
    assert json.loads((tmp_path / "run" / "trace.json").read_text())["status"] == "succeeded"
