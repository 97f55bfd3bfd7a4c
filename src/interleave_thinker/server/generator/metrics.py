"""Counters and latency percentiles for ``GET /metrics``; thread-safe, cheap, no dependencies."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any

OUTCOMES = ("completed", "failed", "timed_out", "rejected", "bad_request", "unauthorized", "disconnected")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an already sorted list; 0.0 for an empty one.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.0
    """
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


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
                "p50": percentile(values, 50),
                "p90": percentile(values, 90),
                "p99": percentile(values, 99),
                "mean": sum(values) / len(values) if values else 0.0,
                "count": len(values),
            }

        return {
            **counts,
            "uptime_s": time.monotonic() - self.started,
            "latency_s": summary(latency),
            "pipeline_s": summary(pipeline),
        }
