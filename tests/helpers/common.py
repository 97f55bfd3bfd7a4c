"""The repository's root, the tiny models' cache, the trace comparison and the CLI run several tests make."""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
"""The checkout's root: every test finds README, docs/, configs/ and src/ from here."""
FIXTURES = REPO / "tests" / "fixtures"

TIMINGS = frozenset({"created_at", "duration_s", "durations"})
"""Trace keys that differ between two otherwise identical runs."""


def tiny_dir() -> str:
    """The tiny models' cache every test and every child process it starts shares (built once)."""
    return os.environ.get("INTERLEAVE_THINKER_TINY_DIR") or str(
        Path.home() / ".cache" / "interleave-thinker" / "tiny"
    )


def stable(value: Any, drop: frozenset[str] = TIMINGS) -> Any:
    """``value`` without the keys in ``drop`` at any depth: two runs' traces compare equal."""
    if isinstance(value, dict):
        return {k: stable(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [stable(v, drop) for v in value]
    return value


def sigterm_when(proc: subprocess.Popen[str], ready: Path) -> str:
    """Send ``proc`` SIGTERM once ``ready`` exists (or it ended, or 120 s passed); its stderr once it ends."""
    deadline = time.monotonic() + 120
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    return stderr


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stable_served(value: Any) -> Any:
    """:func:`stable_across_backends`, and without where a local generator seeded
    (``settings.generator_seed_device``): a served generator seeds on its server, so its trace leaves it out."""
    return stable(value, TIMINGS | {"backends", "generator_seed_device"})


def stable_across_backends(value: Any) -> Any:
    """``value`` without times and without the ``backends`` it names: one run through two sets of backends."""
    return stable(value, TIMINGS | {"backends"})


def cli_command(*args: str) -> list[str]:
    """``python -m interleave_thinker`` with ``args``: the command line a child process runs."""
    return [sys.executable, "-m", "interleave_thinker", *args]


def run_cli(
    words: str, *args: str, cwd: Path | None = None, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process: ``words`` split on white space, then ``args`` as they are (paths, texts);
    ``env`` added to this process's environment."""
    return subprocess.run(
        cli_command(*words.split(), *args),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, **env} if env is not None else None,
    )


SERVED_PIXEL_TOLERANCE = 1
"""How far a served generator's pixel may be from the local run's (levels of 0-255, per channel), and in
at most :data:`SERVED_DIFFERING_SHARE` of the bytes: docs/serving.md#numerics (issue 41, item 12)."""
SERVED_DIFFERING_SHARE = 0.01


def assert_served_pixels(local: Any, served: Any, name: str = "") -> None:
    """``served`` (a PIL image) is ``local`` as the product promises across processes: same size and mode,
    every byte within :data:`SERVED_PIXEL_TOLERANCE`, at most :data:`SERVED_DIFFERING_SHARE` of them off."""
    assert (served.size, served.mode) == (local.size, local.mode), name
    a, b = local.tobytes(), served.tobytes()
    off = [abs(x - y) for x, y in zip(a, b, strict=True) if x != y]
    assert max(off, default=0) <= SERVED_PIXEL_TOLERANCE, (name, max(off))
    assert len(off) <= SERVED_DIFFERING_SHARE * len(a), (name, len(off), len(a))


CPU_TRAINING = {"bf16": False, "use_cpu": True, "report_to": "none"}
"""The training keys of every GRPO run of the suite: this machine's CPU, float32, no tracker."""


def grpo_config(out: Path, role: str, model: str, data: dict[str, Any], **sections: Any) -> Any:
    """A GRPO run of ``model`` on the CPU writing to ``out``: ``sections["training"]`` keys beside
    :data:`CPU_TRAINING`, the other sections as given."""
    from interleave_thinker.train.grpo.config import GRPORunConfig

    training = {**sections.pop("training", {}), **CPU_TRAINING}
    base = {"role": role, "output_dir": str(out), "model": {"name_or_path": model}, "data": data}
    return GRPORunConfig.model_validate({**base, **sections, "training": training})


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse``, tried again when CPython 3.11's AST converter trips over another thread's conversion
    (a process-wide recursion counter: "AST constructor recursion depth mismatch", CPython gh-106905). A
    server thread a module fixture left running in the same xdist worker was enough, under load."""
    for attempt in range(3):
        try:
            return ast.parse(source, filename)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == 2:
                raise
    raise AssertionError("unreachable")
