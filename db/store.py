"""ResultStore: the one way into the results database, over any SQLAlchemy URL.

A facade over its rooms: db/engine.py (home, URL, engines), db/schema.py (revisions, schema check,
migrations), db/upserts.py
(INSERT ... ON CONFLICT), db/rows.py (rows <-> records), db/writes.py (every write of a sweep),
db/control_reads.py (the reads the control plane acts on while it writes) and db/tuning_records.py
(MetaSchedule records). Here: opening, the transaction that each write runs in, retries and batches.
Reads that answer people live in tvmbench/answers/.

Writes are idempotent: submitting the same sweep twice, or retrying a write after a failure, leaves one
row per job.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from db import control_reads, tuning_records, writes
from db import models as m
from db.creation import create_sqlite
from db.engine import (  # noqa: F401  (re-exported: callers import these from db.store)
    MIGRATIONS,
    READ_THREADS,
    SUPPORTED_BACKENDS,
    DatabaseGone,
    DatabaseLocked,
    DiskFull,
    StoreError,
    check_backend,
    check_sqlite_path,
    default_home,
    default_url,
    ensure_home,
    make_engine,
    sqlite_path,
)
from db.rows import static_memory_columns, tuning_columns  # noqa: F401  (re-exported)
from db.schema import open_for_reading, schema_problem, upgrade, upgrade_if_behind  # noqa: F401  (re-exported)
from db.tuning_records import tuning_record_rank  # noqa: F401  (re-exported)
from db.upserts import conflict_insert, insert_ignore, upsert  # noqa: F401  (re-exported)
from db.urls import as_url, redact, shown_url
from tvmbench.core import records
from tvmbench.core.errors import one_line

T = TypeVar("T")
#: What a read-only open with ``missing="empty"`` reads where no SQLite file exists yet: an empty
#: database in memory (nothing is created on disk).
EMPTY_DB = "sqlite://"
Missing = Literal["error", "empty"]


class ResultStore:
    """Writes to one results database (and the reads the control plane acts on)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        migrate: bool = True,
        read_only: bool = False,
        never_write: bool = False,
        missing: Missing = "error",
    ) -> None:
        """Open (and migrate) the database at ``url``.

        ``read_only`` (commands that only read) and ``never_write`` (the dashboard), the same: every
        backend refuses writes at the database level (SQLite opened ``mode=ro``, or ``immutable=1`` on a
        read-only mount; PostgreSQL in read-only transactions), and nothing is created or migrated: a
        missing file, a file that is not a tvmbench database and a schema other than the newest are each
        a StoreError saying what to do. ``missing="empty"``: with ``read_only``, a SQLite file that does
        not exist yet (a fresh machine) reads as an empty database instead (a directory or a missing
        folder is still a StoreError).
        """
        if missing not in ("error", "empty"):
            raise ValueError(f"missing={missing!r}: expected 'error' or 'empty'")
        given = url or default_url()
        self.url = as_url(given) if isinstance(given, str) else given  # a path names a SQLite file
        check_backend(self.url)
        path = sqlite_path(self.url)
        if path is not None:
            check_sqlite_path(path)
        self._pending: list[Callable[[Session], Any]] | None = None  # queued writes of a batch()
        self._job_ids: dict[tuple[str, str], int] = {}
        self.read_only = read_only or never_write
        self.revision_before: str | None = None  # the schema revision found on opening, before migrating
        self._path = path.absolute() if path is not None else None  # the file opened, wherever cwd goes
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the SQLite file a writer opened
        self._sweep_id: str | None = None  # the sweep this store recorded (begin_sweep): what errors advise
        try:
            if read_only and not never_write and missing == "empty" and path is not None and not path.exists():
                # Nothing stored yet: an empty database with the tables as the models describe them (no alembic).
                self.url, self.read_only = EMPTY_DB, False
                self.engine = make_engine(EMPTY_DB)
                m.Base.metadata.create_all(self.engine)
            elif self.read_only:
                self.engine = open_for_reading(self.url, path)
            else:
                self.engine = make_engine(self.url)
                if migrate:
                    self.revision_before = self._retry(self._create_or_upgrade)
                if path is not None and path.exists():
                    self._identity = _identity(path)
        except SQLAlchemyError as exc:
            # The driver's own words (refused, unknown role, wrong password), as the one error every caller
            # of the store handles (the CLI, the Python API, the dashboard); never with the password.
            said = f"results database {shown_url(self.url)}: {one_line(exc)}{_what_to_do(exc, self.url)}"
            raise StoreError(redact(said, self.url)) from None
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def _create_or_upgrade(self) -> str | None:
        """A new SQLite file is created all at once (db/creation.py create_sqlite); any other database is
        migrated in place. The revision it was at before (None: this made its schema)."""
        path = sqlite_path(self.url)
        if path is not None and create_sqlite(path):
            return None
        return upgrade_if_behind(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def check_same_file(self) -> None:
        """DatabaseGone when the SQLite file this store writes is no longer the one at its path.

        Deleting the file (and its -wal and -shm) while a sweep runs does not stop SQLite: the open
        connection goes on writing to a file no path names, and everything is lost when it closes.
        """
        if self._identity is None or self._path is None:
            return
        try:
            now: tuple[int, int] | None = _identity(self._path)
        except OSError:
            now = None
        if now != self._identity:
            raise self._gone()

    def _gone(self) -> DatabaseGone:
        if self._sweep_id is not None:
            return DatabaseGone(
                f"results database {self._path} was deleted or replaced while the sweep ran: its results are "
                "not in it; run the sweep again"
            )
        return DatabaseGone(
            f"results database {self._path} was deleted or replaced while this command ran: what it wrote is "
            "not in it; run the command again"
        )

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
            except (OperationalError, DatabaseLocked) as exc:  # a sweep outwaits another program's transaction
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

        try:
            done = self._retry(attempt)
        except DiskFull as exc:
            if self._sweep_id is None:
                raise
            then = f"`tvmbench sweep resume {self._sweep_id}` runs the jobs not stored yet"
            raise type(exc)(exc.problem, then) from None  # a size limit stays a size limit
        except DatabaseGone:
            raise self._gone() from None
        # Committed, but to the file that was opened: a result counts as stored only if that is still the one.
        self.check_same_file()
        return done

    def _read(self, fn: Callable[[Session], T]) -> T:
        """``fn`` on a session of its own (no transaction kept, nothing committed)."""
        with self._sessions() as session:
            return fn(session)

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
        releases: dict[str, str] | None = None,
    ) -> bool:
        """Record a sweep and its jobs as pending; True if the sweep is new, False if it existed.

        ``releases``: toolchain text -> TVM version for the jobs of a tvm axis (their build keys).

        This process becomes the sweep's driver: its host, pid and a first heartbeat go on the row.
        """
        given = {"name": name, "label": label, "source": source, "source_path": source_path, "jobs": jobs}
        new = self._write(
            lambda s: writes.begin_sweep(
                s,
                sweep_id,
                **given,
                model_sizes=model_sizes,
                tvm_version=tvm_version,
                releases=releases,
                job_ids=self._job_ids,
            )
        )
        self._sweep_id = sweep_id  # recorded: from now on a failed write can say `sweep resume`
        return new

    def refuse_a_second_driver(self, sweep_id: str) -> None:
        """SweepBusy if another live process drives the sweep (begin_sweep checks again, in its transaction)."""
        row = self._read(lambda s: s.get(m.Sweep, sweep_id))
        if row is not None:
            writes.refuse_a_second_driver(row)

    def heartbeat(self, sweep_id: str) -> None:
        """The driver is alive: refresh its heartbeat (tvmbench/core/liveness.py reads it)."""
        self._write(lambda s: writes.heartbeat(s, sweep_id))

    def job_statuses(self, sweep_id: str) -> dict[str, str]:
        """Status of every job of the sweep, by job key."""
        return self._read(lambda s: control_reads.job_statuses(s, sweep_id))

    def finish_sweep(self, sweep_id: str, status: str) -> None:
        """The sweep's final status and time."""
        self._write(lambda s: writes.finish_sweep(s, sweep_id, status))

    def get_sweep(self, sweep_ref: str) -> m.Sweep | None:
        """The sweep with this id or unique id prefix; None if none, QueryError if several start so."""
        return self._read(lambda s: control_reads.get_sweep(s, sweep_ref))

    def sweep_ids_named(self, name: str) -> list[str]:
        """Ids of the sweeps named or labelled ``name``, newest first (a few)."""
        return self._read(lambda s: control_reads.sweep_ids_named(s, name))

    # --- builds ---------------------------------------------------------------------------------

    def get_build(self, build_key: str) -> records.Build | None:
        """The stored build of ``build_key`` as a record, or None."""
        return self._read(lambda s: control_reads.get_build(s, build_key))

    def get_builds(self, build_keys: list[str]) -> dict[str, records.Build]:
        """The stored builds of ``build_keys`` as records, by key (one query per 500 keys)."""
        return self._read(lambda s: control_reads.get_builds(s, build_keys))

    def built_keys(self, build_keys: set[str]) -> set[str]:
        """Which of ``build_keys`` have an ok build row (one query per 500 keys)."""
        return self._read(lambda s: control_reads.built_keys(s, build_keys))

    def save_build(self, job: records.Job, build: records.Build) -> None:
        """Insert or replace the build row of ``build.build_key`` (a failed build may succeed later)."""
        self._write(lambda s: writes.save_build(s, job, build))

    # --- outcomes -------------------------------------------------------------------------------

    def finish_job(self, sweep_id: str, job_key: str, status: str, error: str | None = None) -> None:
        """Final state of a job that never reached a board (build error, cancelled), or a pending one's reason."""
        self._write(lambda s: writes.finish_job(s, sweep_id, job_key, status, error))

    def record_run(self, sweep_id: str, run: records.Run, *, final: bool) -> int:
        """Store one attempt; when ``final``, it also becomes the job's outcome. Returns the run id.

        Idempotent per (job, attempt): writing the same attempt twice keeps the first.
        """
        return self._write(lambda s: writes.record_run(s, sweep_id, run, final=final, job_ids=self._job_ids))

    def board_states(self) -> dict[str, str]:
        """State (ok / suspect / quarantined) of every board the database knows."""
        return self._read(control_reads.board_states)

    def reset_board(self, board_ref: str) -> list[str]:
        """Put the board with id (or unique id prefix) ``board_ref`` back to ``ok`` (ends a quarantine);
        returns its id in a list, empty when no board matches. QueryError when several boards do."""
        return self._write(lambda s: writes.reset_board(s, board_ref))

    # --- cancel ---------------------------------------------------------------------------------

    def request_cancel(self, sweep_id: str) -> str | None:
        """Flag a sweep for cancelling; returns its status before (None if unknown).

        A running driver polls the flag (``sweep status == "cancelling"``) between events.
        """
        return self._write(lambda s: writes.request_cancel(s, sweep_id))

    def sweep_status(self, sweep_id: str) -> str | None:
        """The sweep's stored status (None if unknown)."""
        return self._read(lambda s: control_reads.sweep_status(s, sweep_id))

    def cancel_pending_jobs(self, sweep_id: str, reason: str) -> int:
        """Mark every job of the sweep without a final row ``cancelled`` and the sweep cancelled."""
        return self._write(lambda s: writes.cancel_pending_jobs(s, sweep_id, reason))

    def reopen_cancelled(self, sweep_id: str) -> int:
        """Make the sweep's cancelled jobs pending again (an explicit `sweep resume` after a cancel).

        Their attempts stay; what a cancelled tuning stored (records) is reused by the rerun.
        """
        return self._write(lambda s: writes.reopen_cancelled(s, sweep_id))

    def last_attempts(self, sweep_id: str) -> dict[str, int]:
        """Highest attempt number stored per job key of the sweep (jobs without a run are absent)."""
        return self._read(lambda s: control_reads.last_attempts(s, sweep_id))

    def next_attempt(self, sweep_id: str, job_key: str) -> int:
        """The number the job's next attempt gets (1 for a job without a run)."""
        return self._read(lambda s: control_reads.next_attempt(s, sweep_id, job_key))

    # --- MetaSchedule tuning records (workers/tuning/database.py is the MetaSchedule side) --------

    def tuning_workload(self, scope: records.TuningScope, workload_hash: str) -> m.TuningWorkload | None:
        """The workload row of ``workload_hash`` in ``scope``, or None."""
        return self._read(lambda s: tuning_records.workload(s, scope, workload_hash))

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
        return self._write(
            lambda s: tuning_records.commit_workload(
                s, scope, workload_hash, mod_b64, model_name=model_name, task_name=task_name
            )
        )

    def link_tuning_model(self, workload_id: int, model_name: str) -> None:
        """Note that ``model_name``'s tuning met workload ``workload_id`` (idempotent)."""
        self._write(lambda s: tuning_records.link_model(s, workload_id, model_name))

    def commit_tuning_record(self, workload_id: int, record_json: list[Any], *, source: str | None = None) -> bool:
        """Store one MetaSchedule record ``[trace, run_secs, target, args_info]``; False if already stored."""
        return self._write(lambda s: tuning_records.commit_record(s, workload_id, record_json, source=source))

    def tuning_top_k(self, workload_id: int, top_k: int) -> list[m.TuningRecord]:
        """The ``top_k`` fastest valid records of a workload, fastest first (ties: oldest first, as MS)."""
        return self._read(lambda s: tuning_records.top_k(s, workload_id, top_k))

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
        where = {"target_key": target_key, "board_key": board_key, "tvm_version": tvm_version}
        return self._read(lambda s: tuning_records.records_with_workloads(s, scope, **where, model_name=model_name))

    def tuning_sample(
        self, scope: records.TuningScope, *, best: int, per_workload: int, total: int
    ) -> list[tuple[m.TuningWorkload, list[m.TuningRecord]]]:
        """Per workload of ``scope``: its best valid records and a spread of the rest (a warm start's set)."""
        return self._read(lambda s: tuning_records.sample(s, scope, best=best, per_workload=per_workload, total=total))

    def tuning_record_count(self, scope: records.TuningScope) -> int:
        """How many records (valid or not) ``scope`` holds (MetaSchedule's ``len(database)``)."""
        return self._read(lambda s: tuning_records.record_count(s, scope))

    def tuning_coverage(self, scope: records.TuningScope, workload_hashes: list[str]) -> dict[str, dict[str, Any]]:
        """Per workload hash: trials already stored (``trials``), how many ran (``valid``), best seconds.

        What `sweep plan` shows as "trials already covered" and what a tuning stage subtracts from its
        budget. Hashes the scope has never seen map to zero trials.
        """
        return self._read(lambda s: tuning_records.coverage(s, scope, workload_hashes))

    def tuning_scopes(self) -> list[dict[str, Any]]:
        """One row per scope in the database: target, board key, TVM, equality, workloads and records."""
        return self._read(tuning_records.scopes)


def _what_to_do(exc: Exception, url: str) -> str:
    """The fix, after the driver's words, where they leave it out: a PostgreSQL database not created yet."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and f'database "{parsed.database}" does not exist' in str(exc):
        # tvmbench creates the schema, not the database: that needs the server's CREATEDB right.
        who = f" -U {parsed.username}" if parsed.username else ""
        return f": create it (createdb -h {parsed.host or 'localhost'} -p {parsed.port or 5432}{who} {parsed.database})"
    return ""


def _identity(path: os.PathLike[str] | str) -> tuple[int, int]:
    """The file at ``path`` as the file system knows it (device, inode): another file there differs."""
    st = os.stat(path)
    return st.st_dev, st.st_ino
