"""The statistics behind the rankings and comparisons: bootstrap intervals and rank tests on raw samples.

Every random draw is seeded, so the same database gives the same answer twice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# The interval primitives live in tvmbench/core/stats.py (the adaptive sampler in workers/ uses them too); they are
# re-exported here so the answers keep one stats module to import.
from tvmbench.core.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, Interval, _bootstrap_medians, _clean, median_ci

__all__ = ["DEFAULT_RESAMPLES", "DEFAULT_SEED", "Interval", "geometric_mean", "mann_whitney_p", "median_ci", "ratio_ci"]


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
