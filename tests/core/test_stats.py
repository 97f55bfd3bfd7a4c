"""One percentile definition (linear interpolation, numpy's default) behind every reported latency."""

from __future__ import annotations

import random

import pytest

from interleave_thinker.core.stats import latency_percentiles, percentile
from interleave_thinker.core.types import PlannerRecord, Request, Trace
from interleave_thinker.runtime.limits import BackendStats
from interleave_thinker.runtime.reports import summarize
from interleave_thinker.server.generator.metrics import ServiceMetrics


def test_percentile_interpolates_linearly_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([4.0, 3.0, 2.0, 1.0], 90) == pytest.approx(3.7)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="from 0 to 100"):
        percentile([1.0], 101)


def test_percentile_matches_statistics_inclusive_quantiles() -> None:
    import statistics

    rng = random.Random(7)
    for _ in range(200):
        values = [rng.uniform(0, 10) for _ in range(rng.randint(2, 30))]
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        for q in (1, 25, 50, 90, 99):
            assert percentile(values, q) == pytest.approx(cuts[q - 1])


def test_summary_limits_and_metrics_report_the_same_p50() -> None:
    latencies = [1.0, 2.0, 3.0, 4.0]
    traces = {
        f"r{i}": Trace(request=Request(text="x"), planner=PlannerRecord(raw_replies=["r"], duration_s=s))
        for i, s in enumerate(latencies)
    }
    summary = summarize(traces)
    assert summary["latency_from_traces"]["planner"] == {
        "p50_s": 2.5,
        "p90_s": 3.7,
        "p99_s": 3.97,
        "count": 4,
    }
    stats = BackendStats("planner", limit=1)
    for seconds in latencies:
        stats.record(seconds)
    assert stats.summary(wall=10.0)["latency_p50_s"] == 2.5
    metrics = ServiceMetrics()
    for seconds in latencies:
        metrics.record("completed", latency=seconds, pipeline=seconds)
    assert metrics.snapshot()["latency_s"]["p50"] == 2.5
    assert metrics.snapshot()["pipeline_s"]["p50"] == 2.5
    assert latency_percentiles([]) == {"p50_s": None, "p90_s": None, "p99_s": None}
