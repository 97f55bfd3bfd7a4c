"""One percentile for every latency figure the package reports (``summary.json``, ``/metrics.json``, limits).

Why one: two definitions gave two answers for the same numbers (p50 of [1, 2, 3, 4] was 3.0 in
``summary.json`` and 2.0 in ``/metrics``, now ``/metrics.json``). The definition is linear interpolation between the closest
ranks, numpy's default (``method="linear"``), the same as ``statistics.quantiles(method="inclusive")``:
p50 is the median, and p0/p100 are the smallest and largest values.
"""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values`` (any order), or None when there are none.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.5
    >>> percentile([4.0, 1.0, 3.0, 2.0], 90)
    3.7
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q}: must be from 0 to 100.")
    ordered = sorted(values)
    if not ordered:
        return None
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_percentiles(values: Sequence[float], prefix: str = "") -> dict[str, float | None]:
    """``{prefix}p50_s``, ``p90_s`` and ``p99_s`` of latencies in seconds, rounded to 4 decimals (None: no values)."""
    found = {q: percentile(values, q) for q in (50, 90, 99)}
    return {f"{prefix}p{q}_s": None if v is None else round(v, 4) for q, v in found.items()}
