"""`results best`: the fastest correct configuration per (model, board), and how sure we are of it.

Only jobs whose outputs passed the check (status "ok") compete. The metric is the steady state (the median
of the samples, with its bootstrap CI) unless ``metric="first"``: the first inference after the module
loaded, what a cold-start user waits for (one value per run, so no interval). Timings in different units, or emulated
timings and real ones, are never ranked against each other: each (model, board key, unit, emulated) is its
own ranking. An `onnxruntime` executor row is the baseline, not a competitor.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from db import models as m
from tvmbench.answers import layouts as layout_answers
from tvmbench.answers import query as q
from tvmbench.answers import tuning as tuning_answers
from tvmbench.answers.stats import DEFAULT_SEED, median_ci
from workers.executors.registry import baseline_names

if TYPE_CHECKING:
    import pandas as pd

    from db.store import ResultStore

# The baseline executors (ONNX Runtime): every ranking compares the compiled configurations with them.
BASELINE_EXECUTORS = baseline_names()
RANK_KEYS = ["model", "board_key", "unit", "emulated"]


def config_name(row: Any, *, release: bool = False) -> str:
    """A configuration as people say it: "vm-compiled O2 per-target (host)", "... tuned 64 (host)", "... tuned
    auto (host)"; its layout when it has one ("... per-target NHWC (host)"); with ``release`` its TVM too
    ("... TVM 0.26.0 (host)"), for rankings across several releases."""
    get = row.get if hasattr(row, "get") else lambda _k: None
    budget = get("tuning_budget")
    layout = f" {get('layout')}" if isinstance(get("layout"), str) else ""
    tuned = (
        f" tuned {tuning_answers.budget_text(budget, get('tuning_stopped_by'))}"
        if tuning_answers.is_tuned(budget)
        else ""
    )
    tvm = f" TVM {row['tvm_version']}" if release and get("tvm_version") else ""
    return f"{row['executor']} O{row['opt_level']} {row['pipeline']}{layout}{tuned}{tvm} ({row['target']})"


def latest_sweeps(store: ResultStore, filters: q.Filters) -> dict[tuple[str, str], str]:
    """For each (model, board key) with ok results, the newest sweep that has them.

    "Newest" is the sweep of the highest job id: jobs are written when their sweep is created, so ids
    follow sweep creation. This is one GROUP BY over the covering index ix_jobs_rank (status, model,
    board key) with one result row per (model, board key), then one lookup of those ids: no per-group
    queries and no read of the jobs table itself.
    """
    stmt = (
        select(m.Job.model_name, m.Job.board_key, func.max(m.Job.id))
        .where(m.Job.status == "ok")
        .group_by(m.Job.model_name, m.Job.board_key)
    )
    narrowed = replace(filters, sweep=None, status=None, board=None)
    if filters.board is not None:
        # The key of a board id ("host@127.0.0.1:9091" -> "host") keeps this on the index; the exact
        # board filter is applied to the candidates afterwards.
        stmt = stmt.where(m.Job.board_key == filters.board.split("@")[0])
    stmt = q.apply_filters(stmt, narrowed)
    with store.engine.connect() as conn:
        newest_job = {(model, bk): job_id for model, bk, job_id in conn.execute(stmt)}
        ids = sorted(newest_job.values())
        sweep_of = dict(conn.execute(select(m.Job.id, m.Job.sweep_id).where(m.Job.id.in_(ids))).all()) if ids else {}
    return {pair: sweep_of[job_id] for pair, job_id in newest_job.items()}


_CANDIDATE_COLUMNS = [
    "sweep_id",
    "job_key",
    "model",
    "target",
    "board_key",
    "executor",
    "opt_level",
    "pipeline",
    "layout",
    "unit",
    "emulated",
    "median",
    "first_ms",
    "peak_mem_mb",
    "warnings",
    "equivalent_to",
    "tuning_budget",
    "tuning_trials",
    "tuning_s",
    "tuning_stopped_by",
    "tuning_tuned_by",
    "tuning_from_records",
    "tvm_version",
    "fingerprint",
]
METRICS = {"steady": "median", "first": "first_ms"}


def candidates(store: ResultStore, filters: q.Filters) -> pd.DataFrame:
    """The ok jobs to rank (no samples): of ``filters.sweep``, else of the newest sweep per (model, board)."""
    base = replace(filters, status="ok")
    stmt = q.base_select(_CANDIDATE_COLUMNS).add_columns(m.Job.final_run_id.label("run_id"))
    if filters.sweep:
        return q.frame(store, q.apply_filters(stmt, base, q.resolve_sweep(store, filters.sweep).id))
    newest = latest_sweeps(store, filters)
    stmt = q.apply_filters(stmt, replace(base, sweep=None)).where(m.Job.sweep_id.in_(sorted(set(newest.values()))))
    df = q.frame(store, stmt)
    triples = zip(df["model"], df["board_key"], df["sweep_id"], strict=True)
    keep = [newest.get((mod, bk)) == sid for mod, bk, sid in triples]
    return df[keep].reset_index(drop=True)


def _samples(store: ResultStore, run_ids: list[int]) -> dict[int, list[float]]:
    """The samples of the given runs, in one query."""
    if not run_ids:
        return {}
    with store.engine.connect() as conn:
        return dict(conn.execute(select(m.Run.id, m.Run.samples).where(m.Run.id.in_(run_ids))).all())


def _warnings(value: Any) -> list[str]:
    return list(value) if isinstance(value, list | tuple) else []


def _figures(row: Any, prefix: str) -> dict[str, Any]:
    """Peak memory and board-state warnings of a ranked configuration, printed next to its figure."""
    peak = row.get("peak_mem_mb")
    return {
        f"{prefix}_peak_mem_mb": None if peak is None or peak != peak else float(peak),
        f"{prefix}_warnings": _warnings(row.get("warnings")),
    }


def rank(
    store: ResultStore,
    df: pd.DataFrame,
    *,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
    metric: str = "steady",
) -> list[dict[str, Any]]:
    """One ranking row per (model, board key, unit, emulated) of the candidate frame ``df``.

    Sorting and picking happen once over the whole frame; only the top two of each ranking have their
    samples fetched (one query) and bootstrapped. ``metric`` is "steady" (median of the samples) or
    "first" (first inference, ms; rows without it, such as older runs, do not compete).
    """
    if metric not in METRICS:
        raise q.QueryError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")
    if df.empty:
        return []
    if metric == "first":
        # The first inference is one value in ms: it ranks ms runs only, and its "median" is that value. The
        # steady-state median is kept aside: a row's *_median fields mean the median under either metric.
        df = df[(df["unit"] == "ms") & df["first_ms"].notna()]
        df = df.assign(steady_median=df["median"], median=df["first_ms"])
    else:
        df = df.assign(steady_median=df["median"])
    df = df[df["median"].notna()].sort_values([*RANK_KEYS, "median", "job_key"])
    # A sweep over TVM releases has the same configuration once per release: its names say which.
    several = "tvm_version" in df and df["tvm_version"].nunique(dropna=True) > 1
    name = partial(config_name, release=several)
    is_baseline = df["executor"].isin(BASELINE_EXECUTORS)
    baseline = df[is_baseline].groupby(RANK_KEYS)["median"].min().to_dict()
    # The steady-state median of each ranking's fastest baseline by the metric (head: first() skips NaN).
    baseline_steady = df[is_baseline].groupby(RANK_KEYS).head(1).set_index(RANK_KEYS)["steady_median"].to_dict()
    contenders = df[~is_baseline]
    # Side by side, tuned jobs count even when their program equals another's (records that did not apply).
    every_config = contenders.groupby(RANK_KEYS, sort=True)
    # The fastest of each layout (a layout axis), identical programs included: a layout that changed
    # nothing is shown as such, not dropped.
    per_layout = layout_answers.fastest_per_layout(contenders, RANK_KEYS)
    # A job that reused another's identical program carries the same numbers: rank the program once.
    measured = set(zip(contenders["sweep_id"], contenders["job_key"], strict=True))
    dup = [(s, e) in measured for s, e in zip(contenders["sweep_id"], contenders["equivalent_to"], strict=True)]
    # .loc: a mask by rows even when empty (a bare [] selects no *columns*: KeyError 'model' when the only
    # results in scope are ONNX Runtime's).
    contenders = contenders.loc[[not d for d in dup]]
    groups = contenders.groupby(RANK_KEYS, sort=True)
    top2 = groups.head(2)
    slowest = groups.tail(1).set_index(RANK_KEYS)
    sizes = groups.size().to_dict()
    # Steady state: bootstrap the samples. First inference: one value per run, no interval to draw.
    wanted = [*top2["run_id"].dropna(), *per_layout["run_id"].dropna()]
    # Tuned beside untuned: every configuration of a ranking with a tuned build, for the intervals that say
    # whether a speed-up is real before it is priced.
    tuned_groups = every_config.filter(lambda g: any(tuning_answers.is_tuned(b) for b in g["tuning_budget"]))
    wanted += list(tuned_groups["run_id"].dropna())
    samples = _samples(store, sorted({int(r) for r in wanted})) if metric == "steady" else {}
    layout_groups = dict(tuple(per_layout.groupby(RANK_KEYS, sort=False))) if not per_layout.empty else {}
    out: list[dict[str, Any]] = []
    for key, pair in top2.groupby(RANK_KEYS, sort=True):
        model, board_key, unit, emulated = key
        top = pair.iloc[0]
        ci = median_ci(samples.get(top["run_id"]), confidence, seed=seed)
        row: dict[str, Any] = {
            "model": model,
            "board_key": board_key,
            "unit": unit,
            "emulated": bool(emulated),
            "sweep_id": top["sweep_id"],
            "candidates": int(sizes[key]),
            "best": name(top),
            "best_job": top["job_key"],
            "tvm_version": top["tvm_version"],  # the release the winner was built with
            "layout": _layout(top),  # the winner's data layout (None without a layout axis)
            # best_value is the figure ranked (``metric``: a median or a first inference, ms); best_median is
            # always the steady-state median (it held the first inference under --metric first, misnamed).
            "best_value": float(top["median"]),
            "best_median": _number(top["steady_median"]),
            "best_lo": ci.lo,
            "best_hi": ci.hi,
            "metric": metric,
            **_figures(top, "best"),
            "runner_up": None,
            "runner_up_value": None,
            "runner_up_median": None,
            "runner_up_lo": None,
            "runner_up_hi": None,
            "runner_up_tvm_version": None,
            "runner_up_layout": None,
            "uncertain": False,
            "no_tvm": False,
        }
        verdict = f"{name(top)} is fastest"
        if len(pair) == 1:
            # "only" among the TVM configurations that passed: ONNX Runtime, when measured, is the baseline.
            verdict = f"{name(top)} (the only TVM configuration that passed the check)"
        else:
            second = pair.iloc[1]
            ci2 = median_ci(samples.get(second["run_id"]), confidence, seed=seed)
            row.update(
                runner_up=name(second), runner_up_value=float(second["median"]),
                runner_up_median=_number(second["steady_median"]), runner_up_lo=ci2.lo,
                runner_up_hi=ci2.hi, runner_up_tvm_version=second["tvm_version"], runner_up_layout=_layout(second),
                **_figures(second, "runner_up"),
            )  # fmt: skip
            if metric == "first":
                verdict += " at first inference (one run each: no interval, read close figures as a tie)"
            elif ci.overlaps(ci2):
                row["uncertain"] = True
                verdict = f"uncertain: {name(top)} and {name(second)} overlap"
        last = slowest.loc[key]
        row["slowest"] = name(last)
        row["speedup_vs_slowest"] = float(last["median"]) / float(top["median"]) if top["median"] else math.nan
        ort = baseline.get(key)
        row["onnxruntime_value"] = ort
        row["onnxruntime_median"] = _number(baseline_steady.get(key))
        row["speedup_vs_onnxruntime"] = ort / float(top["median"]) if ort is not None and top["median"] else None
        if ort is not None and ort < row["best_value"]:
            verdict += f"; the onnxruntime baseline is faster still ({ort:.4g} vs {row['best_value']:.4g} {unit})"
        row["verdict"] = verdict
        # Tuned and untuned side by side, with what the tuning cost (empty when nothing was tuned).
        row["tuning"] = tuning_answers.side_by_side(
            every_config.get_group(key),
            ort,
            name,
            ci=lambda r: median_ci(samples.get(r["run_id"]), confidence, seed=seed),
        )
        # Which layout won (a layout axis): the fastest of each layout side by side, None without one.
        group = layout_groups.get(key)
        row["layouts"] = (
            None
            if group is None
            else layout_answers.side_by_side(group, samples, name, confidence=confidence, seed=seed)
        )
        out.append(row)
    # Rankings where ONNX Runtime passed but no TVM configuration did: said, not left out.
    for key in sorted(set(baseline) - set(sizes)):
        model, board_key, unit, emulated = key
        ort = float(baseline[key])
        sid = df[is_baseline & (df["model"] == model) & (df["board_key"] == board_key)]["sweep_id"].iloc[0]
        verdict = f"{NO_TVM}; the onnxruntime baseline measured {ort:.4g} {unit}"
        steady = _number(baseline_steady.get(key))
        out.append(
            no_tvm_row(model, board_key, str(sid), verdict, unit=unit, emulated=bool(emulated), ort=ort, steady=steady)
        )
    out.sort(key=lambda r: (r["model"], r["board_key"], r["unit"] or "", r["emulated"]))
    return out


NO_TVM = "no TVM configuration passed the check"


def no_tvm_row(
    model: str,
    board_key: str,
    sweep_id: str,
    verdict: str,
    *,
    unit: str | None = None,
    emulated: bool = False,
    ort: float | None = None,
    steady: float | None = None,
) -> dict[str, Any]:
    """A ranking row for a (model, board) where no TVM configuration passed: every figure of a winner is None
    (``best`` too), ``onnxruntime_value`` the baseline's ranked figure when it passed (``onnxruntime_median``
    its steady-state median: ``steady``, else ``ort``), ``verdict`` says what happened."""
    row: dict[str, Any] = {"model": model, "board_key": board_key, "unit": unit, "emulated": emulated}
    row.update(sweep_id=sweep_id, candidates=0, no_tvm=True, uncertain=False, verdict=verdict, tuning=[], metric=None)
    for k in ("best", "best_job", "tvm_version", "layout", "best_value", "best_median", "best_lo", "best_hi",
              "runner_up", "runner_up_value", "runner_up_median", "runner_up_lo", "runner_up_hi",
              "runner_up_tvm_version", "runner_up_layout",
              "slowest", "speedup_vs_slowest", "speedup_vs_onnxruntime", "layouts", "best_peak_mem_mb",
              "runner_up_peak_mem_mb"):  # fmt: skip
        row[k] = None
    row.update(
        best_warnings=[], runner_up_warnings=[], onnxruntime_value=ort,
        onnxruntime_median=ort if steady is None else steady,
    )  # fmt: skip
    return row


def _number(value: object) -> float | None:
    """A figure of the frame as a float, None where it is missing (NaN)."""
    return None if value is None or value != value else float(value)  # type: ignore[arg-type]


def _layout(row: Any) -> str | None:
    """A candidate's layout, None for a job without one (NaN in the frame)."""
    value = row.get("layout")
    return value if isinstance(value, str) else None


def best(
    store: ResultStore,
    filters: q.Filters | None = None,
    *,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
    metric: str = "steady",
) -> list[dict[str, Any]]:
    """The ranking of the newest results per (model, board) (or of ``filters.sweep``), and a row saying so for
    each (model, board) in scope where no TVM configuration passed (``no_tvm``: ``best`` is None)."""
    filters = filters or q.Filters()
    df = candidates(store, filters)
    rows = rank(store, df, confidence=confidence, seed=seed, metric=metric)
    passed = set(zip(df["model"], df["board_key"], strict=True)) if not df.empty else set()
    rows += failed_only(store, filters, passed)
    rows.sort(key=lambda r: (r["model"], r["board_key"], r["unit"] or "", r["emulated"]))
    return rows


def failed_only(store: ResultStore, filters: q.Filters, passed: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """A row per (model, board key) in scope with jobs but none that passed (not in ``passed``): what its
    jobs ended as, from ``filters.sweep`` or else the newest sweep with such jobs.

    One GROUP BY on the covering index ix_jobs_rank (status, model, board key, sweep): the failed jobs are
    few, so this stays cheap on a database of a million ok results.
    """
    stmt = select(m.Job.model_name, m.Job.board_key, m.Job.sweep_id, m.Job.status, func.count(), func.max(m.Job.id))
    stmt = stmt.where(m.Job.status != "ok").group_by(m.Job.model_name, m.Job.board_key, m.Job.sweep_id, m.Job.status)
    sweep_id = q.resolve_sweep(store, filters.sweep).id if filters.sweep else None
    stmt = q.apply_filters(stmt, replace(filters, sweep=None, status=None, board=None), sweep_id)
    if filters.board is not None:  # a board id's key: failed jobs may have no run (and so no board id)
        stmt = stmt.where(m.Job.board_key == filters.board.split("@")[0])
    with store.engine.connect() as conn:
        found = conn.execute(stmt).all()
    newest: dict[tuple[str, str], tuple[int, str]] = {}
    for model, board_key, sid, _status, _n, last in found:
        if (model, board_key) not in passed and last > newest.get((model, board_key), (-1, ""))[0]:
            newest[model, board_key] = (last, sid)
    out = []
    for (model, board_key), (_, sid) in sorted(newest.items()):
        counts = sorted((n, status) for mod, bk, s, status, n, _ in found if (mod, bk, s) == (model, board_key, sid))
        ended = ", ".join(f"{n} {status}" for n, status in reversed(counts))
        out.append(no_tvm_row(model, board_key, sid, f"{NO_TVM} ({ended}; none ok)"))
    return out
