"""The stop rule of the adaptive sampler (workers/sampling.py), against scripted timers and clocks.

These are the seam's unit tests: the timer is a function returning samples, the clock a counter. The
real boards run the same sampler in tests/test_measurement.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import numpy as np
import pytest

from orchestrator.spec import SpecError, parse_spec
from tvmbench.core.records import Job, MeasureSettings, ModelRef, TargetSpec, canonical_hash
from tvmbench.core.stats import median_ci, relative_half_width
from workers.sampling import (
    STOP_CI,
    STOP_MAX_REPEAT,
    STOP_MAX_S,
    SamplingPlan,
    next_batch,
    sample,
)


class FakeBoard:
    """A timer whose samples come from a seeded distribution and whose every sample costs clock time."""

    def __init__(self, rel_noise: float, seconds_per_sample: float = 0.01, warm_value: float = 1000.0) -> None:
        self.rng = np.random.default_rng(1)
        self.rel_noise = rel_noise
        self.per = seconds_per_sample
        self.now = 0.0
        self.asks: list[int] = []
        self.warm_value = warm_value

    def clock(self) -> float:
        return self.now

    def timer(self, k: int) -> list[float]:
        self.asks.append(k)
        self.now += k * self.per + 0.002  # each ask is a round trip too
        if len(self.asks) == 1 and self.warm_value:  # the warmup ask: cold caches, far slower
            return [self.warm_value] * k
        return list(10.0 * (1 + self.rel_noise * self.rng.standard_normal(k)))


def test_stable_samples_stop_by_ci_reached_and_warmup_is_not_sampled() -> None:
    board = FakeBoard(rel_noise=0.01)
    plan = SamplingPlan(warmup=4, min_repeat=5, max_repeat=500, target_rel_ci=0.02, max_s=60)
    got = sample(board.timer, plan, clock=board.clock)
    assert got.stop_reason == STOP_CI
    assert got.warmup_ms == (1000.0,) * 4
    assert 1000.0 not in got.samples_ms and len(got.samples_ms) >= plan.min_repeat
    # The reported CI is the stats module's, recomputed from the kept samples.
    assert got.ci == median_ci(got.samples_ms)
    assert got.rel_ci == pytest.approx(relative_half_width(got.ci)) and got.rel_ci <= 0.02
    assert got.calls == len(board.asks) and board.asks[0] == 4


def test_unreachable_target_stops_by_max_s_near_the_cap() -> None:
    board = FakeBoard(rel_noise=0.2, warm_value=0)
    plan = SamplingPlan(warmup=0, min_repeat=5, max_repeat=100_000, target_rel_ci=0.0001, max_s=2.0)
    got = sample(board.timer, plan, clock=board.clock)
    assert got.stop_reason == STOP_MAX_S
    # Batches are cut to the time left, so the run ends within one round trip and a sample of its cap.
    assert 1.9 <= got.elapsed_s <= 2.0 + 0.01 + 0.002
    # Batches grow: a couple of hundred samples took a handful of asks, not one per sample.
    assert len(got.samples_ms) > 150 and got.calls < 25


def test_max_repeat_caps_an_adaptive_run() -> None:
    board = FakeBoard(rel_noise=0.3, warm_value=0)
    plan = SamplingPlan(warmup=0, min_repeat=5, max_repeat=40, target_rel_ci=0.001, max_s=None)
    got = sample(board.timer, plan, clock=board.clock)
    assert got.stop_reason == STOP_MAX_REPEAT and len(got.samples_ms) == 40


def test_fixed_repeat_is_one_ask_of_repeat_samples() -> None:
    board = FakeBoard(rel_noise=0.05, warm_value=0)
    got = sample(board.timer, SamplingPlan.from_settings(MeasureSettings(repeat=7)), clock=board.clock)
    assert board.asks == [7] and len(got.samples_ms) == 7 and got.stop_reason == STOP_MAX_REPEAT
    assert got.warmup_ms == () and math.isfinite(got.rel_ci)


def test_next_batch_grows_toward_the_target_but_at_most_doubles() -> None:
    assert next_batch(10, 0.04, 0.02) == 10  # would want ~34 more: capped at doubling
    assert next_batch(100, 0.021, 0.02) == 25  # almost there: still a quarter more, not one sample
    assert next_batch(8, math.nan, 0.02) == 8


def test_adaptive_defaults_and_session_bound() -> None:
    plan = SamplingPlan.from_settings(MeasureSettings(target_rel_ci=0.02, session_timeout_s=20))
    assert plan.adaptive and plan.min_repeat == 5 and plan.max_s == 10  # half the session at most


def _job(measure: MeasureSettings) -> Job:
    model = ModelRef("m", "0" * 64, "m.onnx", (("x", (1, 4), "float32"),))
    return Job(model, TargetSpec("host", {"kind": "llvm"}, "host", "x86_64"), "vm-bytecode", 2, "per-target", measure)


def test_job_keys_of_sweeps_without_the_new_keys_are_unchanged() -> None:
    measure = MeasureSettings(number=5, repeat=4)
    job = _job(measure)
    old = {
        k: v
        for k, v in asdict(measure).items()
        if k not in ("warmup", "min_repeat", "max_repeat", "target_rel_ci", "max_s")
    }
    legacy_key = canonical_hash({**job.build_config(), "board_key": "host", "measure": old})
    assert job.key == legacy_key
    assert _job(MeasureSettings(number=5, repeat=4, warmup=2)).key != legacy_key


@pytest.mark.parametrize(
    ("measure", "message"),
    [
        ("repeat = 5\ntarget_rel_ci = 0.02", "choose one"),
        ("min_repeat = 5", "add target_rel_ci"),
        ("target_rel_ci = 2", "a fraction of the median"),
        ("target_rel_ci = 0.02\nmin_repeat = 10\nmax_repeat = 5", "above measure.max_repeat"),
        ("target_rel_ci = 0.02\nmax_s = 500", "at most half of session_timeout_s"),
        ("target_rel_ci = 0.02\nmax_s = 200\nsession_timeout_s = 300", "max_s = 200 must be at most half"),
        ("target_rel_ci = 0.02\nmax_repeat = 100000000000", "measure.max_repeat = 100000000000: at most 100000"),
        ("warmup = 1000000000", "measure.warmup = 1000000000: at most 10000"),
        ("warmup = -1", "non-negative"),
        ("max_repeat = 2.5\ntarget_rel_ci = 0.1", "integer"),
    ],
)
def test_bad_sampling_keys_are_one_line_errors(tmp_path, models_dir, measure: str, message: str) -> None:
    text = f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n[measure]\n{measure}\n'
    with pytest.raises(SpecError, match=message):
        parse_spec(text, base=tmp_path)


def test_a_zero_width_ci_from_quantized_samples_says_timer_resolution() -> None:
    """A 1e-6 target "reached" by samples that are a few timer ticks: the stop reason says why."""
    ticks = iter([1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1] * 50)

    def quantized(k: int) -> list[float]:
        return [0.001 * next(ticks) for _ in range(k)]  # a 1 µs timer: every sample is 1 or 2 ticks

    plan = SamplingPlan(warmup=0, min_repeat=5, max_repeat=500, target_rel_ci=1e-6, max_s=None)
    got = sample(quantized, plan)
    assert got.stop_reason == STOP_CI and got.rel_ci == 0  # the column keeps its enum value
    assert got.resolution_limited and got.stop_detail == "ci-reached (timer resolution)"
    assert got.record()["stop_reason"] == "ci-reached (timer resolution)" and got.record()["resolution_limited"]
    # A CI that is narrow because the samples agree closely (not identical) is a plain ci-reached.
    board = FakeBoard(rel_noise=0.01, warm_value=0)
    normal = sample(board.timer, replace(plan, target_rel_ci=0.02, max_s=60), clock=board.clock)
    assert normal.stop_reason == STOP_CI and not normal.resolution_limited
    assert normal.record()["stop_reason"] == "ci-reached"
