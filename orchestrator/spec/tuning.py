"""The [tuning] table of a sweep file: MetaSchedule's search settings."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from orchestrator.spec.checks import SpecError, typed, unknown_keys
from tvmbench.core.records import COST_MODELS, MODULE_EQUALITIES, TuningSettings

MAX_TUNING_BUDGET = 100_000  # trials per job; far beyond any useful search (20k is ResNet-50 territory)


def parse_tuning(data: dict[str, Any]) -> TuningSettings:
    """The [tuning] table: MetaSchedule's search settings, each checked like every other key."""
    table = typed("[tuning]", data.get("tuning", {}), dict, "a table")
    allowed = {f.name for f in fields(TuningSettings)} | {"trials_per_task"}
    unknown_keys("[tuning]", table, allowed)
    if "trials_per_task" in table and "max_trials_per_task" in table:
        raise SpecError("[tuning]: give trials_per_task or max_trials_per_task, not both (they are the same)")
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = "max_trials_per_task" if key == "trials_per_task" else key
        where = f"tuning.{key}"
        if name == "cost_model":
            if value not in COST_MODELS:
                raise SpecError(f"{where} = {value!r}: use " + " or ".join(f'"{c}"' for c in COST_MODELS))
        elif name == "module_equality":
            if value not in MODULE_EQUALITIES:
                raise SpecError(f"{where} = {value!r}: use " + " or ".join(f'"{c}"' for c in MODULE_EQUALITIES))
        elif name == "warm_start":
            typed(where, value, bool, "true or false")
        elif name in ("builder_timeout_s", "runner_timeout_s", "device_wait_s"):
            typed(where, value, (int, float), "a number of seconds")
            if not 0 < value <= 86_400:
                raise SpecError(f"{where} = {value}: must be positive seconds, at most a day")
            value = float(value)
        else:  # the integer settings
            typed(where, value, int, "an integer")
            low, high = (0, 2**31 - 1) if name == "seed" else (1, MAX_TUNING_BUDGET)
            if not low <= value <= high:
                raise SpecError(f"{where} = {value}: must be an integer from {low} to {high}")
        values[name] = value
    return TuningSettings(**values)
