"""Confidence intervals for evaluation: Wilson for rates, t for means, a paired bootstrap for
the difference between two agents who played the same matches.

All intervals are two-sided at `level` (default 95%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials ((0, 1) when n == 0).

    center = (p + z²/2n) / (1 + z²/n),  half width = z sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n).
    """
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import norm  # start-up time: scipy

    z = float(norm.ppf(0.5 + level / 2))
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (0.0 if k == 0 else max(0.0, center - half)), (
        1.0 if k == n else min(1.0, center + half)
    )


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student t interval of the mean (a point when n < 2 or no spread)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return 0.0, 0.0, 0.0
    m = float(x.mean())
    if len(x) < 2:
        return m, m, m
    from scipy.stats import t  # start-up time: scipy

    half = float(t.ppf(0.5 + level / 2, len(x) - 1)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - half, m + half


def ratio_ci(
    counts: list[float], sizes: list[float], level: float = 0.95
) -> tuple[float, float, float]:
    """(rate, low, high) of sum(counts) / sum(sizes) over clusters of unequal size (e.g. cooperative moves
    over the rounds of matches of random length): Student t interval of the ratio estimator, its standard
    error by the delta method, sqrt(sum (c_i - rate n_i)^2 / (m (m - 1))) / mean(n). With equal sizes it is
    `mean_ci` of the per-cluster rates."""
    c, n = np.asarray(counts, dtype=float), np.asarray(sizes, dtype=float)
    if len(c) == 0 or n.sum() <= 0:
        return 0.0, 0.0, 0.0
    rate = float(c.sum() / n.sum())
    if len(c) < 2:
        return rate, rate, rate
    from scipy.stats import t  # start-up time: scipy

    se = math.sqrt(float(((c - rate * n) ** 2).sum()) / (len(c) * (len(c) - 1))) / float(n.mean())
    half = float(t.ppf(0.5 + level / 2, len(c) - 1)) * se
    return rate, rate - half, rate + half


@dataclass
class PairedDiff:
    """Agent minus baseline over paired matches, with a bootstrap interval."""

    mean: float
    low: float
    high: float
    n: int  # pairs

    @property
    def verdict(self) -> str:
        """better / worse when the interval excludes 0, else no detectable difference."""
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "no detectable difference"


def paired_bootstrap(
    diffs: list[float],
    strata: list | None = None,
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedDiff:
    """Percentile bootstrap interval of the mean paired difference.

    Each resample draws pairs with replacement, within each stratum (e.g. opponent and
    seat, so a pooled estimate keeps every cell's share of the pairs). With one stratum
    and differences in {0, 1}, the resampled mean is Binomial(n, p)/n: its quantiles are
    the interval (the hand-checkable case in the tests).
    """
    d = np.asarray(diffs, dtype=float)
    if len(d) == 0:
        return PairedDiff(0.0, 0.0, 0.0, 0)
    groups = {}
    for i, s in enumerate(strata if strata is not None else [0] * len(d)):
        groups.setdefault(s, []).append(i)
    rng = np.random.default_rng(seed)
    totals = np.zeros(resamples)
    for idx in groups.values():
        x = d[idx]
        totals += x[rng.integers(0, len(x), size=(resamples, len(x)))].sum(axis=1)
    means = totals / len(d)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha], method="inverted_cdf")
    return PairedDiff(float(d.mean()), float(low), float(high), len(d))
