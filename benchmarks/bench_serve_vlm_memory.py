"""Peak memory of ``serve vlm`` under the audit's requests (issue 41, item 1).

The real command (``serve vlm --model tiny:planner``) runs in a subprocess; its peak RSS (``VmHWM``,
reset through ``/proc/PID/clear_refs`` before each phase) is read after each phase:

1. the audit's request: 40 flat 1024² PNGs in one small body (~110 KB) -> 400 (``--max-images 8``),
   refused before any image is read;
2. a request at the limit: 8 of those images -> 200, decoded in the one-at-a-time call;
3. 40 such requests at once, streamed -> one runs, ``--max-waiting`` wait, the rest get 429 with
   ``Retry-After``; the waiting ones hold their bodies, not their pixels.

Run: python benchmarks/bench_serve_vlm_memory.py [--max-waiting 8]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from interleave_thinker.server.generator import free_port

SIDE = 1024
AUDIT_IMAGES = 40
CONCURRENT = 40


def flat_png(side: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (seed * 5 % 256, 90, 200)).save(buffer, format="PNG")
    return buffer.getvalue()


def body(images: int, *, stream: bool = False) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(flat_png(SIDE, i)).decode()},
        }
        for i in range(images)
    ]
    content = [*parts, {"type": "text", "text": "What do these show?"}]
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 4,
        "temperature": 0,
        "stream": stream,
    }


def status_mb(pid: int, field: str) -> float:
    found = re.search(rf"{field}:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    assert found is not None
    return int(found.group(1)) / 1024


def reset_peak(pid: int) -> float:
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return status_mb(pid, "VmHWM")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-waiting", type=int, default=8)
    args = parser.parse_args()
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "interleave_thinker", "serve", "vlm", "--model", "tiny:planner"]
    command += ["--port", str(port), "--log-level", "warning", "--max-waiting", str(args.max_waiting)]
    server = subprocess.Popen(command, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                httpx.get(f"{url}/health", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("serve vlm did not start") from None
                time.sleep(0.5)
        audit = body(AUDIT_IMAGES)
        print(f"audit request: {AUDIT_IMAGES} images of {SIDE}x{SIDE}, {len(json.dumps(audit)) // 1024} KB")
        idle = reset_peak(server.pid)
        print(f"server RSS after loading: {idle:.0f} MB")
        with httpx.Client(base_url=url, timeout=600) as client:
            start = reset_peak(server.pid)
            reply = client.post("/v1/chat/completions", json=audit)
            print(
                f"1. audit request: HTTP {reply.status_code}, peak +{status_mb(server.pid, 'VmHWM') - start:.0f} MB"
            )
            start = reset_peak(server.pid)
            reply = client.post("/v1/chat/completions", json=body(8))
            print(
                f"2. 8 images: HTTP {reply.status_code}, peak +{status_mb(server.pid, 'VmHWM') - start:.0f} MB"
            )
            streamed = body(8, stream=True)
            start = reset_peak(server.pid)
            with ThreadPoolExecutor(CONCURRENT) as pool:
                replies = list(
                    pool.map(lambda _: client.post("/v1/chat/completions", json=streamed), range(CONCURRENT))
                )
            counts = Counter(r.status_code for r in replies)
            hint = next((r.headers.get("Retry-After") for r in replies if r.status_code == 429), None)
            grown = status_mb(server.pid, "VmHWM") - start
            print(
                f"3. {CONCURRENT} streams of 8 images at once: {dict(sorted(counts.items()))} (Retry-After {hint}), peak +{grown:.0f} MB"
            )
        print(f"server peak RSS in phase 3: {status_mb(server.pid, 'VmHWM'):.0f} MB")
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
