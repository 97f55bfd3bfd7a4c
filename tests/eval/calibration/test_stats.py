"""The plain statistics against their textbook definitions, computed the slow way on seeded data."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np

from interleave_thinker.eval.calibration import stats


def _ranks(values: list[float]) -> list[float]:
    return [sum(v < x for v in values) + (sum(v == x for v in values) + 1) / 2 for x in values]


def _pearson(x: list[float], y: list[float]) -> float:
    mx, my = sum(x) / len(x), sum(y) / len(y)
    num = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    return num / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))


def _tau_b(x: list[float], y: list[float]) -> float:
    s = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        a, b = (x[i] > x[j]) - (x[i] < x[j]), (y[i] > y[j]) - (y[i] < y[j])
        s, tx, ty = s + a * b, tx + (a != 0), ty + (b != 0)
    return s / math.sqrt(tx * ty)


def test_spearman_and_kendall_with_ties_match_the_definitions() -> None:
    rng = random.Random(3)
    for _ in range(5):
        x = [rng.choice([0, 0.5, 1]) for _ in range(40)]
        y = [rng.choice([0, 2, 4, 6, 8, 10]) / 10 for _ in range(40)]
        assert math.isclose(stats.spearman(x, y), _pearson(_ranks(x), _ranks(y)), abs_tol=1e-12)
        assert math.isclose(stats.kendall(x, y), _tau_b(x, y), abs_tol=1e-12)
    assert math.isnan(stats.spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(stats.kendall([1, 1, 1], [1, 2, 3]))


def test_batches_equal_single_calls_and_averages() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((3, 12)), rng.random((3, 12))
    batch = stats.spearman_batch(x, y)
    assert [round(float(v), 12) for v in batch] == [
        round(stats.spearman(a, b), 12) for a, b in zip(x, y, strict=True)
    ]
    assert math.isclose(stats.tanh_of_mean([0.2, 0.4]), math.tanh(0.3))
    assert math.isclose(stats.fisher_mean([0.5, 0.5]), 0.5)
    assert stats.auroc([0.9, 0.8], [0.1, 0.8]) == 0.875
