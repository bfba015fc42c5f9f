"""MetaSchedule tuning records in the results database, as functions of one session: workloads per
scope, their records, what a scope covers (workers/tuning/database.py is the MetaSchedule side).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from db import models as m
from db.rows import now
from db.upserts import insert_ignore
from tvmbench.core import records

_WORKLOAD_KEY = ["workload_hash", "module_equality", "target_key", "board_key", "tvm_version"]


def scope_clause(scope: records.TuningScope) -> Any:
    """WHERE the workload belongs to ``scope`` (target, board key, TVM version, module equality)."""
    w = m.TuningWorkload
    return (
        (w.target_key == scope.target_key)
        & (w.board_key == scope.board_key)
        & (w.tvm_version == scope.tvm_version)
        & (w.module_equality == scope.module_equality)
    )


def tuning_record_rank(trace: list[Any], run_secs: list[float] | None) -> tuple[float, bool]:
    """MetaSchedule's sort key and validity of a record, from its JSON (TuningRecordNode::IsValid).

    Mean of the run seconds (1e10 when there are none); valid when some run time is not the 1e10 stub of
    a failed run and the trace has an instruction before post-processing.
    """
    times = [float(t) for t in run_secs or []]
    mean = sum(times) / len(times) if times else records.MS_FAILED_RUN_S
    insts = trace[0] if trace else []
    scheduled = bool(insts) and insts[0][0] != "EnterPostproc"
    return mean, scheduled and any(t != records.MS_FAILED_RUN_S for t in times)


def workload(s: Session, scope: records.TuningScope, workload_hash: str) -> m.TuningWorkload | None:
    """The workload row of ``workload_hash`` in ``scope``, or None."""
    stmt = select(m.TuningWorkload).where(scope_clause(scope), m.TuningWorkload.workload_hash == workload_hash)
    return s.scalars(stmt).first()


def commit_workload(
    s: Session,
    scope: records.TuningScope,
    workload_hash: str,
    mod_b64: str,
    *,
    model_name: str | None = None,
    task_name: str | None = None,
) -> int:
    """The id of the workload in ``scope``, created if missing (several writers may race: one row)."""
    values = {
        "workload_hash": workload_hash,
        "module_equality": scope.module_equality,
        "target_key": scope.target_key,
        "target": scope.target,
        "board_key": scope.board_key,
        "tvm_version": scope.tvm_version,
        "mod_b64": mod_b64,
        "task_name": task_name,
        "created_at": now(),
    }
    insert_ignore(s, m.TuningWorkload, values, _WORKLOAD_KEY)
    stmt = select(m.TuningWorkload.id).where(scope_clause(scope), m.TuningWorkload.workload_hash == workload_hash)
    workload_id = s.scalars(stmt).one()
    if model_name:
        link_model(s, workload_id, model_name)
    return workload_id


def link_model(s: Session, workload_id: int, model_name: str) -> None:
    """Note that ``model_name``'s tuning met workload ``workload_id`` (idempotent)."""
    link = {"workload_id": workload_id, "model_name": model_name}
    insert_ignore(s, m.TuningWorkloadModel, link, ["workload_id", "model_name"])


def commit_record(s: Session, workload_id: int, record_json: list[Any], *, source: str | None = None) -> bool:
    """Store one MetaSchedule record ``[trace, run_secs, target, args_info]``; False if already stored."""
    trace, run_secs, target, args_info = record_json
    mean, valid = tuning_record_rank(trace, run_secs)
    values = {
        "workload_id": workload_id,
        "record_hash": records.canonical_hash([trace, run_secs, target, args_info]),
        "trace": trace,
        "run_secs": run_secs,
        "target": target,
        "args_info": args_info,
        "mean_run_s": mean,
        "valid": valid,
        "source": source,
        "created_at": now(),
    }
    return insert_ignore(s, m.TuningRecord, values, ["workload_id", "record_hash"])


def top_k(s: Session, workload_id: int, k: int, first_n: int | None = None) -> list[m.TuningRecord]:
    """The ``k`` fastest valid records of a workload, fastest first (ties: oldest first, as MS).

    ``first_n``: only among the workload's first ``first_n`` records in store order (id ascending, failed
    trials included): what a fixed budget of that many trials stored, whatever was tuned after it.
    """
    r = m.TuningRecord
    if first_n is not None and first_n <= 0:
        return []
    stmt = select(r).where(r.workload_id == workload_id, r.valid.is_(True))
    if first_n is not None:
        first = select(r.id).where(r.workload_id == workload_id).order_by(r.id).limit(first_n)
        stmt = stmt.where(r.id.in_(first))
    return list(s.scalars(stmt.order_by(r.mean_run_s, r.id).limit(k)))


def records_with_workloads(
    s: Session,
    scope: records.TuningScope | None = None,
    *,
    target_key: str | None = None,
    board_key: str | None = None,
    tvm_version: str | None = None,
    model_name: str | None = None,
) -> list[tuple[m.TuningWorkload, m.TuningRecord]]:
    """Records with their workloads (of ``scope``, or filtered), per workload fastest first."""
    w, r = m.TuningWorkload, m.TuningRecord
    stmt = select(w, r).join(r, r.workload_id == w.id).order_by(w.id, r.mean_run_s, r.id)
    if scope is not None:
        stmt = stmt.where(scope_clause(scope))
    if target_key is not None:
        stmt = stmt.where(w.target_key == target_key)
    if board_key is not None:
        stmt = stmt.where(w.board_key == board_key)
    if tvm_version is not None:
        stmt = stmt.where(w.tvm_version == tvm_version)
    if model_name is not None:
        linked = select(m.TuningWorkloadModel.workload_id).where(m.TuningWorkloadModel.model_name == model_name)
        stmt = stmt.where(w.id.in_(linked))
    return [(wl, rec) for wl, rec in s.execute(stmt)]


def record_count(s: Session, scope: records.TuningScope) -> int:
    """How many records (valid or not) ``scope`` holds (MetaSchedule's ``len(database)``)."""
    w, r = m.TuningWorkload, m.TuningRecord
    return int(s.scalar(select(func.count(r.id)).join(w, r.workload_id == w.id).where(scope_clause(scope))) or 0)


def coverage(s: Session, scope: records.TuningScope, workload_hashes: list[str]) -> dict[str, dict[str, Any]]:
    """Per workload hash: trials already stored (``trials``), how many ran (``valid``), best seconds.

    What `sweep plan` shows as "trials already covered" and what a tuning stage subtracts from its
    budget. Hashes the scope has never seen map to zero trials.
    """
    w, r = m.TuningWorkload, m.TuningRecord
    out: dict[str, dict[str, Any]] = {h: {"trials": 0, "valid": 0, "best_s": None} for h in workload_hashes}
    if not workload_hashes:
        return out
    valid_time = case((r.valid.is_(True), r.mean_run_s))
    stmt = (
        select(w.workload_hash, func.count(r.id), func.count(valid_time), func.min(valid_time))
        .join(r, r.workload_id == w.id)
        .where(scope_clause(scope), w.workload_hash.in_(sorted(set(workload_hashes))))
        .group_by(w.workload_hash)
    )
    for h, trials, valid, best in s.execute(stmt):
        out[h] = {"trials": int(trials), "valid": int(valid), "best_s": best}
    return out


def scopes(s: Session) -> list[dict[str, Any]]:
    """One row per scope in the database: target, board key, TVM, equality, workloads and records.

    Only workloads with records count, and a scope without any is left out: a tuned build stores each
    task's workload before its first trial, so a sweep cancelled then leaves workloads that hold nothing
    to list, export or reuse.
    """
    w, r = m.TuningWorkload, m.TuningRecord
    keys = (w.target_key, w.board_key, w.tvm_version, w.module_equality)
    stmt = (
        select(*keys, func.count(func.distinct(w.id)), func.count(r.id))
        .join(r, r.workload_id == w.id)
        .group_by(*keys)
        .order_by(w.board_key, w.target_key)
    )
    rows = s.execute(stmt).all()
    first = select(func.min(w.id)).group_by(w.target_key)  # one row per target: JSON has no MIN()
    targets = dict(s.execute(select(w.target_key, w.target).where(w.id.in_(first))).all())
    return [
        {
            "target": targets.get(tk),
            "target_key": tk,
            "board_key": bk,
            "tvm_version": tv,
            "module_equality": eq,
            "workloads": int(nw),
            "records": int(nr),
        }
        for tk, bk, tv, eq, nw, nr in rows
    ]


def spread(ids: list[int], best: int, count: int) -> list[int]:
    """``count`` of ``ids`` (ranked fastest first): the ``best`` first ones and the rest evenly spaced, so a
    sample keeps slow records beside fast ones (a cost model learns a ranking from both)."""
    if len(ids) <= count:
        return list(ids)
    head, rest, k = ids[:best], ids[best:], count - min(best, count)
    if k <= 0:
        return head[:count]
    picks = sorted({round(i * (len(rest) - 1) / max(1, k - 1)) for i in range(k)})
    return head + [rest[i] for i in picks]


def sample(
    s: Session, scope: records.TuningScope, *, best: int, per_workload: int, total: int
) -> list[tuple[m.TuningWorkload, list[m.TuningRecord]]]:
    """Per workload of ``scope`` with valid records: a sample of them, fastest first (``spread``), at most
    ``per_workload`` each and ``total`` in all (fewer per workload when there are many); failed trials never.
    """
    w, r = m.TuningWorkload, m.TuningRecord
    ranked: dict[int, list[int]] = {}
    stmt = (
        select(r.workload_id, r.id)
        .join(w, r.workload_id == w.id)
        .where(scope_clause(scope), r.valid.is_(True))
        .order_by(r.workload_id, r.mean_run_s, r.id)
    )
    for workload_id, record_id in s.execute(stmt):  # ids only: the traces are read for the chosen ones
        ranked.setdefault(workload_id, []).append(record_id)
    if not ranked:
        return []
    each = max(1, min(per_workload, total // len(ranked)))
    chosen = {wid: spread(ids, min(best, each), each) for wid, ids in list(ranked.items())[:total]}
    wanted = [i for ids in chosen.values() for i in ids]
    rows: dict[int, m.TuningRecord] = {}
    for at in range(0, len(wanted), 500):  # under any backend's limit on bound parameters
        rows.update({x.id: x for x in s.scalars(select(r).where(r.id.in_(wanted[at : at + 500])))})
    workloads = {x.id: x for x in s.scalars(select(w).where(w.id.in_(list(chosen))))}
    return [(workloads[wid], [rows[i] for i in ids]) for wid, ids in chosen.items()]
