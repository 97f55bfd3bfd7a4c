"""Generator service throughput with 1 and 2 worker processes (tiny FLUX.2-klein, 64x64, 2 steps).

Why: the service's overhead (HTTP, JSON, base64, PNG, queueing, pipes) must stay small next to the
pipeline call, and a second worker must add throughput. Every reply carries the worker's own
``timings`` (``pipeline_s`` = the ``generate`` call), so the share of time spent outside the
pipeline is measured per request, not guessed.

    .venv/bin/python benchmarks/bench_server.py [--requests 160] [--concurrency 8] [--workers 1,2]

The load generator runs on the same machine, so on a small box it competes with the workers for CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from interleave_thinker.core.stats import percentile
from interleave_thinker.server.generator import GeneratorProcess


@dataclass(frozen=True)
class Sample:
    latency: float
    """Client-side seconds from sending the request to having the whole reply."""
    timings: dict[str, float]


@dataclass(frozen=True)
class Result:
    workers: int
    wall: float
    samples: list[Sample]

    def share(self, seconds: float) -> float:
        return 100.0 * seconds / sum(s.latency for s in self.samples)

    def rows(self) -> dict[str, str]:
        latencies = sorted(s.latency for s in self.samples)
        pipeline = sum(s.timings["pipeline_s"] for s in self.samples)
        queue = sum(s.timings["queue_s"] for s in self.samples)
        codec = sum(s.timings["decode_s"] + s.timings["encode_s"] for s in self.samples)
        total = sum(s.latency for s in self.samples)
        return {
            "requests/s": f"{len(self.samples) / self.wall:.2f}",
            "p50 latency (ms)": f"{1000 * (percentile(latencies, 50) or 0.0):.0f}",
            "p99 latency (ms)": f"{1000 * (percentile(latencies, 99) or 0.0):.0f}",
            "pipeline call p50 (ms)": f"{1000 * statistics.median(s.timings['pipeline_s'] for s in self.samples):.0f}",
            "outside the pipeline (%)": f"{self.share(total - pipeline):.1f}",
            "  queueing for a worker (%)": f"{self.share(queue):.1f}",
            "  PNG decode+encode (%)": f"{self.share(codec):.1f}",
            "  HTTP, JSON, base64, pipes (%)": f"{self.share(total - pipeline - queue - codec):.1f}",
            "overhead per request (ms)": f"{1000 * (total - pipeline - queue) / len(self.samples):.1f}",
        }


def run_load(url: str, requests: int, concurrency: int, size: int, steps: int) -> tuple[float, list[Sample]]:
    """``requests`` calls at ``concurrency``; seeds vary so no two neighbours are the same request."""
    with httpx.Client(base_url=url, timeout=300.0) as client:

        def one(i: int) -> Sample:
            body = {"prompt": f"a lighthouse at dusk #{i % 7}", "seed": i, "width": size, "height": size}
            start = time.perf_counter()
            reply = client.post("/edit", json={**body, "num_inference_step": steps})
            latency = time.perf_counter() - start
            data = reply.json()
            if reply.status_code != 200 or not data.get("success"):
                raise RuntimeError(f"request {i}: HTTP {reply.status_code}: {data.get('error')}")
            return Sample(latency, data["timings"])

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            samples = list(pool.map(one, range(requests)))
        return time.perf_counter() - start, samples


def bench(workers: int, args: argparse.Namespace) -> Result:
    tiny = os.environ.get("INTERLEAVE_THINKER_TINY_DIR") or str(
        Path.home() / ".cache" / "interleave-thinker" / "tiny"
    )
    env = {"INTERLEAVE_THINKER_TINY_DIR": tiny, "HF_HUB_OFFLINE": "1"}
    queue = ["--queue-size", str(max(64, args.concurrency))]
    with GeneratorProcess("tiny:generator", workers=workers, device="cpu", args=queue, env=env) as service:
        run_load(service.url, 4 * workers, workers, args.size, args.steps)  # warm-up: first calls allocate
        wall, samples = run_load(service.url, args.requests, args.concurrency, args.size, args.steps)
    return Result(workers, wall, samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts to compare")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    results = [bench(int(w), args) for w in args.workers.split(",")]
    print(
        f"\ngenerator service, tiny:generator {args.size}x{args.size}, {args.steps} steps, "
        f"{args.requests} requests at concurrency {args.concurrency}, {os.cpu_count()} CPU cores\n"
    )
    headers = [f"{r.workers} worker{'s' if r.workers > 1 else ''}" for r in results]
    table = [r.rows() for r in results]
    width = max(len(k) for k in table[0])
    print(f"{'':{width}}  " + "  ".join(f"{h:>10}" for h in headers))
    for key in table[0]:
        print(f"{key:{width}}  " + "  ".join(f"{row[key]:>10}" for row in table))
    print("\noverhead = client latency - queueing - pipeline call (decode, encode, HTTP, JSON, pipes)")
    print(
        f"(total benchmark time {time.perf_counter() - started:.0f}s, load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
