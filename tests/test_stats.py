"""Bootstrap intervals, rank tests and the regression methods on known data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.synthetic import noisy
from tvmbench.answers import regressions, stats


def test_median_ci_contains_median_and_is_seeded() -> None:
    samples = noisy(10.0, n=30, rel=0.05)
    ci = stats.median_ci(samples)
    assert ci.lo < ci.value < ci.hi
    assert ci.hi - ci.lo < 1.0  # 5 % noise, 30 samples: the median is known to well under 10 %
    assert stats.median_ci(samples) == ci  # same seed, same answer


def test_median_ci_of_one_sample_is_unknown() -> None:
    ci = stats.median_ci([3.0])
    assert ci.value == 3.0 and math.isnan(ci.lo) and math.isnan(ci.hi)
    assert ci.overlaps(stats.median_ci(noisy(100.0)))  # unknown width never claims a difference


def test_overlap_and_exclusion() -> None:
    fast, slow = stats.median_ci(noisy(10.0, seed=1)), stats.median_ci(noisy(20.0, seed=2))
    near = stats.median_ci(noisy(10.05, seed=3))
    assert not fast.overlaps(slow)
    assert fast.overlaps(near)


def test_ratio_ci_and_mann_whitney_separate_real_from_noise() -> None:
    base, same, slow = noisy(5.0, seed=1), noisy(5.0, seed=2), noisy(15.0, seed=3)
    tripled = stats.ratio_ci(base, slow)
    assert 2.8 < tripled.value < 3.2 and tripled.excludes(1.0)
    assert stats.mann_whitney_p(base, slow) < 0.001
    unchanged = stats.ratio_ci(base, same)
    assert not unchanged.excludes(1.0)
    assert stats.mann_whitney_p(base, same) > 0.05
    assert math.isnan(stats.mann_whitney_p([1.0], [2.0, 3.0]))
    assert stats.mann_whitney_p([2.0, 2.0], [2.0, 2.0]) == 1.0


def test_geometric_mean() -> None:
    assert stats.geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    assert stats.geometric_mean([4.0, 1.0]) == pytest.approx(2.0)
    assert math.isnan(stats.geometric_mean([]))


@pytest.mark.parametrize("method", sorted(regressions.METHODS))
def test_regression_methods_flag_a_jump_not_noise(method: str) -> None:
    judge, p = regressions.METHODS[method], regressions.Params()
    history = np.array(noisy(10.0, n=12, rel=0.03, seed=4))
    assert judge(history, 30.0, p).regressed
    assert not judge(history, 10.2, p).regressed
    assert not judge(history, 7.0, p).regressed  # faster is not a regression


def test_mad_resists_an_outlier_in_history() -> None:
    history = np.array([*noisy(10.0, n=11, rel=0.01, seed=5), 40.0])  # one wild result in the past
    p = regressions.Params()
    assert regressions.METHODS["mad"](history, 13.0, p).regressed
    assert not regressions.METHODS["zscore"](history, 13.0, p).regressed  # the outlier inflates the std


def test_methods_are_pluggable() -> None:
    @regressions.register("always")
    def always(history, latest, p):  # type: ignore[no-untyped-def]
        return regressions.Verdict(True, float(history.mean()), 1.0, 99.0)

    try:
        assert regressions.METHODS["always"](np.array([1.0, 2.0]), 1.0, regressions.Params()).regressed
    finally:
        del regressions.METHODS["always"]
