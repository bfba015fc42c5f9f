"""How many samples a run takes: warmup, then batches of repeats until a stop rule fires.

A sample is what TVM's ``time_evaluator`` reports for one repeat: the mean of ``number`` runs. The
sampler asks a *timer* for ``k`` samples at a time; over RPC each ask is one round trip plus one untimed
call that ``time_evaluator`` makes before its repeats (checked on TVM 0.27: ``repeat=3`` runs ``main`` 4
times). So batches grow geometrically, sized from how far the interval still is from the target, and the
number of asks is logged: a few per run, not one per sample.

Stop rules, checked after every batch, in this order:
- ``ci-reached``: at least ``min_repeat`` samples and the 95 % CI half-width of the median is within
  ``target_rel_ci`` of the median (adaptive mode only);
- ``max-repeat``: ``max_repeat`` samples (in fixed mode ``repeat`` is both minimum and maximum);
- ``max-s``: the time cap; a batch is also cut to what the remaining time allows, from the time per
  sample seen so far, so a run ends near its cap instead of one whole batch past it.
The interval is ``core.stats.median_ci``, the same one the rankings use.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tvmbench.core.stats import Interval, median_ci, relative_half_width

STOP_CI = "ci-reached"
STOP_MAX_REPEAT = "max-repeat"
STOP_MAX_S = "max-s"
STOP_REASONS = (STOP_CI, STOP_MAX_REPEAT, STOP_MAX_S)
# Said beside ci-reached when the interval has zero width: the samples are a few quantized timer values
# (the same tick count again and again), so "within 1e-6 of the median" says more about the timer than
# about the model. The stored stop_reason column keeps the plain enum (String(16), and readers compare
# it); runs.sampling's stop_reason and resolution_limited carry the caveat.
TIMER_RESOLUTION = "timer resolution"

# Adaptive defaults when a sweep gives target_rel_ci alone: enough samples for a bootstrap interval to
# mean something, a ceiling that keeps the interval computation cheap, and a cap well inside the
# default 120 s session.
DEFAULT_MIN_REPEAT = 5
DEFAULT_MAX_REPEAT = 500
DEFAULT_MAX_S = 30.0
# With a time cap and nothing yet to estimate the time per sample from, the first ask is this small.
PROBE = 5

Timer = Callable[[int], Sequence[float]]


@dataclass(frozen=True)
class SamplingPlan:
    """The stop rule of one run, resolved from a job's measure settings."""

    warmup: int
    min_repeat: int
    max_repeat: int
    target_rel_ci: float | None = None
    max_s: float | None = None

    @property
    def adaptive(self) -> bool:
        return self.target_rel_ci is not None

    @classmethod
    def from_settings(cls, settings: Any) -> SamplingPlan:
        """From MeasureSettings: adaptive when ``target_rel_ci`` is set, else ``repeat`` fixed samples."""
        warmup = int(getattr(settings, "warmup", 0) or 0)
        max_s = getattr(settings, "max_s", None)
        target = getattr(settings, "target_rel_ci", None)
        if target is None:
            return cls(warmup, settings.repeat, settings.repeat, None, max_s)
        low = getattr(settings, "min_repeat", None) or DEFAULT_MIN_REPEAT
        high = getattr(settings, "max_repeat", None) or max(DEFAULT_MAX_REPEAT, low)
        if max_s is None:  # leave the session time for upload, load and the check
            max_s = min(DEFAULT_MAX_S, getattr(settings, "session_timeout_s", 120.0) / 2)
        return cls(warmup, low, high, float(target), max_s)


@dataclass(frozen=True)
class Sampled:
    """What a run's sampling produced and why it stopped."""

    samples_ms: tuple[float, ...]
    warmup_ms: tuple[float, ...]  # the discarded warmup samples: never among samples_ms
    stop_reason: str
    ci: Interval  # of the median of samples_ms (NaN bounds with fewer than two samples)
    rel_ci: float  # half-width / median; NaN when unknown
    calls: int  # timer asks (RPC round trips), warmup included
    elapsed_s: float
    target_rel_ci: float | None

    @property
    def resolution_limited(self) -> bool:
        """The CI was reached only because it has zero width: identical (quantized) samples."""
        return self.stop_reason == STOP_CI and self.rel_ci == 0 and len(self.samples_ms) > 1

    @property
    def stop_detail(self) -> str:
        """The stop reason as shown: ``ci-reached (timer resolution)`` for a zero-width interval."""
        return f"{self.stop_reason} ({TIMER_RESOLUTION})" if self.resolution_limited else self.stop_reason

    def record(self) -> dict[str, Any]:
        """The JSON kept with the run (runs.sampling)."""
        return {
            "stop_reason": self.stop_detail,
            "resolution_limited": self.resolution_limited,
            "samples": len(self.samples_ms),
            "warmup": len(self.warmup_ms),
            "warmup_ms": list(self.warmup_ms),
            "ci_lo_ms": _finite(self.ci.lo),
            "ci_hi_ms": _finite(self.ci.hi),
            "rel_ci": _finite(self.rel_ci),
            "target_rel_ci": self.target_rel_ci,
            "timer_calls": self.calls,
            "elapsed_s": self.elapsed_s,
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no NaN


def next_batch(n: int, rel_ci: float, target: float | None) -> int:
    """How many samples to ask for next, having ``n`` with relative CI ``rel_ci``.

    The half-width shrinks about as 1/sqrt(n), so ``n * (rel/target)^2`` samples would reach the target;
    ask for the difference, at least a quarter of what there is (a CI that hovers near the target would
    otherwise cost one round trip per sample) and at most as many again (the estimate is rough early on).
    """
    if target is None or not math.isfinite(rel_ci) or rel_ci <= 0:
        return max(1, n)
    wanted = math.ceil(n * (rel_ci / target) ** 2 * 1.1) - n
    return max(2, n // 4, min(wanted, n))


def sample(timer: Timer, plan: SamplingPlan, *, clock: Callable[[], float] = time.monotonic) -> Sampled:
    """Warm up, then sample in batches until ``plan``'s stop rule fires."""
    start = clock()
    calls = 0
    warm: list[float] = []
    if plan.warmup > 0:
        warm = [float(x) for x in timer(plan.warmup)]
        calls += 1
    per_sample = (clock() - start) / len(warm) if warm else None  # seconds, overheads included
    sampling_start = clock()
    samples: list[float] = []
    ci, rel = Interval(math.nan, math.nan, math.nan), math.nan
    batch = plan.min_repeat
    if plan.max_s is not None and per_sample is None:
        batch = min(batch, PROBE)
    reason = STOP_MAX_REPEAT
    while True:
        batch = min(batch, plan.max_repeat - len(samples))
        if plan.max_s is not None and per_sample is not None:
            room = math.floor((plan.max_s - (clock() - start)) / per_sample) if per_sample > 0 else batch
            batch = min(batch, room)
        if batch < 1:
            if samples:  # no room left before the cap for even one more sample
                reason = STOP_MAX_S
                break
            batch = 1  # a run has at least one sample, however slow
        samples.extend(float(x) for x in timer(batch))
        calls += 1
        per_sample = (clock() - sampling_start) / len(samples)
        if plan.adaptive or len(samples) >= plan.max_repeat:
            ci = median_ci(samples)
            rel = relative_half_width(ci)
        if plan.adaptive and len(samples) >= plan.min_repeat and rel <= plan.target_rel_ci:
            reason = STOP_CI
            break
        if len(samples) >= plan.max_repeat:
            reason = STOP_MAX_REPEAT
            break
        if plan.max_s is not None and clock() - start >= plan.max_s:
            reason = STOP_MAX_S
            break
        if plan.adaptive:
            batch = next_batch(len(samples), rel, plan.target_rel_ci)
            batch = max(batch, plan.min_repeat - len(samples))
        else:
            batch = plan.max_repeat - len(samples)
    if not math.isfinite(ci.value) and samples:
        ci = median_ci(samples)
        rel = relative_half_width(ci)
    return Sampled(
        samples_ms=tuple(samples),
        warmup_ms=tuple(warm),
        stop_reason=reason,
        ci=ci,
        rel_ci=rel,
        calls=calls,
        elapsed_s=clock() - start,
        target_rel_ci=plan.target_rel_ci,
    )


def time_evaluator_timer(vm: Any, dev: Any, settings: Any, args: Sequence[Any], func: str = "main") -> Timer:
    """A timer over ``vm.time_evaluator``: ``timer(k)`` returns ``k`` samples in ms (one RPC call when remote).

    One evaluator is made per batch size and reused (making one is a round trip of its own).
    """
    evaluators: dict[int, Any] = {}

    def timer(k: int) -> list[float]:
        if k not in evaluators:
            evaluators[k] = vm.time_evaluator(
                func,
                dev,
                number=settings.number,
                repeat=k,
                min_repeat_ms=settings.min_repeat_ms,
                cooldown_interval_ms=settings.cooldown_ms,
            )
        return [float(r) * 1e3 for r in evaluators[k](*args).results]

    return timer
