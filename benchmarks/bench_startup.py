"""Start-up of a tiny command: seconds from launching `interleave-thinker run ... --preset tiny` to its first
phase line, and to its first planner call (the ``planning:`` line, printed as the call starts), for an
earlier commit and this checkout, side by side in one run (issue 45 item 8; docs/notes/startup.md).

The earlier commit runs from a temporary `git worktree` (removed after); both sides use the shared
environment and their own bytecode cache (``PYTHONPYCACHEPREFIX``), warmed by one run first unless
``--cold`` (a fresh install's first command, whose bytecode is still to be compiled). Each run is stopped
once the planner call has started: nothing after it is measured. The sides alternate, so a busy machine
slows both alike; the figures are medians.

    python benchmarks/bench_startup.py --before main --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMPT = "A fox in the snow, then the fox asleep"
FIRST_PHASE = ("…", " ...")
"""How a phase line ends when it starts (``cli/progress.py``: ``phase`` and ``LoadingDisplay``)."""
PLANNING = "planning:"
"""Starts the line printed as the planner is called (``RichObserver.on_planning``, off a terminal)."""
LIMIT_S = 900.0


def launch(src: Path, pycache: Path, out: Path) -> dict[str, float]:
    """One command from ``src``: seconds to its first phase line and to its first planner call."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(src), PYTHONPYCACHEPREFIX=str(pycache), HF_HUB_OFFLINE="1", COLUMNS="200")
    command = [sys.executable, "-m", "interleave_thinker", "run", PROMPT, "--preset", "tiny"]
    command += ["--out", str(out), "--max-attempts", "1"]
    start = time.monotonic()
    found: dict[str, float] = {}
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=src.parent
    ) as process:
        assert process.stdout is not None
        seen: list[str] = []
        for line in process.stdout:
            now = time.monotonic() - start
            seen.append(line.rstrip())
            if "phase" not in found and line.rstrip().endswith(FIRST_PHASE):
                found["phase"] = now
            if line.startswith(PLANNING):
                found["planner"] = now
                break
            if now > LIMIT_S:
                break
        process.terminate()
        process.wait(timeout=60)
    if "planner" not in found:
        raise SystemExit(f"{src}: no planner call within the run's output:\n" + "\n".join(seen[-20:]))
    return found


def worktree(ref: str, where: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref],
        check=True,
        capture_output=True,
    )
    return where


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", default="main", help="the git ref measured as 'before' (default: main)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side (default: 3)")
    parser.add_argument("--cold", action="store_true", help="no warm-up run: bytecode compiled on the way")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", args.before],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        before = worktree(args.before, root / "before")
        try:
            sides = {
                f"before ({args.before} {commit})": before / "src",
                "after (this checkout)": REPO / "src",
            }
            figures: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
            if not args.cold:
                for index, src in enumerate(sides.values()):
                    launch(src, root / f"pyc{index}", root / f"warm{index}")
            for run in range(args.runs):
                for index, (name, src) in enumerate(sides.items()):
                    pycache = root / (f"pyc{index}" if not args.cold else f"pyc{index}-{run}")
                    figures[name].append(launch(src, pycache, root / f"out{index}-{run}"))
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False
            )
    print(
        f"tiny `run`, seconds from launch (median of {args.runs}; {'cold' if args.cold else 'warm'} bytecode)"
    )
    names = list(figures)
    print(f"{'':22}" + "".join(f"{name:>32}" for name in names))
    for key, label in (("phase", "first phase line"), ("planner", "first planner call")):
        row = "".join(f"{statistics.median(r[key] for r in figures[name]):>32.2f}" for name in names)
        print(f"{label:22}{row}")


if __name__ == "__main__":
    main()
