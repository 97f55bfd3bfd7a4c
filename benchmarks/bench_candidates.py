"""Parallel candidates (``loop.candidates``) and speculative next steps (``loop.speculate``) against the
sequential loop: request wall time and generator calls per request, side by side in one run (issue 32,
item 7a; issue 43, item 3).

Served doubles on 127.0.0.1 (``testing/doubles/seeded.py``: OpenAI chat for planner and critic, the
"/edit" protocol for the generator, real HTTP) answer at GPU-like latencies, planner 1 s, critic 1 s,
generator 4 s, each multiplied by ``--time-scale``. The critic accepts an attempt with probability p,
decided by a seeded hash of the attempt's seed and prompt, so every mode meets the same verdict for
the same attempt. The release's other settings hold: 3 attempts a step, the last one kept without a
critic call. Each row is ``--requests`` requests (2-3 image steps each) in one batch through the
scheduler, all in flight at once, with the generator's limit large enough that no call waits for a
slot (the case candidates and speculation are for: a generator with spare capacity); ``--steps N`` makes
every request N image steps, where speculation has more step boundaries to save a critic call at. A request's wall
time is its trace's ``duration_s``; "@1x" divides it by the time scale (HTTP, PNG encoding and the
run folder's fsynced writes, a few milliseconds a call, are magnified by the same factor: ``--run-dir``
on a tmpfs takes the disk out); "ideal" is the request's time at scale 1 if only the served latencies
counted (its critical path). Generator calls count every call made, a discarded speculation's too.

The saturated rows (``--saturated``, 0 to skip) run that many requests with the generator's limit fixed
(``--saturated-limit``), so extra calls queue: throughput is requests per minute at scale 1.

Run: ``python benchmarks/bench_candidates.py --time-scale 0.1 --run-dir /dev/shm`` (the figures in
docs/notes/candidates.md and docs/notes/speculation.md).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from interleave_thinker import Pipeline, PipelineConfig
from interleave_thinker.core.run_folder import TRACE_FILE, load_trace
from interleave_thinker.core.stats import percentile
from interleave_thinker.core.types import Trace
from interleave_thinker.runtime.batch_inputs import BatchItem
from interleave_thinker.runtime.scheduler import BatchRunner, BatchSettings
from interleave_thinker.runtime.store import RunStore
from interleave_thinker.testing.doubles.seeded import SeededWorld, chance
from interleave_thinker.testing.doubles.server import LocalServer

LATENCY = {"planner": 1.0, "critic": 1.0, "generator": 4.0}
MODES = ((1, 0), (1, 1), (1, 2), (2, 0), (3, 0), (3, 1))
"""(candidates, speculate) of each row."""
SATURATED_MODES = ((1, 0), (1, 1), (3, 0), (3, 1))
PROBABILITIES = (0.3, 0.5, 0.8)


def ideal_s(trace: Trace, candidates: int) -> float:
    """The request's wall time at scale 1 if only the served latencies counted: the planner, then per
    round of a step the generator and (when any attempt of the round was judged) the critic; a step
    whose first call was made ahead and kept starts when the image it started from arrived."""
    now = LATENCY["planner"]
    for number, step in enumerate(trace.steps):
        image_at = now
        for first in range(0, len(step.attempts), candidates):
            judged = any(a.critic_called for a in step.attempts[first : first + candidates])
            image_at = now + LATENCY["generator"]
            now = image_at + (LATENCY["critic"] if judged else 0.0)
        following = trace.steps[number + 1] if number + 1 < len(trace.steps) else None
        if following is not None and any(s.speculative == "kept" for s in following.speculations):
            now = image_at  # the next step's round 0 began with this image; its verdict came meanwhile
    return now


def generator_calls(trace: Trace) -> int:
    """Every generator call of the request: its attempts and the speculations that were discarded after
    their call began."""
    made = sum(
        1 for step in trace.steps for s in step.speculations if s.speculative == "discarded" and s.called
    )
    return sum(len(step.attempts) for step in trace.steps) + made


def run_row(
    url: str, mode: tuple[int, int], requests: int, out: Path, generator_limit: int | None = None
) -> tuple[list[tuple[float, int, float]], float]:
    """(wall seconds, generator calls, ideal seconds at scale 1) of each request of one batch with
    ``mode`` = (candidates, speculate), and the batch's wall seconds."""
    candidates, speculate = mode
    config = PipelineConfig.resolve(
        preset="tiny",
        overrides={
            "planner": f"openai:{url}/v1#scripted",
            "critic": f"openai:{url}/v1#scripted",
            "generator": f"http:{url}",
            "loop": {"candidates": candidates, "speculate": speculate},
            "generation": {"width": 16, "height": 16, "steps": 1},
        },
    )
    items = [BatchItem(id=f"r{i:03d}", prompt=f"Show the bench scene number {i}") for i in range(requests)]
    limit = generator_limit or requests * 4
    settings = BatchSettings(
        concurrency=requests, limits={"planner": requests, "critic": requests * 3, "generator": limit}
    )
    runner = BatchRunner(Pipeline.from_config(config), RunStore(out), settings)
    try:
        outcome = runner.run(items)
    finally:
        runner.pipeline.close()
    failed = [key for key, status in outcome.finished.items() if status != "succeeded"]
    if failed:
        raise SystemExit(f"requests failed in the row {mode_name(mode)}: {failed}")
    rows = []
    for item in items:
        trace = load_trace(out / "requests" / item.id / TRACE_FILE)
        rows.append((trace.duration_s, generator_calls(trace), ideal_s(trace, candidates)))
    return rows, outcome.wall_s


def mode_name(mode: tuple[int, int]) -> str:
    candidates, speculate = mode
    parts = ([f"N={candidates}"] if candidates > 1 else []) + ([f"spec {speculate}"] if speculate else [])
    return " + ".join(parts) or "sequential"


def row_line(p: float, mode: tuple[int, int], rows: list[tuple[float, int, float]], scale: float) -> str:
    walls, ideals = [r[0] for r in rows], [r[2] for r in rows]
    mean, p95 = statistics.fmean(walls), percentile(walls, 95) or 0.0
    return (
        f"{p:>4} {mode_name(mode):>14} {mean:>9.2f}s {p95:>8.2f}s {mean / scale:>8.1f}s {p95 / scale:>7.1f}s "
        f"{statistics.fmean(ideals):>9.1f}s {percentile(ideals, 95) or 0.0:>8.1f}s "
        f"{statistics.fmean(r[1] for r in rows):>9.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-scale", type=float, default=1.0, help="Multiplies every served latency.")
    parser.add_argument("--requests", type=int, default=24, help="Requests per row.")
    parser.add_argument("--seed", type=int, default=0, help="Seeds the critic's accept decisions.")
    parser.add_argument(
        "--steps", type=int, default=None, help="Image steps of every request (default: 2 or 3 each)."
    )
    parser.add_argument(
        "--probabilities",
        type=float,
        nargs="+",
        default=list(PROBABILITIES),
        help="The critic's acceptance probabilities of the rows.",
    )
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="Where the rows' run folders go (e.g. a tmpfs: /dev/shm)."
    )
    parser.add_argument(
        "--saturated", type=int, default=48, help="Requests of the saturated rows; 0 skips them."
    )
    parser.add_argument(
        "--saturated-limit",
        type=int,
        default=8,
        help="The generator's limit (calls in flight) in the saturated rows.",
    )
    parser.add_argument("--saturated-only", action="store_true", help="Only the saturated rows.")
    args = parser.parse_args()
    if args.time_scale <= 0 or args.requests < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--time-scale must be > 0, --requests >= 1 and --steps >= 1")
    if not all(0 <= p <= 1 for p in args.probabilities):
        parser.error("--probabilities must be 0 to 1")
    print(
        f"latency (s): planner {LATENCY['planner'] * args.time_scale:g}, critic {LATENCY['critic'] * args.time_scale:g}, "
        f"generator {LATENCY['generator'] * args.time_scale:g} (time scale {args.time_scale:g}); "
        f"{args.requests} requests a row; {args.steps or '2-3'} image steps a request; 3 attempts a step; "
        f"critic seed {args.seed}"
    )
    header = (
        f"{'p':>4} {'mode':>14} {'wall mean':>10} {'wall p95':>9} {'mean @1x':>9} {'p95 @1x':>8} "
        f"{'ideal mean':>10} {'ideal p95':>9} {'gen calls':>9}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="bench-candidates-", dir=args.run_dir) as tmp:
        for p in () if args.saturated_only else args.probabilities:
            world = SeededWorld(
                accept=chance(p, args.seed),
                latency={k: v * args.time_scale for k, v in LATENCY.items()},
                steps=args.steps,
            )
            with LocalServer(world) as server:
                means: dict[tuple[int, int], tuple[float, float]] = {}
                for mode in MODES:
                    rows, _ = run_row(server.url, mode, args.requests, Path(tmp) / f"p{p}-{mode}")
                    means[mode] = statistics.fmean(r[0] for r in rows), statistics.fmean(r[2] for r in rows)
                    print(row_line(p, mode, rows, args.time_scale))
                for what, column in (("mean wall", 0), ("ideal", 1)):
                    base = means[(1, 0)][column]
                    ratios = ", ".join(f"{mode_name(m)} {means[m][column] / base:.2f}x" for m in MODES[1:])
                    print(f"{'':>4} {what} vs sequential: {ratios}")
        if args.saturated:
            saturated(args, Path(tmp))


def saturated(args: argparse.Namespace, tmp: Path) -> None:
    """The saturated rows: ``--saturated`` requests, the generator's limit fixed, throughput at scale 1."""
    print(
        f"\nsaturated: {args.saturated} requests in one batch, generator limit {args.saturated_limit} "
        "(calls beyond it queue)"
    )
    header = f"{'p':>4} {'mode':>14} {'batch @1x':>10} {'req/min @1x':>12} {'mean @1x':>9} {'gen calls':>9}"
    print(header)
    print("-" * len(header))
    for p in (0.5, 0.8):
        world = SeededWorld(
            accept=chance(p, args.seed),
            latency={k: v * args.time_scale for k, v in LATENCY.items()},
            steps=args.steps,
        )
        with LocalServer(world) as server:
            for mode in SATURATED_MODES:
                out = tmp / f"saturated-p{p}-{mode}"
                rows, wall = run_row(server.url, mode, args.saturated, out, args.saturated_limit)
                at_1x = wall / args.time_scale
                print(
                    f"{p:>4} {mode_name(mode):>14} {at_1x:>9.1f}s {args.saturated / at_1x * 60:>12.1f} "
                    f"{statistics.fmean(r[0] for r in rows) / args.time_scale:>8.1f}s "
                    f"{statistics.fmean(r[1] for r in rows):>9.2f}"
                )


if __name__ == "__main__":
    main()
