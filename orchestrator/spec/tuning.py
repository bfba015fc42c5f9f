"""The [tuning] table of a sweep file: MetaSchedule's search settings, and the auto budget's stop rules."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from orchestrator.spec.checks import SpecError, typed, unknown_keys
from tvmbench.core.records import COST_MODELS, MODULE_EQUALITIES, AutoBudget, TuningSettings
from workers.executors.registry import baseline_names

MAX_TUNING_BUDGET = 100_000  # trials per job; far beyond any useful search (20k is ResNet-50 territory)
AUTO = "auto"  # the budget that stops by itself: tuning = ["auto"] in [axes]
# The auto budget's keys of [tuning]: when it stops (workers/tuning/stopping.py).
AUTO_KEYS = ("until", "max_minutes", "plateau", "max_trials")
MAX_AUTO_MINUTES = 7 * 24 * 60.0  # a week: longer is a typo, not a plan
MAX_SEARCH_WORKERS = 64  # Ray workers searching one model's tasks; a model has rarely more tasks
POPULATION_RANGE = (8, 65_536)  # under a batch's size it has little to rank; at the top, about an hour a batch here


def parse_tuning(data: dict[str, Any]) -> TuningSettings:
    """The [tuning] table: MetaSchedule's search settings, each checked like every other key."""
    table = typed("[tuning]", data.get("tuning", {}), dict, "a table")
    allowed = {f.name for f in fields(TuningSettings)} | {"trials_per_task", *AUTO_KEYS}
    unknown_keys("[tuning]", table, allowed)
    if "trials_per_task" in table and "max_trials_per_task" in table:
        raise SpecError("[tuning]: give trials_per_task or max_trials_per_task, not both (they are the same)")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in AUTO_KEYS:
            continue  # parse_auto's
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
            ranges = {"seed": (0, 2**31 - 1), "population": POPULATION_RANGE, "search_workers": (1, MAX_SEARCH_WORKERS)}
            low, high = ranges.get(name, (1, MAX_TUNING_BUDGET))
            if not low <= value <= high:
                raise SpecError(f"{where} = {value}: must be an integer from {low} to {high}")
        values[name] = value
    return TuningSettings(**values)


def parse_auto(data: dict[str, Any], budgets: tuple[Any, ...]) -> AutoBudget | None:
    """The auto budget's stop rules from [tuning] (None when the tuning axis has no "auto")."""
    table = data.get("tuning", {})
    given = [k for k in AUTO_KEYS if k in table]
    if AUTO not in budgets:
        if given:
            raise SpecError(
                f'tuning.{given[0]}: only the auto budget stops by itself; add "auto" to [axes] tuning '
                '(e.g. tuning = [0, "auto"])'
            )
        return None
    values: dict[str, Any] = {}
    if "until" in table:
        until = table["until"]
        baselines = baseline_names()  # until a baseline: its median of the model on the same board key
        if until not in baselines and (
            isinstance(until, bool) or not isinstance(until, int | float) or not 0 < until < 1e9
        ):
            raise SpecError(
                f"tuning.until = {until!r}: use "
                + " or ".join(f'"{b}"' for b in baselines)
                + " (its median on the same board) or a positive number of milliseconds"
            )
        values["until"] = until if isinstance(until, str) else float(until)
    if "max_minutes" in table:
        minutes = typed("tuning.max_minutes", table["max_minutes"], (int, float), "a number of minutes")
        if not 0 < minutes <= MAX_AUTO_MINUTES:
            raise SpecError(f"tuning.max_minutes = {minutes}: must be positive minutes, at most {MAX_AUTO_MINUTES:g}")
        values["max_minutes"] = float(minutes)
    if "plateau" in table:
        plateau = typed("tuning.plateau", table["plateau"], dict, "a table like { trials = 64, gain = 0.02 }")
        unknown_keys("tuning.plateau", plateau, {"trials", "gain"})
        if set(plateau) != {"trials", "gain"}:
            raise SpecError("tuning.plateau: give both trials and gain, e.g. plateau = { trials = 64, gain = 0.02 }")
        trials = typed("tuning.plateau.trials", plateau["trials"], int, "an integer")
        if not 1 <= trials <= MAX_TUNING_BUDGET:
            raise SpecError(f"tuning.plateau.trials = {trials}: must be an integer from 1 to {MAX_TUNING_BUDGET}")
        gain = typed("tuning.plateau.gain", plateau["gain"], (int, float), "a fraction such as 0.02 (2 %)")
        if not 0 < gain <= 1:
            raise SpecError(f"tuning.plateau.gain = {gain}: must be a fraction above 0 and at most 1 (0.02 is 2 %)")
        values.update(plateau_trials=trials, plateau_gain=float(gain))
    if "max_trials" in table:
        cap = typed("tuning.max_trials", table["max_trials"], int, "an integer")
        if not 1 <= cap <= MAX_TUNING_BUDGET:
            raise SpecError(f"tuning.max_trials = {cap}: must be an integer from 1 to {MAX_TUNING_BUDGET}")
        values["max_trials"] = cap
    return AutoBudget(**values)
