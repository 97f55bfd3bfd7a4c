"""The writes of a run's files (trace, images, pages, journal lines), off the event loop in a batch.

Why: a batch request runs in a greenlet on the scheduler's one loop thread (``core/green.py``), and a
file write there stops every request in flight: an atomic write is fsynced, 3-8 ms of waiting on a
shared disk, and a request writes ~14 files, so 1,024 requests in flight would queue ~100 s of disk
waits on that thread. Inside a greenlet the write runs in a small pool of writer threads and only its
own request waits; outside one (``run``, the Python API, tests) it is the plain synchronous write.
One request's writes still happen one after the other, in order, since its greenlet waits for each.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from interleave_thinker.core import green
from interleave_thinker.core.paths import write_atomic

T = TypeVar("T")
WRITERS = 4
"""Writer threads: disk waits overlap, and encoding a PNG (which releases the GIL) uses a free core."""

_writers = green.lazy_pool(WRITERS, "run-files")


def off_loop(fn: Callable[[], T]) -> T:
    """``fn()`` (file work), in a writer thread when called from a batch request's greenlet."""
    return green.call_blocking(_writers, fn)


def write_file(path: Path, data: bytes | str) -> None:
    """:func:`~interleave_thinker.core.paths.write_atomic`, off the loop inside a greenlet."""
    off_loop(lambda: write_atomic(path, data))
