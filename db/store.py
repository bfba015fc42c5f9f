"""ResultStore: every write and query of the results database, over any SQLAlchemy URL.

SQLite (the default) runs in WAL mode with synchronous=FULL and a busy timeout, so a result that was
acknowledged survives a crash of the orchestrator. Writes are idempotent: submitting the same sweep
twice, or retrying a write after a failure, leaves one row per job.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from db import models as m
from workers import records

T = TypeVar("T")
QUARANTINE_AFTER = 3  # infra/timeout failures in a row before a board is quarantined (see orchestrator/health.py)
MIGRATIONS = Path(__file__).parent / "migrations"


def default_home() -> Path:
    """Where tvmbench keeps its database, artifact cache and farm state (TVMBENCH_HOME)."""
    return Path(os.environ.get("TVMBENCH_HOME", Path.home() / ".tvmbench"))


def default_url() -> str:
    """TVMBENCH_DB, else a SQLite file under TVMBENCH_HOME."""
    url = os.environ.get("TVMBENCH_DB")
    if url:
        return url
    home = default_home()
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'results.db'}"


def _now() -> datetime:
    return datetime.now(UTC)


def _ts(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


def make_engine(url: str) -> Engine:
    """An engine with the per-backend settings that make writes durable and concurrent."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (alembic upgrade head)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


class ResultStore:
    """Writes and queries of one results database."""

    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        self.url = url or default_url()
        self.engine = make_engine(self.url)
        if migrate:
            self._retry(lambda: upgrade(self.engine))
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    # --- plumbing -------------------------------------------------------------------------------

    def _retry(self, fn: Callable[[], T], attempts: int = 6) -> T:
        """Run a write, backing off while the database is busy or briefly unreachable."""
        delay = 0.2
        for i in range(attempts):
            try:
                return fn()
            except OperationalError:
                if i == attempts - 1:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    def _write(self, fn: Callable[[Session], T]) -> T:
        """One transaction, committed before this returns, retried as a whole when the DB is busy."""

        def attempt() -> T:
            with self._tx() as session:
                return fn(session)

        return self._retry(attempt)

    # --- sweeps and jobs ------------------------------------------------------------------------

    def begin_sweep(
        self,
        sweep_id: str,
        *,
        name: str,
        label: str,
        source: str,
        source_path: str,
        jobs: list[records.Job],
        model_sizes: dict[str, int],
        tvm_version: str,
    ) -> bool:
        """Record a sweep and its jobs as pending; True if the sweep is new, False if it existed."""

        def write(s: Session) -> bool:
            existing = s.get(m.Sweep, sweep_id)
            for job in jobs:
                if s.get(m.Model, job.model.sha256) is None:
                    s.add(
                        m.Model(
                            sha256=job.model.sha256,
                            name=job.model.name,
                            source=job.model.source,
                            size_bytes=model_sizes.get(job.model.sha256, 0),
                            inputs=[[n, list(sh), dt] for n, sh, dt in job.model.inputs],
                        )
                    )
                    s.flush()
            if existing is not None:
                existing.status = "running"
                return False
            s.add(
                m.Sweep(
                    id=sweep_id,
                    name=name,
                    label=label,
                    source=source,
                    source_path=source_path,
                    job_count=len(jobs),
                    host=socket.gethostname(),
                    tvm_version=tvm_version,
                    created_at=_now(),
                )
            )
            s.flush()
            for job in jobs:
                s.add(
                    m.Job(
                        sweep_id=sweep_id,
                        job_key=job.key,
                        model_sha256=job.model.sha256,
                        model_name=job.model.name,
                        target_name=job.target.name,
                        board_key=job.target.board_key,
                        executor=job.executor,
                        opt_level=job.opt_level,
                        pipeline=job.pipeline,
                        build_key=job.build_key(tvm_version),
                        config={
                            **job.build_config(),
                            "measure": asdict(job.measure),
                            "board_key": job.target.board_key,
                            "target_name": job.target.name,
                            "emulated": job.target.emulated,
                        },
                    )
                )
            return True

        try:
            return self._write(write)
        except IntegrityError:
            # The same sweep submitted concurrently: the other writer won, which is the same result.
            return False

    def job_statuses(self, sweep_id: str) -> dict[str, str]:
        with self._sessions() as s:
            rows = s.execute(select(m.Job.job_key, m.Job.status).where(m.Job.sweep_id == sweep_id))
            return {k: st for k, st in rows}

    def finish_sweep(self, sweep_id: str, status: str) -> None:
        def write(s: Session) -> None:
            s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(status=status, finished_at=_now()))

        self._write(write)

    def get_sweep(self, sweep_id: str) -> m.Sweep | None:
        with self._sessions() as s:
            sweep = s.get(m.Sweep, sweep_id)
            if sweep is None:
                sweep = s.scalars(select(m.Sweep).where(m.Sweep.id.startswith(sweep_id))).first()
            return sweep

    def list_sweeps(self) -> list[m.Sweep]:
        with self._sessions() as s:
            return list(s.scalars(select(m.Sweep).order_by(m.Sweep.created_at.desc())))

    # --- builds ---------------------------------------------------------------------------------

    def get_build(self, build_key: str) -> records.Build | None:
        with self._sessions() as s:
            row = s.get(m.Build, build_key)
            if row is None:
                return None
            return records.Build(
                build_key=row.build_key,
                status=row.status,
                error=row.error,
                fingerprint=row.fingerprint,
                pass_trace=tuple(row.pass_trace or ()),
                kernel_count=row.kernel_count,
                compile_s=row.compile_s,
                artifact_sha256=row.artifact_sha256,
                artifact_size=row.artifact_size,
                artifact_arch=row.artifact_arch,
                tvm_version=row.tvm_version,
                ffi_version=row.ffi_version,
                host=row.host,
            )

    def save_build(self, job: records.Job, build: records.Build) -> None:
        """Insert or replace the build row of ``build.build_key`` (a failed build may succeed later)."""

        def write(s: Session) -> None:
            row = s.get(m.Build, build.build_key) or m.Build(build_key=build.build_key)
            row.model_sha256 = job.model.sha256
            row.target = job.target.tvm_target
            row.executor, row.opt_level, row.pipeline = job.executor, job.opt_level, job.pipeline
            row.status, row.error, row.fingerprint = build.status, build.error, build.fingerprint
            row.pass_trace, row.pass_count = list(build.pass_trace), len(build.pass_trace)
            row.kernel_count, row.compile_s = build.kernel_count, build.compile_s
            row.artifact_sha256, row.artifact_size = build.artifact_sha256, build.artifact_size
            row.artifact_arch, row.tvm_version = build.artifact_arch, build.tvm_version
            row.ffi_version, row.host, row.created_at = build.ffi_version, build.host, _now()
            s.merge(row)

        self._write(write)

    # --- outcomes -------------------------------------------------------------------------------

    def _job_row(self, s: Session, sweep_id: str, job_key: str) -> m.Job:
        row = s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id, m.Job.job_key == job_key)).one()
        return row

    def finish_job(self, sweep_id: str, job_key: str, status: str, error: str | None = None) -> None:
        """Final state of a job that never reached a board (model or build error, cancelled)."""

        def write(s: Session) -> None:
            row = self._job_row(s, sweep_id, job_key)
            if row.status not in records.PENDING_STATUSES:
                return  # already final: a job never gets a second outcome
            row.status, row.error, row.finished_at = status, error, _now()

        self._write(write)

    def record_run(self, sweep_id: str, run: records.Run, *, final: bool) -> int:
        """Store one attempt; when ``final``, it also becomes the job's outcome. Returns the run id.

        Idempotent per (job, attempt): writing the same attempt twice keeps the first.
        """

        def write(s: Session) -> int:
            job = self._job_row(s, sweep_id, run.job_key)
            existing = s.scalars(select(m.Run).where(m.Run.job_id == job.id, m.Run.attempt == run.attempt)).first()
            if existing is not None:
                row = existing
            else:
                if run.board_id:
                    self._touch_board(s, run)
                row = m.Run(
                    job_id=job.id,
                    attempt=run.attempt,
                    board_id=run.board_id,
                    status=run.status,
                    error=run.error,
                    unit="ms",
                    samples=list(run.samples_ms),
                    median=run.median_ms,
                    mean=run.mean_ms,
                    std=run.std_ms,
                    min=run.min_ms,
                    max=run.max_ms,
                    max_abs_err=run.max_abs_err,
                    max_rel_err=run.max_rel_err,
                    emulated=run.emulated,
                    load_avg_1m=run.load_avg_1m,
                    builds_in_flight=run.builds_in_flight,
                    equivalent_to=run.equivalent_to,
                    started_at=_ts(run.started_at),
                    finished_at=_ts(run.finished_at),
                )
                s.add(row)
                s.flush()
            if job.status not in records.PENDING_STATUSES:
                pass  # already final (e.g. cancelled meanwhile): the attempt is kept, the outcome is not replaced
            elif final:
                job.status, job.error, job.final_run_id = run.status, run.error, row.id
                job.equivalent_to, job.finished_at = run.equivalent_to, _now()
            elif run.status in records.PENDING_STATUSES:
                job.status, job.error = run.status, run.error
            return row.id

        return self._write(write)

    def _touch_board(self, s: Session, run: records.Run) -> None:
        board = s.get(m.Board, run.board_id)
        facts = run.board_facts or {}
        if board is None:
            board = m.Board(id=run.board_id, key=run.board_id.split("@")[0], consecutive_failures=0, state="ok")
            s.add(board)
        board.arch = facts.get("arch", board.arch)
        board.emulated = bool(facts.get("emulated", run.emulated))
        board.facts = facts or board.facts
        board.last_seen = _now()
        if run.health == "ok":  # the golden model ran correctly just before this attempt
            board.consecutive_failures = 0
            if board.state == "suspect":
                board.state = "ok"
        if run.status in ("ok", "wrong-result"):
            board.consecutive_failures = 0
            if board.state == "suspect":
                board.state = "ok"
        elif run.status in ("infra", "timeout"):
            board.consecutive_failures = (board.consecutive_failures or 0) + 1
            if board.state != "quarantined":
                board.state = "quarantined" if board.consecutive_failures >= QUARANTINE_AFTER else "suspect"
        s.flush()

    def board_states(self) -> dict[str, str]:
        """State (ok / suspect / quarantined) of every board the database knows."""
        with self._sessions() as s:
            return {board_id: state for board_id, state in s.execute(select(m.Board.id, m.Board.state))}

    def reset_board(self, board_ref: str) -> list[str]:
        """Put boards whose id starts with ``board_ref`` back to ``ok`` (ends a quarantine); returns their ids."""

        def write(s: Session) -> list[str]:
            boards = list(s.scalars(select(m.Board).where(m.Board.id.startswith(board_ref))))
            for board in boards:
                board.state, board.consecutive_failures = "ok", 0
            return [b.id for b in boards]

        return self._write(write)

    # --- cancel ---------------------------------------------------------------------------------

    def request_cancel(self, sweep_id: str) -> str | None:
        """Flag a sweep for cancelling; returns its status before (None if unknown).

        A running driver polls the flag (``sweep status == "cancelling"``) between events.
        """

        def write(s: Session) -> str | None:
            sweep = s.get(m.Sweep, sweep_id)
            if sweep is None:
                return None
            before = sweep.status
            if before in ("running", "incomplete", "cancelling"):
                sweep.status = "cancelling"
            return before

        return self._write(write)

    def sweep_status(self, sweep_id: str) -> str | None:
        with self._sessions() as s:
            return s.scalar(select(m.Sweep.status).where(m.Sweep.id == sweep_id))

    def cancel_pending_jobs(self, sweep_id: str, reason: str) -> int:
        """Mark every job of the sweep without a final row ``cancelled`` and the sweep cancelled."""

        def write(s: Session) -> int:
            rows = list(
                s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id, m.Job.status.in_(records.PENDING_STATUSES)))
            )
            for row in rows:
                row.status, row.error, row.finished_at = "cancelled", reason, _now()
            s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(status="cancelled", finished_at=_now()))
            return len(rows)

        return self._write(write)

    def next_attempt(self, sweep_id: str, job_key: str) -> int:
        with self._sessions() as s:
            job = self._job_row(s, sweep_id, job_key)
            top = s.scalar(select(func.max(m.Run.attempt)).where(m.Run.job_id == job.id))
            return (top or 0) + 1

    # --- queries --------------------------------------------------------------------------------

    def results(self, sweep_id: str | None = None) -> list[dict[str, Any]]:
        """One flat row per job (its final run's figures joined in), newest sweep first."""
        stmt = (
            select(m.Job, m.Run, m.Build, m.Sweep.created_at)
            .join(m.Sweep, m.Sweep.id == m.Job.sweep_id)
            .outerjoin(m.Run, m.Run.id == m.Job.final_run_id)
            .outerjoin(m.Build, m.Build.build_key == m.Job.build_key)
            .order_by(m.Sweep.created_at.desc(), m.Job.id)
        )
        if sweep_id:
            stmt = stmt.where(m.Job.sweep_id.startswith(sweep_id))
        with self._sessions() as s:
            return [_result_row(job, run, build) for job, run, build, _ in s.execute(stmt)]

    def job_detail(self, job_ref: str, sweep_id: str | None = None) -> dict[str, Any] | None:
        """Everything about one job (key prefix), from the newest sweep that has it unless ``sweep_id``."""
        stmt = (
            select(m.Job)
            .join(m.Sweep, m.Sweep.id == m.Job.sweep_id)
            .where(m.Job.job_key.startswith(job_ref))
            .order_by(m.Sweep.created_at.desc())
        )
        if sweep_id:
            stmt = stmt.where(m.Job.sweep_id.startswith(sweep_id))
        with self._sessions() as s:
            job = s.scalars(stmt).first()
            if job is None:
                return None
            build = s.get(m.Build, job.build_key)
            runs = list(s.scalars(select(m.Run).where(m.Run.job_id == job.id).order_by(m.Run.attempt)))
            final = next((r for r in runs if r.id == job.final_run_id), None)
            detail = _result_row(job, final, build)
            detail["config"] = job.config
            detail["error"] = job.error
            detail["build"] = (
                None
                if build is None
                else {
                    "status": build.status,
                    "error": build.error,
                    "fingerprint": build.fingerprint,
                    "pass_count": build.pass_count,
                    "pass_trace": build.pass_trace,
                    "kernel_count": build.kernel_count,
                    "compile_s": build.compile_s,
                    "artifact_sha256": build.artifact_sha256,
                    "artifact_size": build.artifact_size,
                    "artifact_arch": build.artifact_arch,
                    "tvm_version": build.tvm_version,
                    "ffi_version": build.ffi_version,
                    "host": build.host,
                }
            )
            detail["runs"] = [
                {
                    "attempt": r.attempt,
                    "board": r.board_id,
                    "status": r.status,
                    "error": r.error,
                    "unit": r.unit,
                    "samples": r.samples,
                    "median": r.median,
                    "mean": r.mean,
                    "std": r.std,
                    "min": r.min,
                    "max": r.max,
                    "max_abs_err": r.max_abs_err,
                    "max_rel_err": r.max_rel_err,
                    "emulated": r.emulated,
                    "load_avg_1m": r.load_avg_1m,
                    "builds_in_flight": r.builds_in_flight,
                    "equivalent_to": r.equivalent_to,
                    "started_at": r.started_at.isoformat() if r.started_at else None,
                    "finished_at": r.finished_at.isoformat() if r.finished_at else None,
                }
                for r in runs
            ]
            if build is not None and build.fingerprint:
                same = s.execute(
                    select(m.Job.job_key, m.Job.opt_level, m.Job.pipeline, m.Job.executor)
                    .join(m.Build, m.Build.build_key == m.Job.build_key)
                    .where(
                        m.Job.sweep_id == job.sweep_id,
                        m.Build.fingerprint == build.fingerprint,
                        m.Job.board_key == job.board_key,
                        m.Job.id != job.id,
                    )
                )
                detail["same_program_as"] = [
                    {"job_key": k, "opt_level": o, "pipeline": p, "executor": e} for k, o, p, e in same
                ]
            return detail

    def boards(self) -> list[m.Board]:
        with self._sessions() as s:
            return list(s.scalars(select(m.Board).order_by(m.Board.key, m.Board.id)))


def _result_row(job: m.Job, run: m.Run | None, build: m.Build | None) -> dict[str, Any]:
    return {
        "sweep_id": job.sweep_id,
        "job_key": job.job_key,
        "model": job.model_name,
        "target": job.target_name,
        "board_key": job.board_key,
        "board": run.board_id if run else None,
        "executor": job.executor,
        "opt_level": job.opt_level,
        "pipeline": job.pipeline,
        "status": job.status,
        "unit": run.unit if run else "ms",
        "median_ms": run.median if run and run.unit == "ms" else None,
        "std_ms": run.std if run and run.unit == "ms" else None,
        "samples": run.samples if run else [],
        "max_abs_err": run.max_abs_err if run else None,
        "emulated": bool(run.emulated) if run else bool(job.config.get("emulated")),
        "equivalent_to": job.equivalent_to,
        "fingerprint": build.fingerprint if build else None,
        "compile_s": build.compile_s if build else None,
        "kernel_count": build.kernel_count if build else None,
        "pass_count": build.pass_count if build else None,
        "error": job.error,
    }
