"""The GRPO learning experiment across seed pairs: what ``tests/train/test_grpo.py``'s learning test runs on one pair.

Each (warm start seed, GRPO seed) pair runs ``tests/helpers/grpo_learning.py`` in a child process with the tiny
builds' pinned numerics (the same bits on every x86 machine with AVX2): an inverted warm start of the
format-trained tiny critic, repeated until its held-out mean accuracy is at most 0.15, then 80 GRPO
steps with format + accuracy rewards. Printed per pair: the held-out mean accuracy and the accuracy of
well-formed answers before -> after, each beside its margin (+0.3, +0.2), and whether both are met.
``--flip`` breaks GRPO on purpose (every advantage gets the wrong sign): then no pair should meet the
margins, which is what makes the one-pair test a test of GRPO. About 4 minutes per pair on 2 idle cores.
Recorded results: docs/notes/learning-test.md, "The seed sweep".

Run: python benchmarks/bench_grpo_learning.py [--pairs 0,42 1,0 ...] [--flip]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "helpers" / "grpo_learning.py"
RESULT_PREFIX = "@learning "
PAIRS = ((0, 42), (1, 0), (2, 7), (3, 1), (4, 2), (5, 3), (6, 11))
"""The pairs measured with the current design; the test runs the first."""
MEAN_MARGIN, FORMED_MARGIN = 0.3, 0.2


def run_pair(critic: Path, work: Path, warm_seed: int, grpo_seed: int, flip: bool) -> dict[str, float]:
    from interleave_thinker.tiny.pinned import pinned_env

    args = {"critic": str(critic), "work": str(work), "warm_seed": warm_seed, "grpo_seed": grpo_seed}
    if flip:
        args["flip_advantages"] = True
    child = subprocess.run(
        [sys.executable, str(SCRIPT), json.dumps(args)],
        env=pinned_env(),
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    lines = [ln for ln in child.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if child.returncode != 0 or not lines:
        raise SystemExit(
            f"pair ({warm_seed}, {grpo_seed}) failed:\n{child.stdout[-2000:]}\n{child.stderr[-2000:]}"
        )
    return {k: float(v) for k, v in json.loads(lines[-1][len(RESULT_PREFIX) :]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pairs", nargs="*", default=[f"{w},{g}" for w, g in PAIRS], help="WARM,GRPO seed pairs"
    )
    parser.add_argument("--flip", action="store_true", help="flip every advantage's sign (GRPO broken)")
    options = parser.parse_args()

    from interleave_thinker.core.prompt_store import builtin_templates
    from interleave_thinker.tiny.format_trained import ensure_format_trained_tiny

    critic = ensure_format_trained_tiny(templates=builtin_templates()).critic
    print(
        f"GRPO {'with flipped advantages (broken)' if options.flip else 'as built'}; margins +{MEAN_MARGIN} / +{FORMED_MARGIN}"
    )
    print("| seeds | mean accuracy | well-formed accuracy | both margins | seconds |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="grpo-learning-") as scratch:
        for text in options.pairs:
            warm_seed, grpo_seed = (int(x) for x in text.split(","))
            started = time.monotonic()
            r = run_pair(
                critic, Path(scratch) / f"{warm_seed}-{grpo_seed}", warm_seed, grpo_seed, options.flip
            )
            met = (
                r["after"] >= r["before"] + MEAN_MARGIN
                and r["after_formed"] >= r["before_formed"] + FORMED_MARGIN
            )
            print(
                f"| ({warm_seed}, {grpo_seed}) | {r['before']:.3f} -> {r['after']:.3f} ({r['after'] - r['before']:+.2f}) "
                f"| {r['before_formed']:.3f} -> {r['after_formed']:.3f} ({r['after_formed'] - r['before_formed']:+.2f}) "
                f"| {'yes' if met else 'no'} | {time.monotonic() - started:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
