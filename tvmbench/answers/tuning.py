"""Answers about MetaSchedule tuning: tuned against untuned, what the tuning cost, and per-build detail.

A tuned job's *untuned counterpart* is the job of the same ranking and configuration (model, target,
board key, executor, opt_level, pipeline, kernels, layout) built by the same TVM release, with no tuning:
the job key minus the tuning (another release's untuned build would credit tuning with the release's
difference). The speed-up of tuning is the counterpart's median over the tuned median; its cost is the tuning
minutes per unit of that speed-up gained, ``tuning_minutes / (speedup - 1)`` (minutes for each "1x
faster"), and None when tuning gained nothing beyond the noise (the medians' intervals overlap) or the
build's schedules came from another build's records.

A tuned build's *tuning curve* (``Build.tuning["curve"]``, ``[[trial, tuning seconds, estimate ms], ...]``)
is MetaSchedule's own view of the tuning: after each measured trial, the sum over the tuned tasks of
weight x the best candidate time so far (``workers.tuning.stats.tuning_curve`` says exactly what it counts).
It covers the kernels only, so it is shown beside the build's measured median and ONNX Runtime's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tvmbench.answers.tuning_text import stop_text

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    from matplotlib.figure import Figure
    from rich.console import Console

    from db.store import ResultStore

# What makes two jobs the same configuration apart from tuning (and the measurement settings, which
# a sweep holds fixed).
SAME_CONFIG = ["model", "target", "board_key", "executor", "opt_level", "pipeline", "layout", "tvm_version"]


def is_tuned(budget: Any) -> bool:
    """Whether a tuning_budget cell (None / NaN / 0 / an int) means a tuned build."""
    return budget is not None and budget == budget and int(budget) > 0


def is_auto(stopped_by: Any) -> bool:
    """Whether a tuning_stopped_by cell (None / NaN / a rule) means an auto budget."""
    return isinstance(stopped_by, str) and bool(stopped_by)


def budget_text(budget: Any, stopped_by: Any = None) -> str:
    """A tuned build's budget as people say it: "64", or "auto" for the budget that stops by itself."""
    return "auto" if is_auto(stopped_by) else str(int(budget))


def trials_of(row: Any) -> int:
    """Where a build sits on a trials axis: its budget, or for an auto budget the trials it ran."""
    if not is_tuned(row.get("tuning_budget")):
        return 0
    if is_auto(row.get("tuning_stopped_by")):
        trials = row.get("tuning_trials")
        return int(trials) if trials is not None and trials == trials else 0
    return int(row["tuning_budget"])


def tuning_cost(tuning_s: float | None, speedup: float | None) -> float | None:
    """Tuning minutes per unit of speed-up gained (None when nothing was gained or the time is unknown)."""
    if tuning_s is None or speedup is None or tuning_s != tuning_s or speedup <= 1.0:
        return None
    return tuning_s / 60.0 / (speedup - 1.0)


def side_by_side(
    group: pd.DataFrame, onnxruntime_median: float | None, name: Any, ci: Callable[[dict[str, Any]], Any] | None = None
) -> list[dict[str, Any]]:
    """Tuned and untuned configurations of one ranking group, fastest first, when any is tuned.

    ``group`` holds the contenders of one (model, board key, unit, emulated) with the candidate columns
    including tuning_budget / tuning_trials / tuning_s; ``name`` formats a row as a configuration; ``ci``
    gives a row's median interval (an ``Interval``). The tuning is priced (``tuning_min_per_speedup``) only
    for a speed-up the intervals show to be real (the tuned interval entirely below the untuned one), and
    never for a build whose records came from another build (``records_from``): its own minutes bought none
    of it.
    """
    if "tuning_budget" not in group or not any(is_tuned(b) for b in group["tuning_budget"]):
        return []
    rows = group.to_dict("records")
    untuned = {_config(r): r for r in rows if not is_tuned(r["tuning_budget"])}
    out = []
    for r in sorted(rows, key=lambda x: x["median"]):
        tuned = is_tuned(r["tuning_budget"])
        median = float(r["median"])
        base = untuned.get(_config(r)) if tuned else None
        speedup = float(base["median"]) / median if base is not None and median else None
        tuning_s = _num(r.get("tuning_s")) if tuned else None
        trials = _num(r.get("tuning_trials")) if tuned else None
        records_from = _records_from(r) if tuned else None
        real = speedup is not None and speedup > 1.0 and ci is not None and _below(ci(r), ci(base))
        out.append(
            {
                "config": name(r),
                "job_key": r["job_key"],
                "tuning_budget": int(r["tuning_budget"]) if tuned else 0,
                "budget": budget_text(r["tuning_budget"], r.get("tuning_stopped_by")) if tuned else "untuned",
                "stopped_by": r.get("tuning_stopped_by") if tuned and is_auto(r.get("tuning_stopped_by")) else None,
                "tuning_trials": None if trials is None else int(trials),
                "median": median,
                "speedup_vs_onnxruntime": onnxruntime_median / median if onnxruntime_median and median else None,
                "untuned_median": float(base["median"]) if base is not None else None,
                "speedup_vs_untuned": speedup,
                # Whether the speed-up is beyond the noise (None: no untuned counterpart to compare with).
                "speedup_significant": None if speedup is None else real,
                "records_from": records_from,
                "tuning_minutes": None if tuning_s is None else tuning_s / 60.0,
                "tuning_min_per_speedup": tuning_cost(tuning_s, speedup) if real and not records_from else None,
            }
        )
    return out


def _below(tuned: Any, untuned: Any) -> bool:
    """Whether the tuned interval lies entirely below the untuned one (both known)."""
    values = (tuned.hi, untuned.lo)
    return all(v is not None and v == v for v in values) and tuned.hi < untuned.lo


def _records_from(row: dict[str, Any]) -> str | None:
    """Where a tuned build's schedules came from when not from its own search: "build ID" (an auto build that
    applied a twin's records), "stored records" (every trial covered by records already stored), else None."""
    twin = row.get("tuning_tuned_by")
    if isinstance(twin, str) and twin:
        return f"build {twin[:12]}"
    trials, stored = _num(row.get("tuning_trials")), _num(row.get("tuning_from_records"))
    if trials == 0 and stored:
        return "stored records"
    return None


def _config(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row's configuration apart from tuning (a missing layout, NaN in a frame, is no layout)."""
    return tuple(None if v is None or v != v else v for v in (row.get(k) for k in SAME_CONFIG))


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
            "ORT/this: ONNX Runtime's time over this one's (> 1: faster than ONNX Runtime, same boards); ×untuned: "
            "the same configuration and TVM release without tuning over this one; min per ×: tuning minutes per "
            "unit of speed-up gained (lower is cheaper), '-' when the speed-up is within the noise (95% CIs "
            "overlap) or none; 'reused': the schedules came from another build's records (--json: records_from)"
        )


# --- the tuning curve ---------------------------------------------------------------------------

CURVE_WHAT = (
    "best-so-far estimate: sum over the tuned tasks of calls x best kernel time measured by MetaSchedule "
    "(kernels only, not a run of the model)"
)
CURVE_AT = (0.0, 0.25, 0.5, 0.75, 1.0)  # the points `results show` prints: first, quartiles, last


def curve_of(tuning: dict[str, Any] | None) -> list[list[float]]:
    """The curve points of a build's tuning provenance; [] for untuned builds and builds stored before it."""
    curve = (tuning or {}).get("curve")
    return [p for p in curve if isinstance(p, list | tuple) and len(p) == 3] if isinstance(curve, list) else []


def curve_points(curve: list[list[float]]) -> list[dict[str, Any]]:
    """First, 25/50/75 % and last of a curve (by position), each as {trial, minutes, estimate_ms}."""
    if not curve:
        return []
    picked = sorted({round(at * (len(curve) - 1)) for at in CURVE_AT})
    return [
        {"trial": int(curve[i][0]), "minutes": float(curve[i][1]) / 60.0, "estimate_ms": float(curve[i][2])}
        for i in picked
    ]


def onnxruntime_median(store: ResultStore, sweep_id: str, model: str, board_key: str) -> float | None:
    """The fastest ok ONNX Runtime median (ms) of ``model`` on ``board_key`` in the sweep, None if none."""
    from sqlalchemy import func, select

    from db import models as m
    from workers.executors.registry import baseline_names

    stmt = (
        select(func.min(m.Run.median))
        .select_from(m.Job)
        .join(m.Run, m.Run.id == m.Job.final_run_id)
        .where(
            m.Job.sweep_id == sweep_id,
            m.Job.model_name == model,
            m.Job.board_key == board_key,
            m.Job.status == "ok",
            m.Job.executor.in_(baseline_names()),
            m.Run.unit == "ms",
        )
    )
    with store.engine.connect() as conn:
        value = conn.execute(stmt).scalar()
    return None if value is None else float(value)


def curve_summary(store: ResultStore, detail: dict[str, Any]) -> dict[str, Any] | None:
    """What `results show` says of a job's tuning curve (None without one): a few points, the curve's
    end against the build's measured median and ONNX Runtime's median of the same model and board."""
    curve = curve_of((detail.get("build") or {}).get("tuning"))
    if not curve:
        return None
    return {
        "what": CURVE_WHAT,
        "points_stored": len(curve),
        "points": curve_points(curve),
        "final_estimate_ms": float(curve[-1][2]),
        "measured_median_ms": detail.get("median_ms"),
        "onnxruntime_median_ms": onnxruntime_median(store, detail["sweep_id"], detail["model"], detail["board_key"]),
    }


def curve_lines(summary: dict[str, Any] | None) -> list[str]:
    """The tuning curve in a few lines of text (`results show`); none without a curve."""
    if not summary:
        return []
    points = " · ".join(
        f"trial {p['trial']} ({p['minutes']:.1f} min) {p['estimate_ms']:.4g} ms" for p in summary["points"]
    )
    measured = summary.get("measured_median_ms")
    ort = summary.get("onnxruntime_median_ms")
    against = [f"measured model median {measured:.4g} ms" if measured is not None else "no measured median"]
    if ort is not None:
        against.append(f"onnxruntime {ort:.4g} ms")
    return [
        f"    tuning curve ({summary['what']}; {summary['points_stored']} points stored, all in --json):",
        f"      {points}",
        f"      {'; '.join(against)}",
    ]


MAX_REPORT_CURVES = 24  # curve plots one report draws; `results show` has every job's


def sweep_curves(store: ResultStore, sweep_id: str) -> list[dict[str, Any]]:
    """The tuned jobs of a sweep that have a tuning curve, with what their plot compares it with:
    [{job_key, model, board_key, executor, opt_level, pipeline, budget, curve, measured_ms, onnxruntime_ms,
    checks}]."""
    from sqlalchemy import select

    from db import models as m

    stmt = (
        select(
            m.Job.job_key, m.Job.model_name, m.Job.board_key, m.Job.executor, m.Job.opt_level, m.Job.pipeline,
            m.Job.status, m.Build.tuning_budget, m.Build.tuning, m.Run.median, m.Run.unit,
        )
        .join(m.Build, m.Build.build_key == m.Job.build_key)
        .outerjoin(m.Run, m.Run.id == m.Job.final_run_id)
        .where(m.Job.sweep_id == sweep_id, m.Build.tuning_budget > 0)
        .order_by(m.Job.model_name, m.Job.board_key, m.Job.executor, m.Job.opt_level, m.Build.tuning_budget)
    )  # fmt: skip
    with store.engine.connect() as conn:
        rows = conn.execute(stmt).all()
    out, ort = [], {}
    for key, model, board_key, executor, opt, pipeline, status, budget, tuning, median, unit in rows:
        curve = curve_of(tuning)
        budget = budget_text(budget, (tuning or {}).get("stopped_by"))
        if not curve:
            continue
        if (model, board_key) not in ort:
            ort[model, board_key] = onnxruntime_median(store, sweep_id, model, board_key)
        out.append(
            {
                "job_key": key, "model": model, "board_key": board_key, "executor": executor, "opt_level": opt,
                "pipeline": pipeline, "budget": budget, "curve": curve, "stop": stop_text(tuning or {}),
                "measured_ms": float(median) if status == "ok" and median is not None and unit == "ms" else None,
                "onnxruntime_ms": ort[model, board_key], "checks": (tuning or {}).get("checks") or [],
            }
        )  # fmt: skip
    return out


def curve_title(row: dict[str, Any]) -> str:
    """A curve plot's title: the model, the configuration and its budget, the board."""
    return (
        f"{row['model']} {row['executor']} O{row['opt_level']} {row['pipeline']} tuned {row['budget']} "
        f"on {row['board_key']}: tuning curve"
    )


def curve_figure(
    curve: list[list[float]],
    title: str,
    measured_ms: float | None = None,
    onnxruntime_ms: float | None = None,
    checks: list[dict[str, Any]] | None = None,
) -> Figure:
    """The tuning curve against trials (left) and tuning minutes (right), the build's measured median
    dotted and ONNX Runtime's dashed when known: where the estimate ends up against what was measured.
    ``checks``: the until rule's check builds (provenance ``checks``), each a cross at what it measured, and
    a plus at ONNX Runtime's median timed beside it when it was."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from workers.executors.registry import baseline_names

    fig = Figure(figsize=(10.0, 3.8))
    by_trial, by_time = fig.subplots(1, 2, sharey=True)
    trials = [p[0] for p in curve]
    minutes = [p[1] / 60.0 for p in curve]
    estimate = [p[2] for p in curve]
    for ax, xs, label in ((by_trial, trials, "MetaSchedule trials"), (by_time, minutes, "tuning minutes")):
        ax.step(xs, estimate, where="post", color="#4a7ebb", label="kernel estimate (best so far)")
        ax.plot(xs[-1:], estimate[-1:], "o", color="#4a7ebb")
        if measured_ms is not None:
            ax.axhline(measured_ms, linestyle=":", color="#070", label=f"measured model median {measured_ms:.4g} ms")
        timed = [c for c in checks or [] if c.get("measured_ms") is not None]
        if timed:
            at = [c["trial"] if xs is trials else c["minutes"] for c in timed]
            ax.plot(at, [c["measured_ms"] for c in timed], "x", color="#c33", label="check build (measured program)")
            beside = [(x, c["baseline_ms"]) for x, c in zip(at, timed, strict=True) if c.get("baseline_ms") is not None]
            if beside:  # the baseline the check timed in turn with the program: the bar it was held to
                ax.plot(*zip(*beside, strict=True), "+", color="#555", label="ONNX Runtime beside the check")
        if onnxruntime_ms is not None:
            name = " / ".join(baseline_names())
            ax.axhline(onnxruntime_ms, linestyle="--", color="#555", label=f"{name} {onnxruntime_ms:.4g} ms")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    by_trial.set_ylabel("latency (ms)")
    by_trial.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # "0.6", not "6 x 10^-1"
    by_trial.yaxis.set_major_formatter(plain)
    by_trial.yaxis.set_minor_formatter(plain)
    by_time.legend(fontsize="small")
    fig.suptitle(title)
    return fig
