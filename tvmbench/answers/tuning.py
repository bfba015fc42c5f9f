"""Answers about MetaSchedule tuning: tuned against untuned, what the tuning cost, and per-build detail.

A tuned job's *untuned counterpart* is the job of the same ranking and configuration (model, target,
board key, executor, opt_level, pipeline, kernels) with no tuning: the job key minus the tuning. The
speed-up of tuning is the counterpart's median over the tuned median; its cost is the tuning minutes per
unit of that speed-up gained, ``tuning_minutes / (speedup - 1)`` (minutes for each "1x faster"), and
None when tuning gained nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

# What makes two jobs the same configuration apart from tuning (and the measurement settings, which
# a sweep holds fixed).
SAME_CONFIG = ["model", "target", "board_key", "executor", "opt_level", "pipeline"]


def is_tuned(budget: Any) -> bool:
    """Whether a tuning_budget cell (None / NaN / 0 / an int) means a tuned build."""
    return budget is not None and budget == budget and int(budget) > 0


def tuning_cost(tuning_s: float | None, speedup: float | None) -> float | None:
    """Tuning minutes per unit of speed-up gained (None when nothing was gained or the time is unknown)."""
    if tuning_s is None or speedup is None or tuning_s != tuning_s or speedup <= 1.0:
        return None
    return tuning_s / 60.0 / (speedup - 1.0)


def side_by_side(group: pd.DataFrame, onnxruntime_median: float | None, name: Any) -> list[dict[str, Any]]:
    """Tuned and untuned configurations of one ranking group, fastest first, when any is tuned.

    ``group`` holds the contenders of one (model, board key, unit, emulated) with the candidate columns
    including tuning_budget / tuning_trials / tuning_s; ``name`` formats a row as a configuration.
    """
    if "tuning_budget" not in group or not any(is_tuned(b) for b in group["tuning_budget"]):
        return []
    rows = group.to_dict("records")
    untuned = {tuple(r[k] for k in SAME_CONFIG): r for r in rows if not is_tuned(r["tuning_budget"])}
    out = []
    for r in sorted(rows, key=lambda x: x["median"]):
        tuned = is_tuned(r["tuning_budget"])
        median = float(r["median"])
        base = untuned.get(tuple(r[k] for k in SAME_CONFIG)) if tuned else None
        speedup = float(base["median"]) / median if base is not None and median else None
        tuning_s = _num(r.get("tuning_s")) if tuned else None
        trials = _num(r.get("tuning_trials")) if tuned else None
        out.append(
            {
                "config": name(r),
                "job_key": r["job_key"],
                "tuning_budget": int(r["tuning_budget"]) if tuned else 0,
                "tuning_trials": None if trials is None else int(trials),
                "median": median,
                "speedup_vs_onnxruntime": onnxruntime_median / median if onnxruntime_median and median else None,
                "untuned_median": float(base["median"]) if base is not None else None,
                "speedup_vs_untuned": speedup,
                "tuning_minutes": None if tuning_s is None else tuning_s / 60.0,
                "tuning_min_per_speedup": tuning_cost(tuning_s, speedup),
            }
        )
    return out


def _num(value: Any) -> float | None:
    """A frame cell as a float, None for missing (None or NaN)."""
    if value is None or value != value:
        return None
    return float(value)


def print_side_by_side(console: Console, rows: list[dict[str, Any]]) -> None:
    """For `results best`: per ranking with tuned builds, tuned and untuned side by side."""
    from tvmbench.answers import columns, table

    for r in rows:
        entries = r.get("tuning") or []
        if entries:
            title = f"{r['model']} on {r['board_key']}: tuned and untuned ({r['unit']})"
            table.render(console, columns.SIDE_BY_SIDE, entries, title)
    if any(r.get("tuning") for r in rows):
        console.print(
            "×ORT > 1: faster than ONNX Runtime on the same boards; ×untuned: the same configuration without "
            "tuning over this one; min per ×: tuning minutes per unit of speed-up gained (lower is cheaper)"
        )


def tuning_lines(tuning: dict[str, Any]) -> list[str]:
    """A build's tuning provenance in a few lines of text (`results show`)."""
    failed = tuning.get("failed_trials") or {}
    failed_text = ", ".join(f"{k} {v}" for k, v in sorted(failed.items())) if failed else "none"
    split = [
        (label, tuning.get(key))
        for label, key in (("building", "build_s"), ("waiting for boards", "board_wait_s"), ("measuring", "run_s"))
    ]
    split_text = ", ".join(f"{label} {_s(v)}" for label, v in split if v is not None)
    lines = [
        f"  tuning: budget {tuning.get('budget')} trials, {tuning.get('trials_run')} run, "
        f"{tuning.get('trials_from_records')} covered by stored records; failed trials: {failed_text}",
        f"    tuning time {_s(tuning.get('tuning_s'))}"
        + (f" ({split_text})" if split_text else "")
        + f"; cost model {tuning.get('cost_model')}, seed {tuning.get('seed')}, records in {tuning.get('database')}",
    ]
    for message in (tuning.get("errors") or [])[:5]:
        lines.append(f"    failed trial: {message}")
    return lines


def print_tuning(console: Console, tuning: dict[str, Any] | None) -> None:
    """The tuning part of `results show`: the summary lines and the per-task table."""
    from tvmbench.answers import columns, table

    if not tuning:
        return
    for line in tuning_lines(tuning):
        console.print(line, highlight=False, soft_wrap=not console.is_terminal)
    tasks = tuning.get("tasks") or []
    if tasks:
        table.render(console, columns.TUNED_TASKS, tasks, "tuned tasks")


def _s(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f} s"
