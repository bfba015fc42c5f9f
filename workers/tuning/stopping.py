"""When an auto tuning budget stops: its rules as pure functions of the running estimate (no TVM here).

The estimate is the tuning curve's (``workers.tuning.stats.tuning_curve``): MetaSchedule's per-kernel
sum, over tasks, of weight x best candidate time so far. It is not a run of the model (the VM, memory
planning and copies are left out), so "at or below the baseline" means the kernels' estimate is; the
build's measured median says what the program really does.

The rules, in the order they are asked (the first that holds is the one recorded):
- ``until``: the estimate is at or below a target, the baseline's median (``until = "onnxruntime"``) or a
  number of milliseconds; only once every task has a time (before, the sum leaves tasks out);
- ``plateau``: the last ``trials`` trials gained less than ``gain`` (a fraction) of the estimate;
- ``max_minutes``: the tuning time is up. The rules are asked between batches, so this one also cuts the
  batch of candidate builds in flight once every task has a time (``time_is_up``, the builders' ``stop``):
  one batch of slow compiles took light_squeezenet's 6-minute search to 9.8 minutes before it did;
- ``max_trials``: the trial cap is reached (MetaSchedule stops sending candidates there itself).
A search that ends before any of them (every task reached its own cap or ran out of candidates) is
``exhausted``; one that crashes is ``error``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tvmbench.core.records import AutoBudget

UNTIL, PLATEAU, MAX_MINUTES, MAX_TRIALS = "until", "plateau", "max_minutes", "max_trials"
EXHAUSTED, ERROR = "exhausted", "error"
STOP_REASONS = (UNTIL, PLATEAU, MAX_MINUTES, MAX_TRIALS, EXHAUSTED, ERROR)


@dataclass(frozen=True)
class Stop:
    """Why an auto budget stopped: the rule and the values it compared."""

    rule: str
    values: dict[str, Any] = field(default_factory=dict)


def until_target(rules: AutoBudget, baseline: dict[str, Any] | None) -> tuple[float | None, dict[str, Any]]:
    """The until rule's target in ms (None: the rule is off or inactive) and what the provenance says of it.

    ``baseline``: ``{"ms", "source"}`` of the baseline's median on the job's board key, or None when
    neither the sweep nor the database has one (then ``until = "onnxruntime"`` is inactive, and says so).
    """
    if rules.until is None:
        return None, {"until": None}
    if not isinstance(rules.until, str):  # a number of ms; a string names the baseline executor
        return float(rules.until), {"until": rules.until, "until_ms": float(rules.until)}
    if baseline is None or baseline.get("ms") is None:
        why = (baseline or {}).get("why") or f"no {rules.until} result of this model on this board key"
        return None, {"until": rules.until, "until_ms": None, "inactive": why}
    return float(baseline["ms"]), {"until": rules.until, "until_ms": float(baseline["ms"]), "baseline": baseline}


def check(
    rules: AutoBudget,
    *,
    elapsed_s: float,
    trials: int,
    curve: list[list[Any]],
    complete: bool,
    target_ms: float | None,
) -> Stop | None:
    """The first rule that holds now, or None to go on.

    ``elapsed_s``: tuning seconds so far; ``trials``: trials measured (or sent) in this build; ``curve``:
    this build's unthinned tuning curve, one ``[trial, seconds, estimate_ms]`` per measured trial;
    ``complete``: whether every task has a time (stored or measured), so the estimate covers them all.
    """
    estimate = float(curve[-1][2]) if curve else None
    if target_ms is not None and complete and estimate is not None and estimate <= target_ms:
        return Stop(UNTIL, {"estimate_ms": estimate, "until_ms": target_ms})
    window = rules.plateau_trials
    if window is not None and rules.plateau_gain is not None and len(curve) > window:
        before, now = float(curve[-1 - window][2]), float(curve[-1][2])
        gained = (before - now) / before if before > 0 else 0.0
        if gained < rules.plateau_gain:
            return Stop(
                PLATEAU,
                {"trials": window, "gain": rules.plateau_gain, "from_ms": before, "to_ms": now, "gained": gained},
            )
    if elapsed_s >= rules.max_minutes * 60.0:
        return Stop(MAX_MINUTES, {"minutes": elapsed_s / 60.0, "max_minutes": rules.max_minutes})
    if trials >= rules.max_trials:
        return Stop(MAX_TRIALS, {"trials": trials, "max_trials": rules.max_trials})
    return None


def time_is_up(rules: AutoBudget, *, elapsed_s: float, complete: Callable[[], bool]) -> bool:
    """Whether the candidate builds in flight are cut (the builders' ``stop``): ``max_minutes`` has passed
    and every task has a time (``complete``, asked only then: the builders ask four times a second). The
    first round is never cut: a task without a time has no record to apply."""
    return elapsed_s >= rules.max_minutes * 60.0 and complete()


def ended(rules: AutoBudget, stop: Stop | None, trials: int, error: str | None = None) -> Stop:
    """What stopped a search that has returned: the rule that stopped it, else the cap, a crash or exhaustion."""
    if stop is not None:
        return stop
    if error is not None:
        return Stop(ERROR, {"error": error, "trials": trials})
    if trials >= rules.max_trials:
        return Stop(MAX_TRIALS, {"trials": trials, "max_trials": rules.max_trials})
    return Stop(EXHAUSTED, {"trials": trials, "max_trials": rules.max_trials})


def rules_of(rules: AutoBudget, until: dict[str, Any]) -> dict[str, Any]:
    """The auto budget's rules as its provenance keeps them (``tuning["auto"]``)."""
    plateau = {"trials": rules.plateau_trials, "gain": rules.plateau_gain} if rules.plateau_trials is not None else None
    return {**until, "max_minutes": rules.max_minutes, "plateau": plateau, "max_trials": rules.max_trials}
