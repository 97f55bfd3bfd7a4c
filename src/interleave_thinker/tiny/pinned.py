"""Child processes with pinned numerics for the tiny builds, and the progress they report to the caller.

Why a child: torch picks its CPU kernels when it loads, so only a fresh process can be given the
kernels every machine shares (:data:`PINNED_NUMERICS`). Why progress lines on its stdout: a build can
take minutes (format training), and the caller's display (the CLI's bars) should show its real steps.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

from interleave_thinker.core.build_progress import BuildReporter, current_reporter

PINNED_NUMERICS = {
    "MKL_CBWR": "COMPATIBLE",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OMP_NUM_THREADS": "2",
    "MKL_NUM_THREADS": "2",
    "PYTHONHASHSEED": "0",
    "TOKENIZERS_PARALLELISM": "false",
}
"""The environment every tiny model is built in (see :func:`run_pinned`). Why: torch picks its CPU kernels
(scalar, AVX2, AVX-512) when it loads, and they differ in the last bits, even for random init (the
vectorised ``normal_`` draws other numbers); training then amplifies a last-bit difference into other
weights. ATen's kernels capped at AVX2, MKL's ``COMPATIBLE`` branch and fixed thread counts give the same
bytes on every x86 machine with AVX2, Intel or AMD. Why ``COMPATIBLE`` and not MKL's faster ``AVX2``
branch: MKL honours an ISA branch on Intel processors only and silently falls back to its ``AUTO``
dispatch elsewhere, so an AMD machine built other weights (seen: the shipped planner, built on an AMD
EPYC, differed from a CI machine's build). oneDNN and NNPACK, which pick their blocking from the cache
sizes, are switched off while training (:func:`interleave_thinker.tiny.models.deterministic_torch`)."""

PINNED_BUILD_ENV = {"HF_HUB_OFFLINE": "1"}
"""Also set for every build, beside the numerics: a saved tokenizer config records whether the hub was
offline (``local_files_only``), and the shipped files (``tiny.shipped``) must not depend on the shell."""

PROGRESS_PREFIX = "@build-progress "
"""A child's stdout line ``@build-progress DONE TOTAL`` reports its steps; any other line is kept for errors."""


def parse_progress(line: str) -> tuple[int, int] | None:
    """``(done, total)`` from a progress line, or None for any other line."""
    at = line.rfind(PROGRESS_PREFIX)  # a library's bar may share the line (stderr is merged, no newline)
    if at < 0:
        return None
    try:
        done, total = (int(x) for x in line[at + len(PROGRESS_PREFIX) :].split())
    except ValueError:
        return None
    return done, total


def pinned_env() -> dict[str, str]:
    """The environment of a child with pinned numerics: the caller's, with :data:`PINNED_NUMERICS` and
    :data:`PINNED_BUILD_ENV` on top (the tiny builds, and the learning test's training run)."""
    return {**os.environ, **PINNED_NUMERICS, **PINNED_BUILD_ENV}


def run_pinned(args: list[str], what: str) -> None:
    """Run ``python <args>`` in a child with :data:`PINNED_NUMERICS` and :data:`PINNED_BUILD_ENV`; its last
    output lines go into the error."""
    import subprocess
    import sys

    from interleave_thinker.core.errors import InterleaveThinkerError

    reporter = current_reporter() or BuildReporter()
    tail: deque[str] = deque(maxlen=15)
    reporter.start(what)
    try:
        with subprocess.Popen(
            [sys.executable, *args],
            env=pinned_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as child:
            assert child.stdout is not None
            for line in child.stdout:
                progress = parse_progress(line)
                if progress is None:
                    tail.append(line.rstrip())
                else:
                    reporter.step(what, *progress)
            code = child.wait()
    finally:
        reporter.end(what)
    if code != 0:
        raise InterleaveThinkerError(
            f"Building {what} failed (exit {code}); last output:\n" + "\n".join(tail)
        )


def progress_callback() -> Any:
    """A ``transformers.TrainerCallback`` printing a progress line after each optimizer step (child side)."""
    from transformers import TrainerCallback

    class PrintProgress(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            print(f"{PROGRESS_PREFIX}{state.global_step} {state.max_steps}", flush=True)

    return PrintProgress()
