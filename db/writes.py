"""Every write of a sweep's life, as functions of one session: sweeps and jobs, builds, runs and the
boards they ran on, cancelling. ResultStore (db/store.py) runs each in a transaction, retried whole.

Writes are idempotent: submitting the same sweep twice, or retrying a write after a failure, leaves one
row per job; rows several writers may create at once go through db/upserts.py.
"""

from __future__ import annotations

import os
import socket

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db import models as m
from db.lookup import resolve_prefix
from db.rows import build_values, job_values, model_values, now, run_values
from db.upserts import conflict_insert, insert_ignore, upsert
from tvmbench.core import liveness, records
from tvmbench.core.health import next_state

# --- sweeps and jobs -----------------------------------------------------------------------------


class SweepBusy(RuntimeError):
    """The sweep has a live driver already: a second one would build and measure the same jobs beside it."""


def refuse_a_second_driver(row: m.Sweep) -> None:
    """Raise SweepBusy when ``row`` is being run by another process that is still alive.

    Two drivers of one sweep would race for the same boards and jobs (both see them pending) and the
    first one's heartbeat would be overwritten, so `sweep status` could no longer tell it was alive.
    A driver that is gone (tvmbench/core/liveness.py), and a row from before drivers were recorded,
    are taken over, as a resume after a crash must be.
    """
    if row.status not in liveness.ACTIVE_STATUSES:
        return
    if row.driver_host == socket.gethostname() and row.driver_pid == os.getpid():
        return  # this process (the Python API running it again)
    if liveness.driver_gone(row.driver_host, row.driver_pid, row.heartbeat_at) is not False:
        return
    raise SweepBusy(
        f"sweep {row.id} is already being run by process {row.driver_pid} on {row.driver_host}: wait for it "
        f"(`tvmbench results sweeps` shows it running), or stop it with `tvmbench sweep cancel {row.id}` "
        "and run this again to finish what it left"
    )


def begin_sweep(
    s: Session,
    sweep_id: str,
    *,
    name: str,
    label: str,
    source: str,
    source_path: str,
    jobs: list[records.Job],
    model_sizes: dict[str, int],
    tvm_version: str,
    releases: dict[str, str] | None = None,
    job_ids: dict[tuple[str, str], int] | None = None,
) -> bool:
    """Record a sweep and its jobs as pending, this process as its driver; True if the sweep is new.

    ``releases``: the TVM version of each toolchain of the tvm axis (a job's build key is its release's).
    ``job_ids`` gets the id of every job row of the sweep (see ``job_id``).
    """
    driver = {"driver_host": socket.gethostname(), "driver_pid": os.getpid(), "heartbeat_at": now()}
    # Sorted, so that two sweeps sharing models insert them in the same order (no deadlock).
    for model in sorted({j.model.sha256: j.model for j in jobs}.values(), key=lambda x: x.sha256):
        insert_ignore(s, m.Model, model_values(model, model_sizes.get(model.sha256, 0)), ["sha256"])
    sweep = {
        "id": sweep_id,
        "name": name,
        "label": label,
        "source": source,
        "source_path": source_path,
        "status": "running",
        "job_count": len(jobs),
        "host": socket.gethostname(),
        "tvm_version": tvm_version,
        "created_at": now(),
        **driver,
    }
    new = insert_ignore(s, m.Sweep, sweep, ["id"])
    if not new:
        refuse_a_second_driver(s.get_one(m.Sweep, sweep_id, with_for_update=True))
        s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(status="running", **driver))
    # Jobs are inserted even when the sweep existed: a row lost to a crash between the two
    # inserts is recreated, and rows already there are left alone. One statement for all of them.
    rows = [
        job_values(sweep_id, job, (releases or {}).get(job.toolchain, tvm_version) if job.toolchain else tvm_version)
        for job in jobs
    ]
    if rows:
        s.execute(conflict_insert(s, m.Job, rows[0], ["sweep_id", "job_key"]), rows)
    if job_ids is not None:
        rows_ids = s.execute(select(m.Job.job_key, m.Job.id).where(m.Job.sweep_id == sweep_id))
        job_ids.update({(sweep_id, key): row_id for key, row_id in rows_ids})
    return new


def heartbeat(s: Session, sweep_id: str) -> None:
    """The driver is alive: refresh its heartbeat (tvmbench/core/liveness.py reads it)."""
    s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(heartbeat_at=now()))


def finish_sweep(s: Session, sweep_id: str, status: str) -> None:
    """The sweep's final status and time."""
    s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(status=status, finished_at=now()))


def job_row(s: Session, sweep_id: str, job_key: str) -> m.Job:
    """The jobs row of ``job_key`` in the sweep (NoResultFound if there is none)."""
    return s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id, m.Job.job_key == job_key)).one()


def job_id(s: Session, sweep_id: str, job_key: str, known: dict[tuple[str, str], int]) -> int:
    """The id of a job row; ``known`` remembers ids already looked up (they never change)."""
    key = (sweep_id, job_key)
    if key not in known:
        known[key] = s.scalars(select(m.Job.id).where(m.Job.sweep_id == sweep_id, m.Job.job_key == job_key)).one()
    return known[key]


def finish_job(s: Session, sweep_id: str, job_key: str, status: str, error: str | None = None) -> None:
    """Final state of a job that never reached a board (model or build error, cancelled), or a pending one's reason."""
    row = job_row(s, sweep_id, job_key)
    if row.status not in records.PENDING_STATUSES:
        return  # already final: a job never gets a second outcome
    row.status, row.error = status, error
    row.finished_at = None if status in records.PENDING_STATUSES else now()


# --- builds and runs -----------------------------------------------------------------------------


def save_build(s: Session, job: records.Job, build: records.Build) -> None:
    """Insert or replace the build row of ``build.build_key`` (a failed build may succeed later)."""
    upsert(s, m.Build, build_values(job, build), ["build_key"])


def record_run(s: Session, sweep_id: str, run: records.Run, *, final: bool, job_ids: dict[tuple[str, str], int]) -> int:
    """Store one attempt; when ``final``, it also becomes the job's outcome. Returns the run id.

    Idempotent per (job, attempt): writing the same attempt twice keeps the first. ``job_ids``: the
    job ids already looked up (see ``job_id``).
    """
    the_job = job_id(s, sweep_id, run.job_key, job_ids)
    if run.board_id:
        _ensure_board(s, run)
    values = run_values(the_job, run)
    # A second writer of the same attempt (a retried task, another driver) keeps the first row.
    stmt = conflict_insert(s, m.Run, values, ["job_id", "attempt"], returning="id")
    run_id = s.execute(stmt, values).scalar()
    if run_id is not None and run.board_id:
        _touch_board(s, run)
    if run_id is None:
        run_id = s.scalar(select(m.Run.id).where(m.Run.job_id == the_job, m.Run.attempt == run.attempt))
    # Only a job without a final row takes an outcome (e.g. not one cancelled meanwhile): the attempt
    # is kept either way. The condition is in the UPDATE, so two writers cannot both finish it.
    pending = (m.Job.id == the_job) & m.Job.status.in_(records.PENDING_STATUSES)
    if final:
        s.execute(
            update(m.Job)
            .where(pending)
            .values(
                status=run.status,
                error=run.error,
                final_run_id=run_id,
                equivalent_to=run.equivalent_to,
                finished_at=now(),
            )
        )
    elif run.status in records.PENDING_STATUSES:
        s.execute(update(m.Job).where(pending).values(status=run.status, error=run.error))
    return run_id


# --- boards --------------------------------------------------------------------------------------


def _ensure_board(s: Session, run: records.Run) -> None:
    """The board row a run points at exists (created on first sight)."""
    assert run.board_id is not None
    values = {
        "id": run.board_id,
        "key": run.board_id.split("@")[0],
        "emulated": run.emulated,
        "state": "ok",
        "consecutive_failures": 0,
        "last_seen": now(),
    }
    insert_ignore(s, m.Board, values, ["id"])


def _touch_board(s: Session, run: records.Run) -> None:
    """Update what is known of the board after a new run on it."""
    # Lock the row (PostgreSQL): two drivers updating one board's failure count serialise here.
    board = s.scalars(select(m.Board).where(m.Board.id == run.board_id).with_for_update()).one()
    facts = run.board_facts or {}
    board.arch = facts.get("arch", board.arch)
    board.emulated = bool(facts.get("emulated", run.emulated))
    board.facts = facts or board.facts
    board.last_seen = now()
    # The health rule (tvmbench/core/health.py): the golden model or a correct run clears the count, faults add up.
    board.state, board.consecutive_failures = next_state(
        board.state, board.consecutive_failures or 0, run.status, run.health
    )
    s.flush()


def reset_board(s: Session, board_ref: str) -> list[str]:
    """Put the board with id (or unique id prefix) ``board_ref`` back to ``ok``; its id, or [] if none."""
    board_id = resolve_prefix(s, m.Board.id, board_ref, "board id")
    if board_id is None:
        return []
    board = s.get(m.Board, board_id)
    board.state, board.consecutive_failures = "ok", 0
    return [board_id]


# --- cancel --------------------------------------------------------------------------------------


def request_cancel(s: Session, sweep_id: str) -> str | None:
    """Flag a sweep for cancelling; returns its status before (None if unknown)."""
    sweep = s.get(m.Sweep, sweep_id)
    if sweep is None:
        return None
    before = sweep.status
    if before in ("running", "incomplete", "cancelling"):
        sweep.status = "cancelling"
    return before


def cancel_pending_jobs(s: Session, sweep_id: str, reason: str) -> int:
    """Mark every job of the sweep without a final row ``cancelled`` and the sweep cancelled."""
    rows = list(s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id, m.Job.status.in_(records.PENDING_STATUSES))))
    for row in rows:
        row.status, row.error, row.finished_at = "cancelled", reason, now()
    s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(status="cancelled", finished_at=now()))
    return len(rows)


def reopen_cancelled(s: Session, sweep_id: str) -> int:
    """Make the sweep's cancelled jobs pending again (their attempts stay)."""
    rows = list(s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id, m.Job.status == "cancelled")))
    for row in rows:
        row.status, row.error, row.finished_at, row.final_run_id = "pending", None, None, None
    return len(rows)
