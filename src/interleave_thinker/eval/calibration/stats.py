"""Rank correlations, their averaging across groups, seeded bootstrap intervals, and AUROC, on numpy.

Written plainly (no scipy in the environment) and checked against scipy's definitions: Spearman's rho is
Pearson's r of average ranks (ties share the mean of their ranks, ``scipy.stats.spearmanr``); Kendall's
tau is tau-b (``scipy.stats.kendalltau``'s default): ``(concordant - discordant) / sqrt((n0 - n1) *
(n0 - n2))`` with ``n0 = n(n-1)/2`` and ``n1``, ``n2`` the tied pairs of each side. A constant side has no
correlation: ``nan``, as scipy returns. Every function takes arrays whose last axis holds the items, so
one call computes a whole batch of bootstrap resamples.

>>> round(spearman([1, 2, 3, 4], [1, 3, 2, 4]), 4)
0.8
>>> round(kendall([1, 2, 3, 4], [1, 3, 2, 4]), 4)
0.6667
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

ArrayLike = Sequence[float] | np.ndarray
BATCH = 64
"""Resamples computed at once: the pairwise comparisons of a batch are ``BATCH * n * n`` numbers."""


def _pairs(values: np.ndarray) -> np.ndarray:
    """sign(v_i - v_j) for every pair, shape (..., n, n)."""
    return np.sign(values[..., :, None] - values[..., None, :])


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks along the last axis, ties sharing their mean rank (``rankdata(method="average")``)."""
    below = (values[..., None, :] < values[..., :, None]).sum(axis=-1)
    equal = (values[..., None, :] == values[..., :, None]).sum(axis=-1)
    return below + (equal + 1) / 2.0


def pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r along the last axis (nan where a side is constant)."""
    dx = x - x.mean(axis=-1, keepdims=True)
    dy = y - y.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((dx * dx).sum(axis=-1) * (dy * dy).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(
            denominator > 0, (dx * dy).sum(axis=-1) / np.where(denominator > 0, denominator, 1), np.nan
        )


def spearman_batch(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return pearson(average_ranks(x), average_ranks(y))


def kendall_batch(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    sx, sy = _pairs(x), _pairs(y)
    upper = np.triu(np.ones(x.shape[-1:] * 2, dtype=bool), k=1)
    score = (sx * sy)[..., upper].sum(axis=-1)
    untied_x = (sx[..., upper] != 0).sum(axis=-1)
    untied_y = (sy[..., upper] != 0).sum(axis=-1)
    denominator = np.sqrt(untied_x.astype(float) * untied_y)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, score / np.where(denominator > 0, denominator, 1), np.nan)


def _one(function: Callable[[np.ndarray, np.ndarray], np.ndarray], x: ArrayLike, y: ArrayLike) -> float:
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"two equal-length lists are needed, got shapes {a.shape} and {b.shape}")
    return float(function(a, b))


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    return _one(spearman_batch, x, y)


def kendall(x: ArrayLike, y: ArrayLike) -> float:
    return _one(kendall_batch, x, y)


CORRELATIONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "spearman": spearman_batch,
    "kendall": kendall_batch,
}


def tanh_of_mean(values: Sequence[float]) -> float:
    """VIEScore's ``average_correlation``: ``tanh`` of the plain mean of the correlations.

    Its docstring speaks of Fisher z-scores, but the notebook passes the correlations themselves (no
    ``arctanh`` first), so this is what its published averages are; :func:`fisher_mean` is the textbook
    average, reported beside it."""
    return math.tanh(sum(values) / len(values))


def fisher_mean(values: Sequence[float]) -> float:
    """``tanh(mean(arctanh(r)))``: the Fisher-z average of correlations (|r| = 1 clipped just inside)."""
    clipped = [max(-0.999999, min(0.999999, v)) for v in values]
    return math.tanh(sum(math.atanh(v) for v in clipped) / len(clipped))


def bootstrap(statistic: Callable[[np.ndarray], np.ndarray], n: int, resamples: int, seed: int) -> np.ndarray:
    """``statistic`` on ``resamples`` index draws (with replacement) of ``n`` items, seeded.

    ``statistic`` receives a (batch, n) array of indices and returns one value per row."""
    rng = np.random.default_rng(seed)
    values = []
    for start in range(0, resamples, BATCH):
        indices = rng.integers(0, n, size=(min(BATCH, resamples - start), n))
        values.append(statistic(indices))
    return np.concatenate(values) if values else np.empty(0)


def interval(samples: np.ndarray, level: float = 0.95) -> list[float | None]:
    """The percentile interval of the finite bootstrap values (``[None, None]`` when there are none)."""
    finite = samples[np.isfinite(samples)]
    if not finite.size:
        return [None, None]
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    return [float(low), float(high)]


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties counting one half (the Mann-Whitney AUROC).

    >>> auroc([0.9, 0.8], [0.1, 0.8])
    0.875
    """
    if not positives or not negatives:
        raise ValueError("AUROC needs at least one positive and one negative")
    p, q = np.asarray(positives, dtype=float), np.asarray(negatives, dtype=float)
    wins = (p[:, None] > q[None, :]).sum() + 0.5 * (p[:, None] == q[None, :]).sum()
    return float(wins / (p.size * q.size))


def rounded(value: Any, digits: int = 4) -> Any:
    """A float for JSON: rounded, and None for nan (JSON has no nan)."""
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else round(float(value), digits)
    return value
