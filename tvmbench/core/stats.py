"""Confidence intervals on raw timing samples, shared by the data plane and the answers.

The adaptive sampler (workers/sampling.py, next to the board) and the rankings and comparisons
(tvmbench/answers/stats.py) must agree on what "the 95 % CI of the median" is, so it lives once, here, in a
package both may import (the data plane must not import the control plane). Every random draw is seeded,
so the same samples give the same interval twice.
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


def relative_half_width(interval: Interval) -> float:
    """Half the interval's width as a fraction of its point estimate (NaN when the interval is unknown)."""
    if any(math.isnan(x) for x in (interval.value, interval.lo, interval.hi)) or interval.value <= 0:
        return math.nan
    return (interval.hi - interval.lo) / 2 / interval.value
