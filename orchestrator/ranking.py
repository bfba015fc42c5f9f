"""`results best`: the fastest correct configuration per (model, board), and how sure we are of it.

Only jobs whose outputs passed the check (status "ok") compete. Timings in different units, or emulated
timings and real ones, are never ranked against each other: each (model, board key, unit, emulated) is its
own ranking. An `onnxruntime` executor row is the baseline, not a competitor.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from db import models as m
from orchestrator import query as q
from orchestrator.stats import DEFAULT_SEED, median_ci

if TYPE_CHECKING:
    import pandas as pd

    from db.store import ResultStore

BASELINE_EXECUTOR = "onnxruntime"
RANK_KEYS = ["model", "board_key", "unit", "emulated"]


def config_name(row: Any) -> str:
    """A configuration as people say it: "vm-compiled O2 per-target on host"."""
    return f"{row['executor']} O{row['opt_level']} {row['pipeline']} ({row['target']})"


def latest_sweeps(store: ResultStore, filters: q.Filters) -> dict[tuple[str, str], str]:
    """For each (model, board key) with ok results, the newest sweep that has them.

    One GROUP BY over an index of jobs (status, model, board key, sweep): no per-group queries.
    """
    stmt = (
        select(m.Job.model_name, m.Job.board_key, m.Job.sweep_id)
        .select_from(m.Job)
        .where(m.Job.status == "ok")
        .group_by(m.Job.model_name, m.Job.board_key, m.Job.sweep_id)
    )
    if filters.board is not None:
        stmt = stmt.join(m.Run, m.Run.id == m.Job.final_run_id)
    stmt = q.apply_filters(stmt, replace(filters, sweep=None, status=None))
    with store.engine.connect() as conn:
        triples = conn.execute(stmt).all()
        sweep_ids = sorted({t[2] for t in triples})
        created = dict(conn.execute(select(m.Sweep.id, m.Sweep.created_at).where(m.Sweep.id.in_(sweep_ids))).all())
    newest: dict[tuple[str, str], str] = {}
    for model, board_key, sweep_id in triples:
        key = (model, board_key)
        if key not in newest or created[sweep_id] > created[newest[key]]:
            newest[key] = sweep_id
    return newest


def candidates(store: ResultStore, filters: q.Filters) -> pd.DataFrame:
    """The ok jobs to rank, with samples: of ``filters.sweep``, else of the newest sweep per (model, board)."""
    base = replace(filters, status="ok")
    if filters.sweep:
        return q.query(store, base, with_samples=True)
    newest = latest_sweeps(store, filters)
    if not newest:
        return q.query(store, replace(base, sweep=None), with_samples=True, limit=0)
    stmt = q.apply_filters(q.base_select(with_samples=True), replace(base, sweep=None)).where(
        m.Job.sweep_id.in_(sorted(set(newest.values())))
    )
    df = q.frame(store, stmt)
    keep = [newest.get((mod, bk)) == sid for mod, bk, sid in zip(df["model"], df["board_key"], df["sweep_id"])]
    return df[keep].reset_index(drop=True)


def _ci_dict(prefix: str, row: Any, confidence: float, seed: int) -> dict[str, Any]:
    ci = median_ci(row["samples"], confidence, seed=seed)
    value = row["median"] if row["median"] is not None else ci.value
    return {f"{prefix}_median": value, f"{prefix}_lo": ci.lo, f"{prefix}_hi": ci.hi, "_ci": ci}


def rank(df: pd.DataFrame, *, confidence: float = 0.95, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """One ranking row per (model, board key, unit, emulated) of the candidate frame ``df``."""
    out: list[dict[str, Any]] = []
    if df.empty:
        return out
    measured = df[df["median"].notna()]
    for (model, board_key, unit, emulated), group in measured.groupby(RANK_KEYS, sort=True):
        baseline = group[group["executor"] == BASELINE_EXECUTOR]
        contenders = group[group["executor"] != BASELINE_EXECUTOR]
        # A job that reused another's identical program carries the same numbers: rank the program once.
        keys = set(contenders["job_key"])
        contenders = contenders[~contenders["equivalent_to"].isin(keys)].sort_values(["median", "job_key"])
        if contenders.empty:
            continue
        top = contenders.iloc[0]
        best = _ci_dict("best", top, confidence, seed)
        row: dict[str, Any] = {
            "model": model,
            "board_key": board_key,
            "unit": unit,
            "emulated": bool(emulated),
            "sweep_id": top["sweep_id"],
            "candidates": len(contenders),
            "best": config_name(top),
            "best_job": top["job_key"],
            **{k: v for k, v in best.items() if k != "_ci"},
            "runner_up": None,
            "runner_up_median": None,
            "runner_up_lo": None,
            "runner_up_hi": None,
            "uncertain": False,
        }
        verdict = f"{config_name(top)} is fastest"
        if len(contenders) == 1:
            verdict = f"{config_name(top)} (the only configuration measured)"
        else:
            second = contenders.iloc[1]
            runner = _ci_dict("runner_up", second, confidence, seed)
            row.update({k: v for k, v in runner.items() if k != "_ci"})
            row["runner_up"] = config_name(second)
            if best["_ci"].overlaps(runner["_ci"]):
                row["uncertain"] = True
                verdict = f"uncertain: {config_name(top)} and {config_name(second)} overlap"
        slowest = contenders.iloc[-1]
        row["slowest"] = config_name(slowest)
        row["speedup_vs_slowest"] = float(slowest["median"]) / float(top["median"]) if top["median"] else math.nan
        if not baseline.empty:
            ort = float(baseline["median"].min())
            row["onnxruntime_median"] = ort
            row["speedup_vs_onnxruntime"] = ort / float(top["median"]) if top["median"] else math.nan
        else:
            row["onnxruntime_median"] = None
            row["speedup_vs_onnxruntime"] = None
        row["verdict"] = verdict
        out.append(row)
    return out


def best(
    store: ResultStore, filters: q.Filters | None = None, *, confidence: float = 0.95, seed: int = DEFAULT_SEED
) -> list[dict[str, Any]]:
    """The ranking of the newest results per (model, board) (or of ``filters.sweep``)."""
    return rank(candidates(store, filters or q.Filters()), confidence=confidence, seed=seed)
