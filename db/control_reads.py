"""The few reads the control plane acts on while it writes (job statuses, a cached build, board states,
the cancel flag, attempt numbers, a sweep by id), as functions of one session.

Reads that answer people live in tvmbench/answers/.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db import models as m
from db.lookup import resolve_prefix
from db.rows import build_record
from db.writes import job_row
from tvmbench.core import records


def job_statuses(s: Session, sweep_id: str) -> dict[str, str]:
    """Status of every job of the sweep, by job key."""
    rows = s.execute(select(m.Job.job_key, m.Job.status).where(m.Job.sweep_id == sweep_id))
    return {k: st for k, st in rows}


def get_sweep(s: Session, sweep_ref: str) -> m.Sweep | None:
    """The sweep with this id or unique id prefix; None if none, QueryError if several start so."""
    sweep_id = resolve_prefix(s, m.Sweep.id, sweep_ref, "sweep id")
    return None if sweep_id is None else s.get(m.Sweep, sweep_id)


def sweep_ids_named(s: Session, name: str, limit: int = 5) -> list[str]:
    """Ids of the sweeps whose name or label is ``name``, newest first (at most ``limit``)."""
    stmt = select(m.Sweep.id).where((m.Sweep.name == name) | (m.Sweep.label == name))
    return list(s.scalars(stmt.order_by(m.Sweep.created_at.desc()).limit(limit)))


def sweep_status(s: Session, sweep_id: str) -> str | None:
    """The sweep's stored status (None if unknown)."""
    return s.scalar(select(m.Sweep.status).where(m.Sweep.id == sweep_id))


def get_build(s: Session, build_key: str) -> records.Build | None:
    """The stored build of ``build_key`` as a record, or None."""
    row = s.get(m.Build, build_key)
    return None if row is None else build_record(row)


def get_builds(s: Session, build_keys: list[str]) -> dict[str, records.Build]:
    """The stored builds of ``build_keys`` as records, by key (one query per 500 keys)."""
    keys, found = sorted(set(build_keys)), {}
    for i in range(0, len(keys), 500):
        for row in s.scalars(select(m.Build).where(m.Build.build_key.in_(keys[i : i + 500]))):
            found[row.build_key] = build_record(row)
    return found


def built_keys(s: Session, build_keys: set[str]) -> set[str]:
    """Which of ``build_keys`` have an ok build row (one query per 500 keys)."""
    keys, found = sorted(build_keys), set()
    for i in range(0, len(keys), 500):
        chunk = keys[i : i + 500]
        found.update(s.scalars(select(m.Build.build_key).where(m.Build.build_key.in_(chunk), m.Build.status == "ok")))
    return found


def board_states(s: Session) -> dict[str, str]:
    """State (ok / suspect / quarantined) of every board the database knows."""
    return {board_id: state for board_id, state in s.execute(select(m.Board.id, m.Board.state))}


def last_attempts(s: Session, sweep_id: str) -> dict[str, int]:
    """Highest attempt number stored per job key of the sweep (jobs without a run are absent)."""
    rows = s.execute(
        select(m.Job.job_key, func.max(m.Run.attempt))
        .join(m.Run, m.Run.job_id == m.Job.id)
        .where(m.Job.sweep_id == sweep_id)
        .group_by(m.Job.job_key)
    )
    return {key: int(top) for key, top in rows}


def next_attempt(s: Session, sweep_id: str, job_key: str) -> int:
    """The number the job's next attempt gets (1 for a job without a run)."""
    job = job_row(s, sweep_id, job_key)
    top = s.scalar(select(func.max(m.Run.attempt)).where(m.Run.job_id == job.id))
    return (top or 0) + 1
