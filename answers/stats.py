"""The statistics behind the rankings and comparisons: bootstrap intervals and rank tests on raw samples.

Every random draw is seeded, so the same database gives the same answer twice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_SEED = 20261129
DEFAULT_RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval; lo/hi are NaN when there is nothing to resample."""

    value: float
    lo: float
    hi: float

    def overlaps(self, other: Interval) -> bool:
        """True when the two intervals share any value (or either is unknown: then we cannot tell apart)."""
        if any(math.isnan(x) for x in (self.lo, self.hi, other.lo, other.hi)):
            return True
        return self.lo <= other.hi and other.lo <= self.hi

    def excludes(self, x: float) -> bool:
        """True when ``x`` lies outside the interval (so the estimate differs from ``x`` with confidence)."""
        return not (math.isnan(self.lo) or math.isnan(self.hi)) and (x < self.lo or x > self.hi)


def _clean(samples: Sequence[float] | None) -> np.ndarray:
    arr = np.asarray(list(samples or ()), dtype=float)
    return arr[np.isfinite(arr)]


def _bootstrap_medians(arr: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    idx = rng.integers(0, arr.size, size=(resamples, arr.size))
    # Sorting the small rows and taking the middle is several times faster than np.median(axis=1).
    rows = np.sort(arr[idx], axis=1)
    half = arr.size // 2
    return rows[:, half] if arr.size % 2 else (rows[:, half - 1] + rows[:, half]) / 2


def median_ci(
    samples: Sequence[float] | None,
    confidence: float = 0.95,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """The median of ``samples`` with a percentile-bootstrap confidence interval.

    One sample gives a point with an unknown (NaN) interval: a single number says nothing about noise.
    """
    arr = _clean(samples)
    if arr.size == 0:
        return Interval(math.nan, math.nan, math.nan)
    point = float(np.median(arr))
    if arr.size < 2:
        return Interval(point, math.nan, math.nan)
    boots = _bootstrap_medians(arr, np.random.default_rng(seed), resamples)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(boots, [tail, 100 - tail])
    return Interval(point, float(lo), float(hi))


def ratio_ci(
    base: Sequence[float] | None,
    new: Sequence[float] | None,
    confidence: float = 0.95,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """median(new) / median(base) with a bootstrap interval (both sides resampled independently)."""
    a, b = _clean(base), _clean(new)
    if a.size == 0 or b.size == 0 or np.median(a) <= 0:
        return Interval(math.nan, math.nan, math.nan)
    point = float(np.median(b) / np.median(a))
    if a.size < 2 or b.size < 2:
        return Interval(point, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    ratios = _bootstrap_medians(b, rng, resamples) / _bootstrap_medians(a, rng, resamples)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios[np.isfinite(ratios)], [tail, 100 - tail])
    return Interval(point, float(lo), float(hi))


def mann_whitney_p(base: Sequence[float] | None, new: Sequence[float] | None) -> float:
    """Two-sided Mann-Whitney U p-value of "the two sample sets come from the same distribution".

    NaN with fewer than two samples a side. Note the floor this test has with few samples: with 3 vs 3
    the smallest possible p is 0.1, so such a comparison can never be significant at 0.05.
    """
    from scipy.stats import mannwhitneyu

    a, b = _clean(base), _clean(new)
    if a.size < 2 or b.size < 2:
        return math.nan
    if np.ptp(np.concatenate([a, b])) == 0:
        return 1.0  # identical constants: no evidence of a difference (scipy would warn and return NaN)
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def geometric_mean(values: Sequence[float]) -> float:
    """Geometric mean of positive finite values (NaN when there are none)."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v) and v > 0], dtype=float)
    if arr.size == 0:
        return math.nan
    return float(np.exp(np.mean(np.log(arr))))
