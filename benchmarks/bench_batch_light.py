"""Start-up time and peak memory of a batch whose backends are all served (issue 12's acceptance).

A fresh interpreter runs ``interleave-thinker batch`` against servers on 127.0.0.1: a scripted OpenAI
chat server for planner and critic (0.2 s a call) and the vLLM-Omni stand-in as generator (1 s a call,
1024² images, then 256² to show the share of decoded images), ``--concurrency 16`` so that 16
requests are in flight. Printed: the time from starting the process to the first request a server
sees, the process's peak RSS, the most generator calls in flight at once, and which model libraries
were imported, each with its goal beside.
(The stand-in's images are flat colours: their PNGs are small, a real model's are ~1.5 MB. A request
in flight keeps its images as the PNG bytes it wrote, decoded only the latest one: ``runtime/recorder.py``.)
Run: python benchmarks/bench_batch_light.py [REQUESTS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from PIL import Image

from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.omni import OmniServer, OmniState, scripted_engine
from interleave_thinker.testing.doubles.server import LocalServer, Reply, Request

PROBE = """
import json, re, sys
from pathlib import Path
from interleave_thinker.cli.main import app
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    found = [m for m in ("torch", "transformers", "diffusers") if m in sys.modules]
    peak_kb = int(re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1))
    print(json.dumps({"heavy": found, "rss_mb": peak_kb / 1024}))
"""
"""Peak RSS is the kernel's high-water mark of this process's memory (``VmHWM``), not ``ru_maxrss``:
that one survives ``exec`` and would report the benchmark's own servers when they are bigger."""
CONCURRENCY = 16


class Chat:
    """Scripted planner and critic at 0.2 s a call; notes when the first call arrived."""

    def __init__(self) -> None:
        self.inner = scripted_models.handler("chat", scripted_models.State())
        self.first: float | None = None
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        if request.method == "POST":
            with self.lock:
                self.first = self.first or time.time()
            time.sleep(0.2)
        return self.inner(request)


def batch_args(folder: Path, chat_url: str, omni_url: str, requests: int) -> list[str]:
    inputs = folder / "in.jsonl"
    lines = (json.dumps({"id": f"r{i:03d}", "prompt": f"draw {i}"}) for i in range(requests))
    inputs.write_text("\n".join(lines) + "\n")
    vlm = f"openai:{chat_url}/v1#scripted"
    return [
        *("batch", "--input", str(inputs), "--out", str(folder / "out"), "--preset", "tiny", "--quiet"),
        *("--planner", vlm, "--critic", vlm, "--generator", f"vllm-omni:{omni_url}#{OmniState.model_name}"),
        *("--concurrency", str(CONCURRENCY), "--per-backend-limit", f"generator={CONCURRENCY}"),
        *("--per-backend-limit", f"planner={CONCURRENCY}", "--max-attempts", "2"),
    ]


class Engine:
    """The vLLM-Omni stand-in's engine at 1 s a call, counting the most calls in flight at once."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, params: dict[str, Any]) -> Image.Image:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(1.0)
            return scripted_engine(params)
        finally:
            with self.lock:
                self.now -= 1


def measure(requests: int, size: int) -> None:
    """One batch of ``size``² images in a fresh interpreter; prints its figures beside the goals."""
    chat, engine = Chat(), Engine()
    env = {**os.environ, "INTERLEAVE_THINKER_GENERATION__WIDTH": str(size)}
    env["INTERLEAVE_THINKER_GENERATION__HEIGHT"] = str(size)
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalServer(chat) as server,
        OmniServer(OmniState(engine=engine)) as omni,
    ):
        args = batch_args(Path(tmp), server.url, omni.url, requests)
        start = time.time()
        done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env)
        wall = time.time() - start
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    first = (chat.first or start) - start
    print(f"served-only batch, {requests} requests at concurrency {CONCURRENCY}, {size}² images:")
    print(f"  start to first request  {first:6.2f} s    goal < 1.5 s")
    print(f"  peak RSS                {probe['rss_mb']:6.0f} MB   goal < 300 MB")
    print(f"  generator calls at once {engine.peak:6d}      goal {CONCURRENCY}")
    print(f"  model libraries loaded  {', '.join(probe['heavy']) or 'none':>6}      goal none")
    print(f"  wall time               {wall:6.1f} s")


def main(requests: int) -> None:
    measure(requests, 1024)
    # The same batch with 256² images: the difference is what decoded images cost per request in flight.
    measure(requests, 256)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 32)
