"""`results show --diff`: why two jobs differ — their pass traces side by side, and where the time goes.

The per-kernel profile is optional: it is read from a `kernel_profile` JSON column of runs when the
schema has one, and its absence is an answer ("not recorded"), not an error.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from db import models as m
from tvmbench.answers import query
from tvmbench.answers import tuning as tuning_answers

if TYPE_CHECKING:
    from db.store import ResultStore

_NAME_KEYS = ("name", "kernel", "func", "function", "Name")
# total_ms: the board agent's (workers/board_agent.profile_module), per run over all calls of the kernel.
_TIME_KEYS = (
    "total_ms",
    "time_ms",
    "duration_ms",
    "ms",
    "mean_ms",
    "time_us",
    "duration_us",
    "us",
    "Duration (us)",
    "time",
)


def pass_trace_diff(a: list[str], b: list[str], label_a: str = "A", label_b: str = "B") -> list[str]:
    """Unified diff of two pass traces (one pass per line); empty when they are the same."""
    return list(difflib.unified_diff(list(a), list(b), fromfile=label_a, tofile=label_b, lineterm="", n=2))


def _time_ms(entry: dict[str, Any]) -> float | None:
    for key in _TIME_KEYS:
        value = entry.get(key)
        if isinstance(value, int | float):
            return float(value) / 1000.0 if "us" in key.lower() else float(value)
    return None


def normalise_profile(profile: Any) -> list[tuple[str, float]]:
    """(kernel name, time in ms) pairs from the shapes a profile may be stored in, slowest first.

    Accepts {"name": ms, ...}, [{"name": ..., "time_ms"/"duration_us"/...: ...}, ...] or either one under
    a "kernels"/"calls" key; entries without a readable name and time are skipped.
    """
    if isinstance(profile, dict):
        for key in ("kernels", "calls", "entries"):
            if key in profile:
                return normalise_profile(profile[key])
        pairs = [(str(k), float(v)) for k, v in profile.items() if isinstance(v, int | float)]
    elif isinstance(profile, list):
        pairs = []
        for entry in profile:
            if not isinstance(entry, dict):
                continue
            name = next((str(entry[k]) for k in _NAME_KEYS if k in entry), None)
            ms = _time_ms(entry)
            if name is not None and ms is not None:
                pairs.append((name, ms))
    else:
        return []
    totals: dict[str, float] = {}
    for name, ms in pairs:
        totals[name] = totals.get(name, 0.0) + ms
    return sorted(totals.items(), key=lambda kv: -kv[1])


def has_kernel_profiles() -> bool:
    """Whether this schema records per-kernel profiles on runs."""
    return hasattr(m.Run, "kernel_profile")


def kernel_profile(store: ResultStore, job_key: str, sweep_id: str) -> list[tuple[str, float]] | None:
    """The top kernels of the job's final run, or None when the schema or the run has no profile."""
    if not has_kernel_profiles():
        return None
    column = m.Run.kernel_profile  # type: ignore[attr-defined]
    stmt = (
        select(column)
        .select_from(m.Job)
        .join(m.Run, m.Run.id == m.Job.final_run_id)
        .where(m.Job.job_key == job_key, m.Job.sweep_id == sweep_id)
    )
    with store.engine.connect() as conn:
        profile = conn.execute(stmt).scalar()
    if not profile:
        return None
    return normalise_profile(profile)


def kernels_alone(detail: dict[str, Any]) -> dict[str, float]:
    """Each tuned task's ms per run as the search timed it alone: calls x best kernel time (tuned builds).

    The program's per-kernel profile beside these says where the tuning curve's estimate (their sum) and
    the program part: a kernel slower in the program than alone holds back more than the search saw.
    """
    tuning = (detail.get("build") or {}).get("tuning") or {}
    tasks = tuning.get("tasks") if isinstance(tuning, dict) else None
    alone = {}
    for task in tasks or []:
        best_us, weight = task.get("best_us"), task.get("weight") or 1
        if isinstance(best_us, int | float) and task.get("name"):
            alone[str(task["name"])] = float(best_us) * weight / 1e3
    return alone


def explain_job(
    store: ResultStore,
    job_ref: str,
    sweep_ref: str | None = None,
    diff_ref: str | None = None,
    diff_sweep_ref: str | None = None,
) -> dict[str, Any]:
    """`results show`: one job in full, its per-kernel profile, and with ``diff_ref`` the pass-trace diff.

    Returns {"detail", "other", "kernels", "alone", "pass_diff", "pass_count", "labels"}. NoSuchJob names a job
    that is not there, QueryError a sweep (sweeps may be named by id, prefix or label).
    """
    sweep = query.resolve_sweep(store, sweep_ref).id if sweep_ref else None
    diff_sweep = query.resolve_sweep(store, diff_sweep_ref).id if diff_sweep_ref else None
    detail = query.job_detail(store, job_ref, sweep)
    if detail is None:
        raise query.NoSuchJob(f"no job with key starting {job_ref!r}; `tvmbench results list` shows the keys")
    other = None
    if diff_ref is not None:
        other = query.job_detail(store, diff_ref, diff_sweep)
        if other is None:
            raise query.NoSuchJob(
                f"no job with key starting {diff_ref!r} to diff against; `tvmbench results list` shows the keys"
            )
    summary = tuning_answers.curve_summary(store, detail)
    if summary is not None:  # builds stored before the curve (and untuned ones) keep the keys they had
        detail["tuning_curve"] = summary
    trace_a = (detail.get("build") or {}).get("pass_trace") or []
    trace_b = ((other or {}).get("build") or {}).get("pass_trace") or []
    labels = tuple(
        f"{d['job_key'][:12]} {d['executor']} O{d['opt_level']}" + (f" {d['layout']}" if d.get("layout") else "")
        for d in (detail, other or detail)
    )
    return {
        "detail": detail,
        "other": other,
        "kernels": kernel_profile(store, detail["job_key"], detail["sweep_id"]),
        "alone": kernels_alone(detail),
        "pass_diff": pass_trace_diff(trace_a, trace_b, *labels) if other else None,
        "pass_count": len(trace_a),
        "labels": labels,
    }


def job_json(explained: dict[str, Any]) -> dict[str, Any]:
    """What `results show --json` prints for an ``explain_job`` answer: the job's detail plus its kernel
    profile and, with a diff, the other job's key, the diff and the two jobs' labels."""
    other = explained["other"]
    return {
        **explained["detail"],
        "kernel_profile": explained["kernels"],
        "kernel_alone_ms": explained["alone"] or None,
        "diff_job": other and other["job_key"],
        "pass_diff": explained["pass_diff"],
        "diff_labels": list(explained["labels"]) if other else None,
    }
