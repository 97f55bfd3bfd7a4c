"""Scheduler throughput, orchestration overhead, and micro-batching of the tiny local models.

(a) 64 requests over latency-simulating backends (planner 40 ms, generator 150 ms, critic 40 ms, each
    with 8 slots): a sequential one-request-at-a-time loop vs our scheduler vs the capacity bound.
(b) Orchestration overhead per attempt with instantaneous backends (no disk, no image encoding).
(c) The tiny transformers and diffusers backends: 8 concurrent calls, micro-batched vs one at a time,
    and whether outputs are identical.
(d) Scale: served backends of GPU-like latency in their own process, over HTTP on 127.0.0.1
    (``_served.py``, ``_scale.py``): 1,024 requests at concurrency 1,024 (planner 1 s, critic 1 s,
    generator 4 s), then 3,000 requests with short latencies (0.2 / 0.2 / 1 s) where CPU becomes the
    limit: longest request chain / wall, peak RSS, peak threads, CPU ms per backend call.
Run: python benchmarks/bench_scheduler.py [--skip-tiny] [--only-scale] [--scale-requests 128]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import math
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from PIL import Image

from _scale import Row, measure, report
from _sim import SimImage, SimVLM
from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.backends.protocols import ImageRequest, Message
from interleave_thinker.core.prompt_store import builtin_templates
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.limits import BackendStats, LimitedImage, LimitedVLM
from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
from interleave_thinker.runtime.store import RunStore

T = TypeVar("T")
R = TypeVar("R")

REQUESTS, STEPS = 64, 3
PLANNER, GENERATOR, CRITIC, SLOTS = 0.040, 0.150, 0.040, 8


def plan(messages: list[dict[str, object]]) -> str:
    steps = ", ".join(
        f"{{'step_number': {i}, 'instruction': 'do {i}', 'prompt': 'step {i} of {hash_of(messages)}', 'auxiliary_text': None}}"
        for i in range(1, STEPS + 1)
    )
    return f"<answer>{{'execution_plan': [{steps}]}}</answer>"


def hash_of(messages: list[dict[str, object]]) -> str:
    return hashlib.sha256(repr(messages[0]["content"]).encode()).hexdigest()[:8]


def verdict(messages: list[Message]) -> str:
    text = "".join(p["text"] for p in messages[0]["content"] if p.get("type") == "text")
    ok = "refined" in text or int(hashlib.sha256(text.encode()).hexdigest(), 16) % 4 != 0
    return f"<answer>{{'previous_step_success': {ok}, 'refine_prompt': 'refined prompt'}}</answer>"


def config() -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "planner": "sim:planner",
            "critic": "sim:critic",
            "generator": "sim:generator",
            "generation": {"width": 64, "height": 64},
        }
    )


def pipeline(latency: bool = True) -> tuple[Pipeline, list[SimVLM | SimImage]]:
    scale = 1.0 if latency else 0.0
    planner = SimVLM(plan, PLANNER * scale, SLOTS, "planner")
    critic = SimVLM(verdict, CRITIC * scale, SLOTS, "critic")
    generator = SimImage(GENERATOR * scale, SLOTS, "generator")
    return Pipeline(
        planner=planner, critic=critic, generator=generator, config=config(), templates=builtin_templates()
    ), [planner, critic, generator]


def part_a() -> None:
    items = [BatchItem(f"r{i:03d}", f"Show process {i}") for i in range(REQUESTS)]
    pipe, sims = pipeline()
    start = time.perf_counter()
    for item in items:
        pipe(item.prompt, request_id=item.id)
    sequential = time.perf_counter() - start
    calls = {s.name: s.sim.calls for s in sims}

    pipe, sims = pipeline()
    with tempfile.TemporaryDirectory() as tmp:
        runner = BatchRunner(
            pipe,
            RunStore(Path(tmp)),
            BatchSettings(
                concurrency=REQUESTS, limits=dict.fromkeys(("planner", "critic", "generator"), SLOTS)
            ),
        )
        outcome = runner.run(items)
    ours = outcome.wall_s
    assert {s.name: s.sim.calls for s in sims} == calls, "the scheduler changed the work done"
    latency = {"planner": PLANNER, "critic": CRITIC, "generator": GENERATOR}
    per_backend = {name: math.ceil(calls[name] / SLOTS) * latency[name] for name in calls}
    attempts_per_request = (calls["generator"]) / REQUESTS
    chain = PLANNER + attempts_per_request * GENERATOR + (calls["critic"] / REQUESTS) * CRITIC
    bound = max([*per_backend.values(), chain])
    print("(a) 64 requests, planner 40 ms / generator 150 ms / critic 40 ms, 8 slots each")
    print(f"    calls: {calls}")
    print(f"    {'sequential':>12}{'scheduler':>12}{'bound':>12}")
    print(f"    {sequential:>11.2f}s{ours:>11.2f}s{bound:>11.2f}s")
    print(f"    bound / scheduler    = {bound / ours:.2f}   (goal >= 0.9)")
    print(f"    sequential/scheduler = {sequential / ours:.1f}x  (goal >= 6)")
    for name in ("planner", "generator", "critic"):
        print(f"    utilisation {name:9} {outcome.stats[name].summary(ours)['utilisation']:.2f}")


def part_b() -> None:
    pipe, _ = pipeline(latency=False)
    for _ in range(5):
        pipe("warm up")
    start = time.perf_counter()
    attempts = 0
    for i in range(200):
        result = pipe(f"Show process {i}")
        attempts += sum(len(s.attempts) for s in result.trace.steps)
    elapsed = time.perf_counter() - start
    print(
        f"(b) orchestration overhead with instantaneous backends: {elapsed / attempts * 1000:.3f} ms per attempt "
        f"({attempts} attempts; planner + critic parsing, trace building; goal < 2 ms)"
    )


def concurrently(fn: Callable[[T], R], args: list[T]) -> tuple[list[R], float]:
    results: list[Any] = [None] * len(args)  # each filled by its thread (None if the call raised)

    def work(i: int) -> None:
        results[i] = fn(args[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(args))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - start


def part_c() -> None:
    from interleave_thinker.backends.specs import load_image_backend, load_vlm_backend

    vlm = load_vlm_backend("tiny:critic")
    conversations = [
        [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": Image.new("RGB", (64, 64), (i * 30, 0, 0))},
                    {"type": "text", "text": "check this image " * (1 + i % 3)},
                ],
            }
        ]
        for i in range(8)
    ]
    print("(c) tiny models, 8 concurrent requests")
    for batched in (False, True):
        wrapped = LimitedVLM(vlm, BackendStats("critic", 8 if batched else 1), micro_batch=batched)
        outs, wall = concurrently(functools.partial(wrapped.chat, max_new_tokens=32), conversations)
        if not batched:
            reference = outs
        print(
            f"    transformers {'batched  ' if batched else 'unbatched'}: {8 / wall:6.2f} req/s, batches={wrapped.stats.batches}, "
            f"identical={outs == reference}"
        )
    image = load_image_backend("tiny:generator")
    prompts = [f"a picture of thing {i}" for i in range(8)]
    for batched in (False, True):
        wrapped_image = LimitedImage(
            image, BackendStats("generator", 8 if batched else 1), micro_batch=batched
        )
        requests = [ImageRequest(p, width=64, height=64, seed=7, steps=2, guidance=1.0) for p in prompts]
        pictures, wall = concurrently(wrapped_image.generate, requests)
        if not batched:
            images = pictures
        diff = max(
            int(np.abs(np.asarray(a, dtype=int) - np.asarray(b, dtype=int)).max())
            for a, b in zip(pictures, images, strict=True)
        )
        print(
            f"    diffusers    {'batched  ' if batched else 'unbatched'}: {8 / wall:6.2f} req/s, batches={wrapped_image.stats.batches}, "
            f"identical={diff == 0} (max pixel difference {diff})"
        )
    print("    -> the scheduler micro-batches only where outputs are identical (--micro-batch ROLE opts in);")
    print("       diffusers batching differs by float rounding, so it is off by default.")


def part_d(
    requests: int, short_requests: int, profile: str | None, shards: int = 1, run_dir: str | None = None
) -> None:
    """Scale rows: served backends of GPU-like latency, then short latencies (where CPU becomes the limit)."""
    print(
        "(d) scale, served backends over HTTP on 127.0.0.1 (their own process); 'met by' > 1 meets the goal"
    )
    rows = (
        Row(requests, requests, 1.0, 1.0, 4.0),
        *([Row(requests, requests, 1.0, 1.0, 4.0, shards)] if shards > 1 else []),
        Row(short_requests, min(requests, short_requests), 0.2, 0.2, 1.0),
    )
    # every row's run folder stays until all rows are done: removing ~10,000 files makes the next file
    # creations on this VM's disk dearer for a while, which a following row would pay (``_scale.py``)
    with tempfile.TemporaryDirectory(dir=run_dir) as folders:
        for row in rows:
            if row.requests:
                report(row, measure(row, f"{profile}.{row.requests}" if profile else None, folders))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip-tiny", action="store_true", help="skip (c), the tiny local models")
    parser.add_argument("--only-scale", action="store_true", help="run only (d), the scale rows")
    parser.add_argument("--skip-scale", action="store_true", help="skip (d), the scale rows")
    parser.add_argument(
        "--scale-requests",
        type=int,
        default=1024,
        help="requests of the first scale row, all in flight at once (one wave); also the concurrency "
        "of the second row (default 1024)",
    )
    parser.add_argument(
        "--short-requests",
        type=int,
        default=None,
        help="requests of the second scale row, short latencies (default 3000, or 3 x --scale-requests "
        "when that is given; 0 skips the row)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=2,
        help="also run the first scale row split over this many batch processes, as `batch --shard I/N` "
        "would (default 2; 1 skips that row)",
    )
    parser.add_argument(
        "--profile", metavar="FILE", help="write a cProfile of each scale row's batch to FILE.<requests>"
    )
    parser.add_argument(
        "--run-dir",
        metavar="PATH",
        help="folder for the scale rows' run folders (default: the system's temporary folder); each row "
        "prints what one file write costs there, e.g. /dev/shm to take the disk out of the figures",
    )
    return parser.parse_args()


if __name__ == "__main__":
    args = arguments()
    short = args.short_requests
    if short is None:
        short = 3000 if args.scale_requests == 1024 else 3 * args.scale_requests
    if not args.only_scale:
        part_a()
        part_b()
        if not args.skip_tiny:
            part_c()
    if not args.skip_scale:
        part_d(args.scale_requests, short, args.profile, args.shards, args.run_dir)
