"""A request handler that holds each POST a while and records the most calls it had in flight at once.

Why: the concurrency tests (``batch`` and ``data generate`` under ``--per-backend-limit``) put it in
front of a scripted model server to measure what the wire sees, not what the client meant to send.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from interleave_thinker.testing.doubles.server import Handle, Reply, Request


@dataclass
class Counting:
    """Wraps ``inner``: every POST waits ``hold`` seconds (long enough for every call a limit allows to
    arrive) and counts into ``calls`` and ``peak``; other methods pass straight through."""

    inner: Handle
    hold: float = 0.3
    now: int = 0
    peak: int = 0
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: Request) -> Reply | None:
        if request.method != "POST":
            return self.inner(request)
        with self.lock:
            self.now, self.calls = self.now + 1, self.calls + 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(self.hold)
            return self.inner(request)
        finally:
            with self.lock:
                self.now -= 1
