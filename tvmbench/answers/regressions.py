"""`results regressions`: results slower than their own history beyond noise, by a pluggable method.

A history is every ok result of one comparability fingerprint, oldest first. The fingerprint is the
job_key (it hashes the model sha256, target, executor, opt_level, pipeline, board key and measure settings)
plus the unit and whether the board is emulated. Provenance (TVM version, host, time) is reported next to
the verdict, so "slower since the TVM upgrade" is visible, but it is not part of the fingerprint: a TVM
upgrade is exactly what the history must span.

A method is a function (history medians, latest median, params) -> Verdict, registered by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select

from db import models as m
from db.lookup import resolve_prefix
from tvmbench.answers import query as q
from tvmbench.answers.analysis_views import _jsonable, records

if TYPE_CHECKING:
    from db.store import ResultStore


@dataclass(frozen=True)
class Params:
    """Knobs shared by the methods."""

    lookback: int = 20  # how many earlier results form the baseline
    min_history: int = 3  # fewer earlier results than this: no verdict
    threshold: float = 0.05  # the latest must also be this much slower than the baseline (relative)
    z: float = 5.0  # how many noise widths above the baseline counts (conbench's default is 5)
    noise_floor: float = 0.01  # relative noise assumed at least, so a flat history does not flag 0.1 % drift


@dataclass(frozen=True)
class Verdict:
    regressed: bool
    baseline: float  # the typical earlier value the latest is compared to
    spread: float  # the noise width used (std, or scaled MAD)
    score: float  # (latest - baseline) / spread


Method = Callable[[np.ndarray, float, Params], Verdict]
METHODS: dict[str, Method] = {}


def register(name: str) -> Callable[[Method], Method]:
    """Decorator adding a method to METHODS under ``name``."""

    def add(fn: Method) -> Method:
        METHODS[name] = fn
        return fn

    return add


def _decide(latest: float, baseline: float, spread: float, p: Params) -> Verdict:
    spread = max(spread, p.noise_floor * abs(baseline))
    score = (latest - baseline) / spread if spread > 0 else math.inf
    regressed = score > p.z and latest > baseline * (1 + p.threshold)
    return Verdict(bool(regressed), float(baseline), float(spread), float(score))


@register("zscore")
def lookback_zscore(history: np.ndarray, latest: float, p: Params) -> Verdict:
    """conbench's lookback z-score: distance of the latest from the mean of the window, in standard deviations."""
    std = float(np.std(history, ddof=1)) if history.size > 1 else 0.0
    return _decide(latest, float(np.mean(history)), std, p)


@register("mad")
def robust_zscore(history: np.ndarray, latest: float, p: Params) -> Verdict:
    """The z-score with median and scaled median absolute deviation: one outlier in the history cannot
    widen the noise band enough to hide a real regression, as it can with the mean and std."""
    med = float(np.median(history))
    mad = 1.4826 * float(np.median(np.abs(history - med)))
    return _decide(latest, med, mad, p)


_COLUMNS = [
    "job_key",
    "model",
    "target",
    "board_key",
    "executor",
    "opt_level",
    "pipeline",
    "unit",
    "emulated",
    "median",
    "sweep_id",
    "sweep_created_at",
    "tvm_version",
    "host",
    "finished_at",
]


def release_step(versions: list[Any]) -> str | None:
    """ "TVM A -> B" when the last of ``versions`` (a history's TVM versions, oldest first, the judged
    result last) began a release that an earlier result in them did not have, else None.

    The step is where the latest result's release began: walking back over the results of that same
    release, the first one of another release is the one before the step."""
    if not versions:
        return None
    latest = versions[-1]
    for earlier in reversed(versions[:-1]):
        if earlier != latest and earlier and latest:
            return f"TVM {earlier} -> {latest}"
    return None


def find(
    store: ResultStore,
    filters: q.Filters | None = None,
    *,
    method: str = "zscore",
    params: Params | None = None,
    include_all: bool = False,
) -> list[dict[str, Any]]:
    """Judge the latest result of every fingerprint against its history; only regressions unless ``include_all``
    (then every latest result: ``regressed`` is None for one with too little history to judge).

    With ``filters.sweep`` the "latest" is that sweep's result, judged against what came before it.
    """
    if method not in METHODS:
        raise q.QueryError(f"unknown regression method {method!r}; choose from {', '.join(sorted(METHODS))}")
    judge, p = METHODS[method], params or Params()
    filters = filters or q.Filters()
    stmt = q.apply_filters(q.base_select(_COLUMNS), replace(filters, sweep=None, status="ok"))
    focus: str | None = None
    if filters.sweep:
        sweep = q.resolve_sweep(store, filters.sweep)
        focus = sweep.id
        stmt = stmt.where(
            m.Job.job_key.in_(select(m.Job.job_key).where(m.Job.sweep_id == sweep.id)),
            m.Sweep.created_at <= sweep.created_at,
        )
    df = q.frame(store, stmt)
    df = df[df["median"].notna()]
    out: list[dict[str, Any]] = []
    for _, series in df.groupby(["job_key", "unit", "emulated"], sort=False):
        series = series.sort_values(["sweep_created_at", "finished_at"])
        latest = series.iloc[-1]
        if focus is not None and latest["sweep_id"] != focus:
            continue
        history = series.iloc[:-1].tail(p.lookback)
        row = {k: latest[k] for k in _COLUMNS if k not in ("median", "sweep_created_at", "finished_at")}
        row.update({"latest": float(latest["median"]), "history": len(history), "method": method})
        if len(history) < p.min_history:
            # Not judged: None, never False (a "no" would read as "checked, and within the noise").
            row.update(regressed=None, baseline=None, ratio=None, score=None, baseline_tvm_version=None)
            row["release_step"] = None
            row["note"] = f"{len(history)} earlier result(s), {p.min_history} needed"
        else:
            v = judge(history["median"].to_numpy(dtype=float), float(latest["median"]), p)
            row.update(
                regressed=v.regressed,
                baseline=v.baseline,
                ratio=float(latest["median"]) / v.baseline if v.baseline else None,
                score=v.score,
                baseline_tvm_version=history.iloc[-1]["tvm_version"],
                # The release that changed inside the judged window, if one did: the step to blame.
                release_step=release_step([*history["tvm_version"], latest["tvm_version"]]),
                note="",
            )
            if row["regressed"] and row["release_step"]:
                row["note"] = f"since {row['release_step']}"
        if row["regressed"] or include_all:
            out.append(row)
    out.sort(key=lambda r: -(r["score"] or 0))
    return out


def history(
    store: ResultStore, job_key: str, *, method: str = "zscore", params: Params | None = None
) -> dict[str, Any]:
    """Every result of one configuration (job key or unique prefix), oldest first, each judged by ``method``.

    A point is flagged when it regressed against the up-to-``lookback`` ok results before it of the same
    unit, the same rule `find` applies to the latest result only (asv's per-benchmark graph, with flags).
    Failed results are points without a median. QueryError for an unknown or ambiguous key.
    """
    if method not in METHODS:
        raise q.QueryError(f"unknown regression method {method!r}; choose from {', '.join(sorted(METHODS))}")
    judge, p = METHODS[method], params or Params()
    with store.read() as s:
        key = resolve_prefix(s, m.Job.job_key, job_key, "job key")
    if key is None:
        raise q.QueryError(f"no job with key starting {job_key!r}; `tvmbench results list` shows the keys")
    columns = [*_COLUMNS, "status", "sweep_label", "load_avg_1m", "tuning"]
    df = q.frame(store, q.base_select(columns).where(m.Job.job_key == key))
    df = df.sort_values(["sweep_created_at", "finished_at"], na_position="last")
    first = df.iloc[0]
    points: list[dict[str, Any]] = []
    earlier: dict[tuple[str, bool], list[float]] = {}
    earlier_releases: dict[tuple[str, bool], list[str | None]] = {}
    previous_release: str | None = None
    for _, r in df.iterrows():
        point = {k: r[k] for k in ("sweep_id", "sweep_label", "sweep_created_at", "finished_at", "status", "unit",
                                   "emulated", "median", "tvm_version", "host", "load_avg_1m")}  # fmt: skip
        point.update(regressed=False, baseline=None, score=None, history=0, release_step=None)
        # Where the TVM release changes (the dashboard draws a marker there): "TVM A -> B" on the first
        # result of the new release.
        release = r["tvm_version"] or None
        step = previous_release is not None and release is not None and release != previous_release
        point["release_boundary"] = f"TVM {previous_release} -> {release}" if step else None
        previous_release = release or previous_release
        ok = r["status"] == "ok" and r["median"] is not None and not math.isnan(r["median"])
        if not ok:
            point["median"] = None
            points.append(point)
            continue
        series = earlier.setdefault((r["unit"], bool(r["emulated"])), [])
        window = series[-p.lookback :]
        point["history"] = len(window)
        if len(window) >= p.min_history:
            v = judge(np.asarray(window, dtype=float), float(r["median"]), p)
            point.update(regressed=v.regressed, baseline=v.baseline, score=v.score)
            if v.regressed:  # the release that changed inside the window this point was judged against
                versions = [*earlier_releases.get((r["unit"], bool(r["emulated"])), [])[-p.lookback :], release]
                point["release_step"] = release_step(versions)
        series.append(float(r["median"]))
        earlier_releases.setdefault((r["unit"], bool(r["emulated"])), []).append(release)
        points.append(point)
    identity = {
        k: _jsonable(first[k]) for k in ("model", "target", "board_key", "executor", "opt_level", "pipeline", "tuning")
    }
    return {"job_key": key, **identity, "method": method, "lookback": p.lookback, "points": records(points)}
