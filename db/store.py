"""ResultStore: every write of the results database, over any SQLAlchemy URL.

Reads live elsewhere: the ones that answer people (result rows, one job in full, sweeps, boards and all
the analytics) in tvmbench/answers/query.py; here only the few the control plane acts on while it writes (job
statuses, a cached build, board states, the cancel flag, the next attempt number, a sweep by id).

SQLite (the default) runs in WAL mode with synchronous=FULL and a busy timeout, so a result that was
acknowledged survives a crash of the orchestrator. Writes are idempotent: submitting the same sweep
twice, or retrying a write after a failure, leaves one row per job. Rows that several writers may create
at once (models, sweeps, jobs, builds, boards, runs) are written with INSERT ... ON CONFLICT, so
drivers on several machines sharing one PostgreSQL database never trip over each other's rows.
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

from sqlalchemy import case, create_engine, event, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from db import models as m
from db.lookup import resolve_prefix
from tvmbench.core import records
from tvmbench.core.errors import describe_missing, one_line
from tvmbench.core.health import next_state
from tvmbench.core.pass_trace import compact_split, expand, pipeline_passes

T = TypeVar("T")
MIGRATIONS = Path(__file__).parent / "migrations"


def default_home() -> Path:
    """Where tvmbench keeps its database, artifact cache and farm state (TVMBENCH_HOME)."""
    return Path(os.environ.get("TVMBENCH_HOME", Path.home() / ".tvmbench"))


def ensure_home() -> Path:
    """TVMBENCH_HOME, created if missing; StoreError naming it when it is not (and cannot be) a folder."""
    home = default_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "is a file, not a folder" if home.is_file() else f"cannot be created ({exc.strerror or exc})"
        raise StoreError(
            f"TVMBENCH_HOME {home} {what}: point TVMBENCH_HOME at a folder tvmbench may write (default ~/.tvmbench)"
        ) from None
    return home


def default_url() -> str:
    """TVMBENCH_DB, else a SQLite file under TVMBENCH_HOME."""
    url = os.environ.get("TVMBENCH_DB")
    if url:
        return url
    return f"sqlite:///{ensure_home() / 'results.db'}"


def _now() -> datetime:
    return datetime.now(UTC)


def _ts(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


class StoreError(RuntimeError):
    """The results database cannot be opened as asked; the message names the path and what to do."""


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///path`` URL (None for other backends and in-memory databases)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def check_sqlite_path(path: Path) -> None:
    """Fail at once (not after the write retries) when ``path`` cannot be a SQLite database file."""
    if path.exists() and not path.is_file():
        raise StoreError(
            f"{path} {describe_missing(path)}: give the path of a database file, e.g. {path / 'results.db'}"
        )
    if not path.parent.is_dir():
        raise StoreError(f"{path}: folder {path.parent} {describe_missing(path.parent)}: create it or fix the path")


SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def check_backend(url: str) -> None:
    """StoreError unless ``url`` is a SQLAlchemy URL of a supported backend (not, say, a driver import error)."""
    try:
        backend = make_url(url).get_backend_name()
    except Exception as exc:  # sqlalchemy.exc.ArgumentError, ValueError: not a URL at all
        raise StoreError(
            f"{url!r} is not a database URL ({one_line(exc)}): use sqlite:///path/results.db or "
            "postgresql+psycopg://user@host/db"
        ) from None
    if backend not in SUPPORTED_BACKENDS:
        raise StoreError(
            f"{url}: {backend!r} databases are not supported: use sqlite:///path/results.db or "
            "postgresql+psycopg://user@host/db"
        )


#: Threads that read through one read-only engine at once: Starlette's threadpool (anyio's 40 tokens).
READ_THREADS = 40


def make_engine(url: str, *, read_only: bool = False) -> Engine:
    """An engine with the per-backend settings that make writes durable and concurrent.

    ``read_only``: SQLite opens the file read-only (``mode=ro``), or as immutable where its folder is
    not writable (a read-only mount: SQLite could not create the WAL index there, and nobody can write);
    PostgreSQL sessions start with ``default_transaction_read_only`` (ResultStore asks for that only
    with ``never_write``).
    """
    path = sqlite_path(url) if url.startswith("sqlite") else None
    if path is not None and read_only:
        from urllib.parse import quote

        mode = "mode=ro" if os.access(path.parent, os.W_OK) else "immutable=1"
        target = f"file:{quote(str(path.resolve()))}?{mode}"
        # A file URL would get SQLAlchemy's QueuePool, but ``creator`` with "sqlite://" gets the in-memory
        # default, a SingletonThreadPool: one connection per thread, closed by whichever thread tidies the
        # pool, under the dashboard's worker threads (SIGSEGV, "Cannot operate on a closed database").
        # A QueuePool lends each connection to one thread at a time; it holds as many as Starlette's
        # threadpool runs at once, so no request waits for another's connection.
        engine = create_engine(
            "sqlite://",
            creator=lambda: _sqlite_connect(target),
            poolclass=QueuePool,
            pool_size=8,
            max_overflow=READ_THREADS - 8,
        )

        @event.listens_for(engine, "connect")
        def _read_pragmas(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA query_only=ON")

        return engine
    if read_only and not url.startswith("sqlite"):
        # PostgreSQL: every transaction of these sessions is read-only; the server refuses writes.
        return create_engine(url, pool_pre_ping=True, connect_args={"options": "-c default_transaction_read_only=on"})
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


def _sqlite_connect(uri: str) -> Any:
    import sqlite3

    return sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)


_DIALECT_INSERT = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}
_STATEMENTS: dict[tuple[Any, ...], Any] = {}


def conflict_insert(
    session: Session,
    model: type[m.Base],
    columns: Any,
    conflict: list[str],
    *,
    update: bool = False,
    returning: str | None = None,
) -> Any:
    """INSERT ... ON CONFLICT (conflict) DO NOTHING (or, with ``update``, DO UPDATE of ``columns``).

    The values go to ``session.execute`` as parameters: the statement is built once per shape rather
    than once per row (building it with ``.values()`` each time was most of a write's cost in a sweep).
    PostgreSQL and SQLite, the two supported backends, both have ON CONFLICT.
    """
    dialect = session.get_bind().dialect.name
    key = (dialect, model, tuple(columns), tuple(conflict), update, returning)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        if dialect not in _DIALECT_INSERT:
            raise ValueError(f"unsupported database {dialect!r}: use sqlite:///path or postgresql+psycopg://host/db")
        insert = _DIALECT_INSERT[dialect](model)
        if update:
            changed = {k: insert.excluded[k] for k in columns if k not in conflict}
            stmt = insert.on_conflict_do_update(index_elements=conflict, set_=changed)
        else:
            stmt = insert.on_conflict_do_nothing(index_elements=conflict)
        if returning is not None:
            stmt = stmt.returning(getattr(model, returning))
        _STATEMENTS[key] = stmt
    return stmt


def insert_ignore(session: Session, model: type[m.Base], values: dict[str, Any], conflict: list[str]) -> bool:
    """INSERT ... ON CONFLICT (conflict) DO NOTHING; True if this call created the row.

    A concurrent writer inserting the same key makes this one wait for its commit and then do nothing,
    instead of failing with an IntegrityError that would roll back the whole transaction.
    """
    # RETURNING rather than rowcount: drivers differ in what rowcount says for a skipped row.
    stmt = conflict_insert(session, model, values, conflict, returning=conflict[0])
    return session.execute(stmt, values).first() is not None


def upsert(session: Session, model: type[m.Base], values: dict[str, Any], conflict: list[str]) -> None:
    """INSERT ... ON CONFLICT (conflict) DO UPDATE: the row ends up with ``values`` whoever wrote first."""
    session.execute(conflict_insert(session, model, values, conflict, update=True), values)


_MIGRATION_LOCK = 0x7476_6D62  # "tvmb": the PostgreSQL advisory lock key that serialises migrations


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (alembic upgrade head)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Two processes opening a fresh database at once (a submitted driver and its submitter) would
            # both CREATE TABLE alembic_version; the lock holds the second until the first commits.
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def schema_problem(engine: Engine, shown: str = "...") -> str | None:
    """None when the database's schema is at the newest migration, else what is wrong and what to run
    (``shown``: the database as the command to run names it)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current == head:
        return None
    if current is None:
        return (
            "it is not a tvmbench database (it holds no tvmbench schema: empty, or another program's); give the "
            "path of a results database, or run a sweep or `tvmbench db upgrade` to make this one"
        )
    return f"its schema is at revision {current}, this tvmbench needs {head}: run `tvmbench db upgrade --db {shown}`"


def _open_for_reading(url: str, path: Path | None) -> Engine:
    """A read-only engine on an existing tvmbench database at the newest schema, else StoreError."""
    if path is not None and not path.is_file():
        raise StoreError(f"no results database at {path}: run a sweep first, or give --db (or TVMBENCH_DB)")
    engine = make_engine(url, read_only=True)
    shown = make_url(url).render_as_string(hide_password=True)
    try:
        problem = schema_problem(engine, shown)
    except DatabaseError as exc:
        engine.dispose()
        if path is None or "not a database" not in str(exc):
            raise
        raise StoreError(
            f"{path} is not a tvmbench database (SQLite says: {one_line(exc.orig)}): give the path of a "
            "results database"
        ) from None
    if problem:
        engine.dispose()
        raise StoreError(f"results database {path or shown}: {problem}")
    return engine


class ResultStore:
    """Writes to one results database (and the reads the control plane acts on)."""

    def __init__(
        self, url: str | None = None, *, migrate: bool = True, read_only: bool = False, never_write: bool = False
    ) -> None:
        """Open (and migrate) the database at ``url``.

        ``read_only`` (commands that only read) and ``never_write`` (the dashboard), the same: every
        backend refuses writes at the database level (SQLite opened ``mode=ro``, or ``immutable=1`` on a
        read-only mount; PostgreSQL in read-only transactions), and nothing is created or migrated: a
        missing file, a file that is not a tvmbench database and a schema other than the newest are each
        a StoreError saying what to do.
        """
        self.url = url or default_url()
        check_backend(self.url)
        path = sqlite_path(self.url)
        if path is not None:
            check_sqlite_path(path)
        self._pending: list[Callable[[Session], Any]] | None = None  # queued writes of a batch()
        self._job_ids: dict[tuple[str, str], int] = {}
        self.read_only = read_only or never_write
        if self.read_only:
            self.engine = _open_for_reading(self.url, path)
        else:
            self.engine = make_engine(self.url)
            if migrate:
                self._retry(lambda: upgrade(self.engine))
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads (tvmbench/answers/query.py); nothing written in it is committed."""
        with self._sessions() as session:
            yield session

    # --- plumbing -------------------------------------------------------------------------------

    def _retry(self, fn: Callable[[], T], attempts: int = 6) -> T:
        """Run a write, backing off while the database is busy or briefly unreachable."""
        delay = 0.2
        for i in range(attempts):
            try:
                return fn()
            except OperationalError as exc:
                # A file that cannot be opened stays so: say it now rather than after the back-off.
                if i == attempts - 1 or "unable to open database file" in str(exc):
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    def _write(self, fn: Callable[[Session], T]) -> T | None:
        """One transaction, committed before this returns, retried as a whole when the DB is busy.

        Inside ``batch()`` the write is queued instead (and None returned): the batch commits it.
        """
        if self._pending is not None:
            self._pending.append(fn)
            return None

        def attempt() -> T:
            with self._tx() as session:
                return fn(session)

        return self._retry(attempt)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Writes made in the block are committed together, in one transaction, when it ends.

        The scheduler stores the outcomes of one pass of its loop this way (one commit, not one per
        job). Nothing written in the block counts as stored before the block ends; a write that fails
        makes the whole batch fail, like one transaction. A queued write returns None (record_run's id).
        """
        if self._pending is not None:  # nested: the outer batch commits
            yield
            return
        self._pending = []
        try:
            yield
        finally:
            ops, self._pending = self._pending, None
            if ops:
                self._write(lambda s: [op(s) for op in ops])

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
        """Record a sweep and its jobs as pending; True if the sweep is new, False if it existed.

        This process becomes the sweep's driver: its host, pid and a first heartbeat go on the row.
        """
        driver = {"driver_host": socket.gethostname(), "driver_pid": os.getpid(), "heartbeat_at": _now()}

        def write(s: Session) -> bool:
            # Sorted, so that two sweeps sharing models insert them in the same order (no deadlock).
            for model in sorted({j.model.sha256: j.model for j in jobs}.values(), key=lambda x: x.sha256):
                values = {
                    "sha256": model.sha256,
                    "name": model.name,
                    "source": model.source,
                    "size_bytes": model_sizes.get(model.sha256, 0),
                    "inputs": [[n, list(sh), dt] for n, sh, dt in model.inputs],
                }
                insert_ignore(s, m.Model, values, ["sha256"])
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
                "created_at": _now(),
                **driver,
            }
            new = insert_ignore(s, m.Sweep, sweep, ["id"])
            if not new:
                s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(status="running", **driver))
            # Jobs are inserted even when the sweep existed: a row lost to a crash between the two
            # inserts is recreated, and rows already there are left alone.
            for job in jobs:
                values = {
                    "sweep_id": sweep_id,
                    "job_key": job.key,
                    "model_sha256": job.model.sha256,
                    "model_name": job.model.name,
                    "target_name": job.target.name,
                    "board_key": job.target.board_key,
                    "executor": job.executor,
                    "opt_level": job.opt_level,
                    "pipeline": job.pipeline,
                    "build_key": job.build_key(tvm_version),
                    "status": "pending",
                    "config": {
                        **job.build_config(),
                        "measure": asdict(job.measure),
                        "board_key": job.target.board_key,
                        "target_name": job.target.name,
                        "emulated": job.target.emulated,
                    },
                }
                insert_ignore(s, m.Job, values, ["sweep_id", "job_key"])
            return new

        return self._write(write)

    def heartbeat(self, sweep_id: str) -> None:
        """The driver is alive: refresh its heartbeat (tvmbench/core/liveness.py reads it)."""

        def write(s: Session) -> None:
            s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(heartbeat_at=_now()))

        self._write(write)

    def job_statuses(self, sweep_id: str) -> dict[str, str]:
        with self._sessions() as s:
            rows = s.execute(select(m.Job.job_key, m.Job.status).where(m.Job.sweep_id == sweep_id))
            return {k: st for k, st in rows}

    def finish_sweep(self, sweep_id: str, status: str) -> None:
        def write(s: Session) -> None:
            s.execute(update(m.Sweep).where(m.Sweep.id == sweep_id).values(status=status, finished_at=_now()))

        self._write(write)

    def get_sweep(self, sweep_ref: str) -> m.Sweep | None:
        """The sweep with this id or unique id prefix; None if none, QueryError if several start so."""
        with self._sessions() as s:
            sweep_id = resolve_prefix(s, m.Sweep.id, sweep_ref, "sweep id")
            return None if sweep_id is None else s.get(m.Sweep, sweep_id)

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
                pass_trace=tuple(expand(row.pass_trace)),
                pipeline_passes=pipeline_passes(row.pass_trace),
                kernel_count=row.kernel_count,
                compile_s=row.compile_s,
                artifact_sha256=row.artifact_sha256,
                artifact_size=row.artifact_size,
                artifact_arch=row.artifact_arch,
                tvm_version=row.tvm_version,
                ffi_version=row.ffi_version,
                host=row.host,
                memory=row.memory,
                tuning=row.tuning,
            )

    def built_keys(self, build_keys: set[str]) -> set[str]:
        """Which of ``build_keys`` have an ok build row (one query per 500 keys)."""
        keys, found = sorted(build_keys), set()
        with self._sessions() as s:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                stmt = select(m.Build.build_key).where(m.Build.build_key.in_(chunk), m.Build.status == "ok")
                found.update(s.scalars(stmt))
        return found

    def save_build(self, job: records.Job, build: records.Build) -> None:
        """Insert or replace the build row of ``build.build_key`` (a failed build may succeed later)."""

        def write(s: Session) -> None:
            values = {
                "build_key": build.build_key,
                "model_sha256": job.model.sha256,
                "target": job.target.tvm_target,
                "executor": job.executor,
                "opt_level": job.opt_level,
                "pipeline": job.pipeline,
                "status": build.status,
                "error": build.error,
                "fingerprint": build.fingerprint,
                # Runs of the per-kernel TIR pipeline folded (tvmbench/core/pass_trace.py); pass_count counts them all.
                "pass_trace": compact_split(build.pass_trace, build.pipeline_passes),
                "pass_count": len(build.pass_trace),
                "kernel_count": build.kernel_count,
                "compile_s": build.compile_s,
                "artifact_sha256": build.artifact_sha256,
                "artifact_size": build.artifact_size,
                "artifact_arch": build.artifact_arch,
                "tvm_version": build.tvm_version,
                "ffi_version": build.ffi_version,
                "host": build.host,
                "created_at": _now(),
                "flash_bytes": (build.memory or {}).get("flash_bytes"),
                "ram_bytes": (build.memory or {}).get("ram_bytes"),
                "memory": build.memory,
                **tuning_columns(build.tuning),
                **static_memory_columns(build.memory),
            }
            upsert(s, m.Build, values, ["build_key"])

        self._write(write)

    # --- outcomes -------------------------------------------------------------------------------

    def _job_row(self, s: Session, sweep_id: str, job_key: str) -> m.Job:
        row = s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id, m.Job.job_key == job_key)).one()
        return row

    def _job_id(self, s: Session, sweep_id: str, job_key: str) -> int:
        """The id of a job row (ids never change: remembered after the first look-up)."""
        key = (sweep_id, job_key)
        if key not in self._job_ids:
            self._job_ids[key] = s.scalars(
                select(m.Job.id).where(m.Job.sweep_id == sweep_id, m.Job.job_key == job_key)
            ).one()
        return self._job_ids[key]

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
            job_id = self._job_id(s, sweep_id, run.job_key)
            if run.board_id:
                self._ensure_board(s, run)
            values = {
                "job_id": job_id,
                "attempt": run.attempt,
                "board_id": run.board_id,
                "status": run.status,
                "error": run.error,
                "unit": run.unit,
                "samples": list(run.samples_ms),
                "median": run.median_ms,
                "mean": run.mean_ms,
                "std": run.std_ms,
                "min": run.min_ms,
                "max": run.max_ms,
                "max_abs_err": run.max_abs_err,
                "max_rel_err": run.max_rel_err,
                "emulated": run.emulated,
                "load_avg_1m": run.load_avg_1m,
                "builds_in_flight": run.builds_in_flight,
                "equivalent_to": run.equivalent_to,
                "kernel_profile": run.kernel_profile,
                **{name: getattr(run, name) for name in m.RUN_DETAIL_FIELDS},
                "warnings": list(run.warnings),
                "started_at": _ts(run.started_at),
                "finished_at": _ts(run.finished_at),
            }
            # A second writer of the same attempt (a retried task, another driver) keeps the first row.
            stmt = conflict_insert(s, m.Run, values, ["job_id", "attempt"], returning="id")
            run_id = s.execute(stmt, values).scalar()
            if run_id is not None and run.board_id:
                self._touch_board(s, run)
            if run_id is None:
                run_id = s.scalar(select(m.Run.id).where(m.Run.job_id == job_id, m.Run.attempt == run.attempt))
            # Only a job without a final row takes an outcome (e.g. not one cancelled meanwhile): the attempt
            # is kept either way. The condition is in the UPDATE, so two writers cannot both finish it.
            pending = (m.Job.id == job_id) & m.Job.status.in_(records.PENDING_STATUSES)
            if final:
                s.execute(
                    update(m.Job)
                    .where(pending)
                    .values(
                        status=run.status,
                        error=run.error,
                        final_run_id=run_id,
                        equivalent_to=run.equivalent_to,
                        finished_at=_now(),
                    )
                )
            elif run.status in records.PENDING_STATUSES:
                s.execute(update(m.Job).where(pending).values(status=run.status, error=run.error))
            return run_id

        return self._write(write)

    def _ensure_board(self, s: Session, run: records.Run) -> None:
        """The board row a run points at exists (created on first sight)."""
        assert run.board_id is not None
        values = {
            "id": run.board_id,
            "key": run.board_id.split("@")[0],
            "emulated": run.emulated,
            "state": "ok",
            "consecutive_failures": 0,
            "last_seen": _now(),
        }
        insert_ignore(s, m.Board, values, ["id"])

    def _touch_board(self, s: Session, run: records.Run) -> None:
        """Update what is known of the board after a new run on it."""
        # Lock the row (PostgreSQL): two drivers updating one board's failure count serialise here.
        board = s.scalars(select(m.Board).where(m.Board.id == run.board_id).with_for_update()).one()
        facts = run.board_facts or {}
        board.arch = facts.get("arch", board.arch)
        board.emulated = bool(facts.get("emulated", run.emulated))
        board.facts = facts or board.facts
        board.last_seen = _now()
        # The health rule (tvmbench/core/health.py): the golden model or a correct run clears the count, faults add up.
        board.state, board.consecutive_failures = next_state(
            board.state, board.consecutive_failures or 0, run.status, run.health
        )
        s.flush()

    def board_states(self) -> dict[str, str]:
        """State (ok / suspect / quarantined) of every board the database knows."""
        with self._sessions() as s:
            return {board_id: state for board_id, state in s.execute(select(m.Board.id, m.Board.state))}

    def reset_board(self, board_ref: str) -> list[str]:
        """Put the board with id (or unique id prefix) ``board_ref`` back to ``ok`` (ends a quarantine);
        returns its id in a list, empty when no board matches. QueryError when several boards do."""

        def write(s: Session) -> list[str]:
            board_id = resolve_prefix(s, m.Board.id, board_ref, "board id")
            if board_id is None:
                return []
            board = s.get(m.Board, board_id)
            board.state, board.consecutive_failures = "ok", 0
            return [board_id]

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

    def reopen_cancelled(self, sweep_id: str) -> int:
        """Make the sweep's cancelled jobs pending again (an explicit `sweep resume` after a cancel).

        Their attempts stay; what a cancelled tuning stored (records) is reused by the rerun.
        """

        def write(s: Session) -> int:
            rows = list(s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id, m.Job.status == "cancelled")))
            for row in rows:
                row.status, row.error, row.finished_at, row.final_run_id = "pending", None, None, None
            return len(rows)

        return self._write(write)

    def last_attempts(self, sweep_id: str) -> dict[str, int]:
        """Highest attempt number stored per job key of the sweep (jobs without a run are absent)."""
        with self._sessions() as s:
            rows = s.execute(
                select(m.Job.job_key, func.max(m.Run.attempt))
                .join(m.Run, m.Run.job_id == m.Job.id)
                .where(m.Job.sweep_id == sweep_id)
                .group_by(m.Job.job_key)
            )
            return {key: int(top) for key, top in rows}

    def next_attempt(self, sweep_id: str, job_key: str) -> int:
        with self._sessions() as s:
            job = self._job_row(s, sweep_id, job_key)
            top = s.scalar(select(func.max(m.Run.attempt)).where(m.Run.job_id == job.id))
            return (top or 0) + 1

    # --- MetaSchedule tuning records (workers/tuning/database.py is the MetaSchedule side) --------

    def _scope_clause(self, scope: records.TuningScope) -> Any:
        w = m.TuningWorkload
        return (
            (w.target_key == scope.target_key)
            & (w.board_key == scope.board_key)
            & (w.tvm_version == scope.tvm_version)
            & (w.module_equality == scope.module_equality)
        )

    def tuning_workload(self, scope: records.TuningScope, workload_hash: str) -> m.TuningWorkload | None:
        """The workload row of ``workload_hash`` in ``scope``, or None."""
        with self._sessions() as s:
            stmt = select(m.TuningWorkload).where(
                self._scope_clause(scope), m.TuningWorkload.workload_hash == workload_hash
            )
            return s.scalars(stmt).first()

    def commit_tuning_workload(
        self,
        scope: records.TuningScope,
        workload_hash: str,
        mod_b64: str,
        *,
        model_name: str | None = None,
        task_name: str | None = None,
    ) -> int:
        """The id of the workload in ``scope``, created if missing (several writers may race: one row)."""

        def write(s: Session) -> int:
            values = {
                "workload_hash": workload_hash,
                "module_equality": scope.module_equality,
                "target_key": scope.target_key,
                "target": scope.target,
                "board_key": scope.board_key,
                "tvm_version": scope.tvm_version,
                "mod_b64": mod_b64,
                "task_name": task_name,
                "created_at": _now(),
            }
            conflict = ["workload_hash", "module_equality", "target_key", "board_key", "tvm_version"]
            insert_ignore(s, m.TuningWorkload, values, conflict)
            stmt = select(m.TuningWorkload.id).where(
                self._scope_clause(scope), m.TuningWorkload.workload_hash == workload_hash
            )
            workload_id = s.scalars(stmt).one()
            if model_name:
                link = {"workload_id": workload_id, "model_name": model_name}
                insert_ignore(s, m.TuningWorkloadModel, link, ["workload_id", "model_name"])
            return workload_id

        return self._write(write)

    def link_tuning_model(self, workload_id: int, model_name: str) -> None:
        """Note that ``model_name``'s tuning met workload ``workload_id`` (idempotent)."""

        def write(s: Session) -> None:
            link = {"workload_id": workload_id, "model_name": model_name}
            insert_ignore(s, m.TuningWorkloadModel, link, ["workload_id", "model_name"])

        self._write(write)

    def commit_tuning_record(
        self,
        workload_id: int,
        record_json: list[Any],
        *,
        source: str | None = None,
    ) -> bool:
        """Store one MetaSchedule record ``[trace, run_secs, target, args_info]``; False if already stored."""
        trace, run_secs, target, args_info = record_json
        mean, valid = tuning_record_rank(trace, run_secs)

        def write(s: Session) -> bool:
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
                "created_at": _now(),
            }
            return insert_ignore(s, m.TuningRecord, values, ["workload_id", "record_hash"])

        return self._write(write)

    def tuning_top_k(self, workload_id: int, top_k: int) -> list[m.TuningRecord]:
        """The ``top_k`` fastest valid records of a workload, fastest first (ties: oldest first, as MS)."""
        stmt = (
            select(m.TuningRecord)
            .where(m.TuningRecord.workload_id == workload_id, m.TuningRecord.valid.is_(True))
            .order_by(m.TuningRecord.mean_run_s, m.TuningRecord.id)
            .limit(top_k)
        )
        with self._sessions() as s:
            return list(s.scalars(stmt))

    def tuning_records(
        self,
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
            stmt = stmt.where(self._scope_clause(scope))
        if target_key is not None:
            stmt = stmt.where(w.target_key == target_key)
        if board_key is not None:
            stmt = stmt.where(w.board_key == board_key)
        if tvm_version is not None:
            stmt = stmt.where(w.tvm_version == tvm_version)
        if model_name is not None:
            linked = select(m.TuningWorkloadModel.workload_id).where(m.TuningWorkloadModel.model_name == model_name)
            stmt = stmt.where(w.id.in_(linked))
        with self._sessions() as s:
            return [(wl, rec) for wl, rec in s.execute(stmt)]

    def tuning_record_count(self, scope: records.TuningScope) -> int:
        """How many records (valid or not) ``scope`` holds (MetaSchedule's ``len(database)``)."""
        w, r = m.TuningWorkload, m.TuningRecord
        stmt = select(func.count(r.id)).join(w, r.workload_id == w.id).where(self._scope_clause(scope))
        with self._sessions() as s:
            return int(s.scalar(stmt) or 0)

    def tuning_coverage(self, scope: records.TuningScope, workload_hashes: list[str]) -> dict[str, dict[str, Any]]:
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
            .where(self._scope_clause(scope), w.workload_hash.in_(sorted(set(workload_hashes))))
            .group_by(w.workload_hash)
        )
        with self._sessions() as s:
            for h, trials, valid, best in s.execute(stmt):
                out[h] = {"trials": int(trials), "valid": int(valid), "best_s": best}
        return out

    def tuning_scopes(self) -> list[dict[str, Any]]:
        """One row per scope in the database: target, board key, TVM, equality, workloads and records."""
        w, r = m.TuningWorkload, m.TuningRecord
        keys = (w.target_key, w.board_key, w.tvm_version, w.module_equality)
        stmt = (
            select(*keys, func.count(func.distinct(w.id)), func.count(r.id))
            .outerjoin(r, r.workload_id == w.id)
            .group_by(*keys)
            .order_by(w.board_key, w.target_key)
        )
        with self._sessions() as s:
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


def tuning_columns(tuning: dict[str, Any] | None) -> dict[str, Any]:
    """The builds columns that carry a tuning dict and the scalars the answers filter and sort on."""
    tuning = tuning or None
    return {
        "tuning": tuning,
        "tuning_budget": tuning.get("budget") if tuning else None,
        "tuning_trials": tuning.get("trials_run") if tuning else None,
        "tuning_s": tuning.get("tuning_s") if tuning else None,
    }


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


def static_memory_columns(memory: dict[str, Any] | None) -> dict[str, int | None]:
    """params_bytes and planned_bytes of a build's memory dict, for VM and microcontroller builds alike:
    a microcontroller's weights are its parameters, its arena and workspace its planned storage."""
    memory = memory or {}
    params = memory.get("params_bytes", memory.get("weights_bytes"))
    planned = memory.get("planned_bytes")
    if planned is None and "arena_bytes" in memory:
        planned = memory["arena_bytes"] + memory.get("workspace_bytes", 0)
    return {"params_bytes": params, "planned_bytes": planned}
