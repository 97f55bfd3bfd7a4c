"""Judge scoring throughput: 1000 WISE_Verified items against a judge with fixed latency and capacity.

The judge is a real OpenAI-compatible HTTP server on 127.0.0.1 (``python -m interleave_thinker.testing.doubles.judge``, in its
own process like a real server) that holds every call for ``--latency`` seconds in one of
``--capacity`` slots, like a vLLM server with that many sequences. Side by side:

- ours: ``eval score wise`` (run_score) with ``--judge-concurrency`` = capacity; the goal is a wall
  time within 1.15x of the capacity bound ceil(items / capacity) * latency;
- the official WISE script's shape: a 96-thread pool posting the same bodies (eval_qwen.sh uses 96);
- one at a time (measured on a sample and scaled), the naive loop;
- ours again on the finished folder (resume: nothing is asked twice);
- ours with a few more calls in flight than the judge's slots (``--queue``), so the judge's own queue
  hides each call's turnaround, as the official pool's 96 threads do.

Run: ``.venv/bin/python benchmarks/bench_eval.py [--items 1000] [--latency 0.05] [--capacity 32]``.
The judge prompts come from INTERLEAVE_THINKER_EVAL_PROMPTS, the cache, or ../shared/reference/eval.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from interleave_thinker.eval.benchmarks import load_items
from interleave_thinker.eval.benchmarks.wise import scorer as score_wise
from interleave_thinker.eval.benchmarks.wise.prompts import VERIFIED_PROMPTS as WISE_VERIFIED_PROMPTS
from interleave_thinker.eval.prompts import EvalPromptStore
from interleave_thinker.eval.score_run import ScoreOptions, run_score

ROOT = Path(__file__).resolve().parents[1]
LABELS = {"CULTURE": "Cultural knowledge", "TIME": "time", "SPACE": "Space", "BIOLOGY": "Biology"}
LABELS.update({"PHYSICS": "Physical Knowledge", "CHEMISTRY": "Chemistry"})


def make_inputs(folder: Path, items: int) -> tuple[Path, Path]:
    """Synthetic WISE_Verified-shaped prompts (ids 1..N, categories by the Verified ranges) and images."""
    data, images = folder / "data", folder / "images"
    data.mkdir()
    images.mkdir()
    records = []
    for pid in range(1, items + 1):
        category = score_wise.category_of(score_wise.VERIFIED, pid) or "CULTURE"
        records.append({"Prompt": f"prompt {pid}", "Explanation": f"explanation {pid}",
                        "Category": LABELS[category], "Subcategory": "bench", "prompt_id": pid})  # fmt: skip
    (data / "bench_verified.json").write_text(json.dumps(records), encoding="utf-8")
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (120, 30, 200)).save(buffer, format="PNG")
    for pid in range(1, items + 1):
        (images / f"{pid}.png").write_bytes(buffer.getvalue())
    return data, images


def ensure_prompts() -> None:
    """Use the configured folder or the cache; else the shared reference folder beside the checkout."""
    if os.environ.get("INTERLEAVE_THINKER_EVAL_PROMPTS"):
        return
    shared = ROOT.parent / "shared" / "reference" / "eval"
    try:
        EvalPromptStore(download=False).load(WISE_VERIFIED_PROMPTS, "wise")
    except Exception:
        if not shared.is_dir():
            raise
        os.environ["INTERLEAVE_THINKER_EVAL_PROMPTS"] = str(shared)


@contextmanager
def judge_process(latency: float, capacity: int) -> Iterator[str]:
    """The scripted judge in its own process (its own interpreter lock, like a real server)."""
    command = [sys.executable, "-m", "interleave_thinker.testing.doubles.judge", str(latency), str(capacity)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def ours(url: str, data: Path, images: Path, out: Path, capacity: int) -> tuple[float, int]:
    options = ScoreOptions("wise", images, str(data), f"openai:{url}#Qwen3.5-35B-A3B", out,
                           judge_concurrency=capacity)  # fmt: skip
    start = time.perf_counter()
    summary = run_score(options)
    wall = time.perf_counter() - start
    assert summary["counts"]["scored"] == summary["counts"]["items"], summary["counts"]
    return wall, int(summary["judge_calls"]["this_run"])


def pool_bodies(data: Path, images: Path) -> list[dict[str, Any]]:
    prompts = EvalPromptStore().load(WISE_VERIFIED_PROMPTS, "wise")
    bodies = []
    for item in load_items("wise", str(data)):
        image = (images / f"{item.id}.png").read_bytes()
        request = score_wise.build_request(score_wise.VERIFIED, prompts, item.raw, image)
        bodies.append({"model": "m", "messages": request.openai_messages(), **request.settings})
    return bodies


def thread_pool(url: str, bodies: list[dict[str, Any]], workers: int) -> float:
    """The official shape: a thread pool, one POST per image, no cache, no resume, no files."""
    with httpx.Client(timeout=300, limits=httpx.Limits(max_connections=workers)) as client:

        def post(body: dict[str, Any]) -> str:
            response = client.post(f"{url}/chat/completions", json=body)
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"])

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            replies = list(pool.map(post, bodies))
        wall = time.perf_counter() - start
    assert all(r == "Score: 1" for r in replies)
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description="Judge scoring throughput (WISE_Verified).")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per judge call")
    parser.add_argument("--capacity", type=int, default=32, help="calls the judge serves at once")
    parser.add_argument("--official-threads", type=int, default=96)
    parser.add_argument("--sequential-sample", type=int, default=40)
    parser.add_argument("--queue", type=int, default=8, help="extra calls in flight for the last row")
    args = parser.parse_args()
    ensure_prompts()
    bound = math.ceil(args.items / args.capacity) * args.latency
    with tempfile.TemporaryDirectory() as tmp, judge_process(args.latency, args.capacity) as url:
        data, images = make_inputs(Path(tmp), args.items)
        wall_ours, calls_ours = ours(url, data, images, Path(tmp) / "scored", args.capacity)
        bodies = pool_bodies(data, images)
        wall_pool = thread_pool(url, bodies, args.official_threads)
        sample = bodies[: args.sequential_sample]
        wall_seq = thread_pool(url, sample, 1) * args.items / len(sample)
        rescore, calls_rescore = ours(url, data, images, Path(tmp) / "scored", args.capacity)
        queued, _ = ours(url, data, images, Path(tmp) / "queued", args.capacity + args.queue)
    table = [
        ("capacity bound", bound, "ceil(items/capacity) x latency"),
        (f"ours (judge-concurrency {args.capacity})", wall_ours, f"{calls_ours} judge calls"),
        (f"{args.official_threads}-thread pool (official WISE)", wall_pool, "no cache, resume or files"),
        ("one at a time (scaled)", wall_seq, f"from {len(sample)} calls"),
        ("ours, rerun (resume: nothing left)", rescore, f"{calls_rescore} judge calls"),
        (
            f"ours, judge-concurrency {args.capacity + args.queue}",
            queued,
            f"{args.queue} calls wait at the judge",
        ),
    ]
    print(f"{args.items} WISE items, judge latency {args.latency * 1000:.0f} ms, capacity {args.capacity}")
    print(f"{'run':<42} {'wall s':>8} {'x bound':>8}  note")
    for name, wall, note in table:
        print(f"{name:<42} {wall:8.2f} {wall / bound:8.2f}  {note}")
    verdict = "meets" if wall_ours <= 1.15 * bound else "misses"
    print(
        f"ours/bound {wall_ours / bound:.2f} ({verdict} the 1.15x goal); ours/pool {wall_ours / wall_pool:.2f}"
    )


if __name__ == "__main__":
    main()
