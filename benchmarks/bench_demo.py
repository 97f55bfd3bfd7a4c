"""Wall time of a first `make demo` on a fresh clone with an empty HOME (install included), per phase, then
of a warm `make demo`. Run: python benchmarks/bench_demo.py [--keep]

The clone is this working tree as it is now: `git clone` of the repository (read only) with the tree's
modified and untracked files copied over it, in a temp folder. HOME is an empty folder there, so nothing
is cached (no pip or uv cache, no tiny models, no templates); the machine's package configuration
(/etc/pip.conf, PIP_* variables) stays, as a user's would. Variables that only this workplace's shells
set and that change the measurement are dropped (listed in the output). Every output line of `make demo`
is printed with the seconds since the start; the phase lines (`== ...` from the Makefile, the CLI's
`done in`/`built`/`planned`/`step` lines) are summed up at the end. The load average is printed before
and after: on a shared machine the times say as much about the load as about the code.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASE = re.compile(
    r"^(== |loading models|built |building |planned in|\s*step \d+(/\d+)? done|.*index\.html$)"
)
DROPPED = ("PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "INTERLEAVE_THINKER_HOME", "INTERLEAVE_THINKER_TINY_DIR")
"""A user's shell has none of these; the first would make every run compile the library again."""


def clone(dest: Path) -> None:
    """A clone of REPO plus the working tree's uncommitted state (git state of REPO is only read)."""
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(dest)], check=True)
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--modified", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    deleted = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--deleted"], capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, set(listed.split("\0")) - set(deleted.split("\0"))):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    for name in filter(None, deleted.split("\0")):
        (dest / name).unlink(missing_ok=True)


def timed_make(folder: Path, env: dict[str, str]) -> tuple[float, list[tuple[float, str]]]:
    """Run `make demo`, echo each line with its time, return the wall time and the phase lines."""
    start = time.monotonic()
    phases: list[tuple[float, str]] = []
    with subprocess.Popen(
        ["make", "demo"], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            at = time.monotonic() - start
            print(f"[{at:6.1f} s] {line.rstrip()}", flush=True)
            if PHASE.match(line):
                phases.append((at, line.strip()))
        code = child.wait()
    if code != 0:
        sys.exit(f"make demo failed (exit {code}) in {folder}")
    return time.monotonic() - start, phases


def summary(title: str, total: float, phases: list[tuple[float, str]]) -> None:
    print(f"\n{title}: {total:.1f} s wall")
    previous = 0.0
    for at, line in phases:
        print(f"  {at:6.1f} s (+{at - previous:5.1f} s)  {line}")
        previous = at


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="Keep the temp folder (about 6 GB).")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    home = work / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in DROPPED} | {"HOME": str(home)}
    print(f"clone and empty HOME under {work}; dropped: {', '.join(k for k in DROPPED if k in os.environ)}")
    print(f"load average (1, 5, 15 min) before: {load()} on {os.cpu_count()} cores")
    try:
        clone(work / "clone")
        fresh, fresh_phases = timed_make(work / "clone", env)
        warm, warm_phases = timed_make(work / "clone", env)
        print(f"\nload average after: {load()}")
        summary("fresh `make demo` (install included)", fresh, fresh_phases)
        summary("warm `make demo`", warm, warm_phases)
        print(f"\nfresh {fresh:.1f} s (goal < 120 s on a quiet machine), warm {warm:.1f} s (goal < 20 s)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
