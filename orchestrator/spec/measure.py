"""The [measure] and [tolerance] tables of a sweep file: how a program is timed and checked."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from orchestrator.spec.checks import SpecError, typed, unknown_keys
from tvmbench.core.records import MeasureSettings

_TOLERANCE_KEYS = {"atol", "rtol"}
_POSITIVE_KEYS = {"number", "repeat", "session_timeout_s", "min_repeat", "max_repeat", "target_rel_ci", "max_s"}
_MEASURE_KEYS = {
    "number",
    "repeat",
    "min_repeat_ms",
    "cooldown_ms",
    "seed",
    "session_timeout_s",
    "device_wait_s",
    "profile",
    "warmup",
    "min_repeat",
    "max_repeat",
    "target_rel_ci",
    "max_s",
}
# Upper bounds: past them a job runs for days, or a timeout overflows where it reaches C++ as an int.
_MEASURE_LIMITS: dict[str, float] = {
    "number": 1_000_000,
    "repeat": 10_000,
    "min_repeat_ms": 3_600_000,
    "cooldown_ms": 3_600_000,
    "session_timeout_s": 86_400,
    "device_wait_s": 86_400,
    "seed": 2**63 - 1,
    # Sampling: 100,000 samples is already hours for a millisecond model; warmup is discarded time.
    "warmup": 10_000,
    "min_repeat": 100_000,
    "max_repeat": 100_000,
    "max_s": 43_200,
}


def check_sampling(measure: dict[str, Any], values: dict[str, Any]) -> None:
    """The sampling keys must make one stop rule: fixed ``repeat``, or adaptive ``target_rel_ci``."""
    adaptive = values.get("target_rel_ci") is not None
    if adaptive and "repeat" in measure:
        raise SpecError(
            "measure.repeat and measure.target_rel_ci: choose one; repeat is a fixed sample count, "
            "target_rel_ci samples until the CI is narrow enough (bound it with min_repeat/max_repeat/max_s)"
        )
    if not adaptive:
        for key in ("min_repeat", "max_repeat"):
            if key in measure:
                raise SpecError(
                    f"measure.{key} bounds adaptive sampling: add target_rel_ci (e.g. 0.02), or use repeat = N"
                )
    if adaptive and values["target_rel_ci"] >= 1:
        raise SpecError(
            f"measure.target_rel_ci = {values['target_rel_ci']}: a fraction of the median, e.g. 0.02 for 2 %"
        )
    low, high = values.get("min_repeat"), values.get("max_repeat")
    if low is not None and high is not None and low > high:
        raise SpecError(f"measure.min_repeat = {low} is above measure.max_repeat = {high}")
    timeout = values.get("session_timeout_s", MeasureSettings.session_timeout_s)
    if values.get("max_s") is not None and values["max_s"] > timeout / 2:
        raise SpecError(
            f"measure.max_s = {values['max_s']:g} must be at most half of session_timeout_s = {timeout:g} "
            "(the session also uploads, loads, warms up and checks the model): lower max_s or raise "
            "session_timeout_s"
        )


def parse_measure(data: dict[str, Any]) -> MeasureSettings:
    measure = typed("[measure]", data.get("measure", {}), dict, "a table")
    tolerance = typed("[tolerance]", data.get("tolerance", {}), dict, "a table")
    unknown_keys("[measure]", measure, _MEASURE_KEYS)
    unknown_keys("[tolerance]", tolerance, _TOLERANCE_KEYS)
    values: dict[str, Any] = {}
    for f in fields(MeasureSettings):
        section, where = (tolerance, "tolerance") if f.name in _TOLERANCE_KEYS else (measure, "measure")
        if f.name not in section:
            continue
        value = section[f.name]
        if f.type in ("bool", bool):
            values[f.name] = typed(f"{where}.{f.name}", value, bool, "true or false")
            continue
        integer = f.type in ("int", int, "int | None")
        if integer:
            typed(f"{where}.{f.name}", value, int, "a non-negative integer")
        else:
            typed(f"{where}.{f.name}", value, (int, float), "a number")
        if value != value:  # nan: every comparison with it is false, so every output would be "wrong"
            raise SpecError(f"{where}.{f.name} = nan: give a number")
        if value < 0 or (f.name in _POSITIVE_KEYS and value == 0):
            raise SpecError(f"{where}.{f.name} = {value}: must be {'positive' if value == 0 else 'non-negative'}")
        if f.name in _MEASURE_LIMITS and not value <= _MEASURE_LIMITS[f.name]:
            raise SpecError(
                f"{where}.{f.name} = {value}: at most {_MEASURE_LIMITS[f.name]:g} (a sweep that never ends "
                "helps nobody; cancel and resume work in steps)"
            )
        if value in (float("inf"), float("-inf")):  # an infinite tolerance would pass any output as correct
            raise SpecError(f"{where}.{f.name} = {value}: give a finite number")
        values[f.name] = value if integer else float(value)
    check_sampling(measure, values)
    return MeasureSettings(**values)
