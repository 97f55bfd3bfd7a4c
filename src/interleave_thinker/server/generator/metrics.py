"""Counters and latency percentiles for ``GET /metrics``; thread-safe, cheap, no dependencies.

Percentiles are :func:`interleave_thinker.core.stats.percentile` (linear interpolation, as in
``summary.json``); 0.0 while there are no latencies yet.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from interleave_thinker.core.stats import percentile

OUTCOMES = ("completed", "failed", "timed_out", "rejected", "bad_request", "unauthorized", "disconnected")


class ServiceMetrics:
    """Outcome counters since start, and the latencies of the last ``window`` successful requests."""

    def __init__(self, window: int = 2048) -> None:
        self._lock = threading.Lock()
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self._latency: deque[float] = deque(maxlen=window)
        self._pipeline: deque[float] = deque(maxlen=window)
        self.started = time.monotonic()

    def record(self, outcome: str, latency: float | None = None, pipeline: float | None = None) -> None:
        with self._lock:
            self.counts[outcome] += 1
            if latency is not None:
                self._latency.append(latency)
            if pipeline is not None:
                self._pipeline.append(pipeline)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            latency, pipeline = sorted(self._latency), sorted(self._pipeline)
            counts = dict(self.counts)

        def summary(values: list[float]) -> dict[str, float]:
            return {
                **{f"p{q}": percentile(values, q) or 0.0 for q in (50, 90, 99)},
                "mean": sum(values) / len(values) if values else 0.0,
                "count": len(values),
            }

        return {
            **counts,
            "uptime_s": time.monotonic() - self.started,
            "latency_s": summary(latency),
            "pipeline_s": summary(pipeline),
        }
