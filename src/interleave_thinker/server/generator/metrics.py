"""The generator service's figures: outcome counters and latencies, for ``GET /metrics`` (Prometheus text)
and ``GET /metrics.json`` (the same figures with latency percentiles); thread-safe and cheap.

Percentiles are :func:`interleave_thinker.core.stats.percentile` (linear interpolation, as in
``summary.json``); 0.0 while there are no latencies yet. Prometheus gets histograms instead, from which
it computes its own quantiles over any window.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from interleave_thinker.core.stats import percentile
from interleave_thinker.server.prometheus import LATENCY_BUCKETS, PREFIX

OUTCOMES = ("completed", "failed", "timed_out", "rejected", "bad_request", "unauthorized", "disconnected")
NAME = f"{PREFIX}generator_"


class ServiceMetrics:
    """Outcome counters since start, and the latencies of the last ``window`` successful requests; each
    figure also goes to ``registry`` (a fresh one unless given) for the Prometheus text format."""

    def __init__(self, window: int = 2048, registry: CollectorRegistry | None = None) -> None:
        self._lock = threading.Lock()
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self._latency: deque[float] = deque(maxlen=window)
        self._pipeline: deque[float] = deque(maxlen=window)
        self.started = time.monotonic()
        self.registry = registry or CollectorRegistry()
        self._outcomes = Counter(
            f"{NAME}requests",
            "Generation requests (/edit and /v1/images/*) by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # every series exists from the start, at 0
            self._outcomes.labels(outcome)
        self._total = Histogram(
            f"{NAME}request_duration_seconds",
            "Arrival to reply of completed generations (queueing, decoding, pipeline, encoding).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._in_pipeline = Histogram(
            f"{NAME}pipeline_duration_seconds",
            "Time completed generations spent in the image pipeline itself.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def record(self, outcome: str, latency: float | None = None, pipeline: float | None = None) -> None:
        with self._lock:
            self.counts[outcome] += 1
            if latency is not None:
                self._latency.append(latency)
            if pipeline is not None:
                self._pipeline.append(pipeline)
        self._outcomes.labels(outcome).inc()
        if latency is not None:
            self._total.observe(latency)
        if pipeline is not None:
            self._in_pipeline.observe(pipeline)

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


class PoolCollector(Collector):
    """Queue depth, requests in flight, capacity and each worker's state and counters, read from the
    pool's own ``describe()`` at scrape time (no second copy of the pool's state to keep in step)."""

    def __init__(self, describe: Callable[[], dict[str, Any]], started: float) -> None:
        self.read_pool, self.started = describe, started  # not ``describe``: the registry would call it

    def collect(self) -> Iterator[Metric]:
        pool = self.read_pool()
        for key, text in (
            ("queue_depth", "Requests waiting for a worker."),
            ("in_flight", "Requests a worker is generating now."),
            ("capacity", "Requests the service holds at once (workers + queue size); more get 503."),
        ):
            yield GaugeMetricFamily(f"{NAME}{key}", text, value=pool[key])
        yield GaugeMetricFamily(
            f"{NAME}uptime_seconds",
            "Seconds since the service started.",
            value=time.monotonic() - self.started,
        )
        up = GaugeMetricFamily(
            f"{NAME}worker_up", "1 while the worker is idle or busy.", labels=["worker", "device"]
        )
        counters = {
            key: CounterMetricFamily(f"{NAME}worker_{key}", text, labels=["worker", "device"])
            for key, text in (
                ("completed", "Jobs the worker completed."),
                ("failed", "Jobs the worker failed."),
                ("restarts", "Times the worker process was restarted."),
            )
        }
        for worker in pool["workers"]:
            labels = [str(worker["index"]), str(worker["device"])]
            up.add_metric(labels, 1.0 if worker["state"] in ("idle", "busy") else 0.0)
            for key, family in counters.items():
                family.add_metric(labels, worker[key])
        yield up
        yield from counters.values()
