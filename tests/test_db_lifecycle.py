"""The results database's life around a sweep: made all at once, deleted under a sweep, a full disk, and an
interrupt before the sweep is recorded. Real SQLite files throughout.

Before: a killed creation of a new database left its tables but no schema revision, and every later command
failed on it (`db upgrade`: "table boards already exists"); a database deleted while a sweep ran was
reported as stored ("4 jobs (4 ok)", exit 0) and lost; a full disk was a traceback; and Ctrl-C before the
sweep was recorded advised a `sweep resume` of a sweep that did not exist.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import onnx
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from db import models as m
from db.engine import DatabaseGone, DiskFull
from db.schema import head_revision
from db.store import ResultStore
from orchestrator import interrupts, scheduler
from orchestrator.plan import plan_jobs
from orchestrator.scheduling.events import SweepOutcome
from orchestrator.spec import SweepSpec
from tests.conftest import one_error_line, write_sweep
from tests.synthetic import Result, add_sweep
from tvmbench.cli import app
from workers import model_zoo

TABLES = {"boards", "models", "sweeps", "builds", "jobs", "runs"}


def tables_of(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def revision_of(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]


# --- 1. a new database is made all at once ------------------------------------------------------


def _killed_midway(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the migration die after its first tables exist, as a kill -9 or Ctrl-C would stop it."""
    from alembic.operations import Operations

    real = Operations.create_table
    made: list[str] = []

    def create_table(self: Any, name: str, *columns: Any, **kw: Any) -> Any:
        if len(made) == 3:
            raise KeyboardInterrupt  # what Ctrl-C raises in the migration
        made.append(name)
        return real(self, name, *columns, **kw)

    monkeypatch.setattr(Operations, "create_table", create_table)


def test_a_creation_stopped_midway_leaves_no_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.db"
    with monkeypatch.context() as patch:
        _killed_midway(patch)
        with pytest.raises(KeyboardInterrupt):
            ResultStore(f"sqlite:///{path}")
    # Before: x.db held boards, models and sweeps but no revision, and every later open failed on it.
    assert not path.exists()
    assert os.listdir(tmp_path) == []  # the temporary file is gone too
    store = ResultStore(f"sqlite:///{path}")
    assert store.revision_before is None
    store.close()
    assert revision_of(path) == [head_revision()] and tables_of(path) >= TABLES


def test_db_upgrade_says_it_created_the_schema(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "new.db"
    result = CliRunner().invoke(app, ["db", "upgrade", "--db", str(path)])
    assert result.exit_code == 0 and "created the tvmbench schema" in result.output, result.output
    assert revision_of(path) == [head_revision()] and sorted(os.listdir(tmp_path)) == ["home", "new.db"]


_CREATE_SLOWLY = """
import sys, time
from alembic.operations import Operations
from db.store import ResultStore
real = Operations.create_table
def create_table(self, name, *columns, **kw):
    out = real(self, name, *columns, **kw)
    sys.stdout.write(name + "\\n"); sys.stdout.flush()
    time.sleep(60)  # killed here, its first table made
Operations.create_table = create_table
ResultStore(sys.argv[1])
"""


def test_a_creation_killed_with_sigkill_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CREATE_SLOWLY, f"sqlite:///{path}"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "boards"  # blocks until the first table exists
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not path.exists()
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith(".tvmbench-creating-")]
    assert leftovers  # the killed process's temporary file: ignored by readers, removed by the next creation
    store = ResultStore(f"sqlite:///{path}")
    store.close()
    assert revision_of(path) == [head_revision()] and os.listdir(tmp_path) == ["x.db"]


def test_two_creators_of_one_path_share_one_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.db"
    real_link = os.link
    first: list[ResultStore] = []

    def link_after_another(src: Any, dst: Any, **kw: Any) -> None:
        if not first:  # another process publishes first, while this one still builds its own
            monkeypatch.setattr(os, "link", real_link)
            first.append(ResultStore(f"sqlite:///{path}"))
            add_sweep(first[0], "theirs00001", [Result()])
            monkeypatch.setattr(os, "link", link_after_another)
        real_link(src, dst, **kw)

    monkeypatch.setattr(os, "link", link_after_another)
    mine = ResultStore(f"sqlite:///{path}")  # its link finds theirs: it opens theirs, never replaces it
    assert mine.get_sweep("theirs00001") is not None and mine.revision_before == head_revision()
    mine.close()
    first[0].close()
    assert os.listdir(tmp_path) == ["x.db"]  # the loser's temporary file is gone


def _half_made(path: Path) -> None:
    """What an older tvmbench left when its creation was killed: tvmbench's tables, empty, no revision."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        for name in sorted(TABLES):
            conn.execute(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY)")
        conn.commit()


@pytest.mark.parametrize("command", [["db", "upgrade"], ["results", "sweeps"]])
def test_a_half_made_schema_says_to_delete_the_file(tmp_path: Path, home: Path, command: list[str]) -> None:
    path = tmp_path / "half.db"
    _half_made(path)
    before = path.read_bytes()
    result = CliRunner().invoke(app, [*command, "--db", str(path)])
    line = one_error_line(result, 2)
    # Before: `db upgrade` said "table boards already exists"; reads advised that `db upgrade`.
    assert str(path) in line and "delete the file (it holds nothing)" in line, line
    assert "already exists" not in line and "db upgrade" not in line, line
    if command[0] == "results":  # a reader leaves the file byte for byte (a writer opens it in WAL mode)
        assert path.read_bytes() == before
    assert revision_of(path) == [] and tables_of(path) == TABLES | {"alembic_version"}


def test_a_database_with_a_row_is_never_called_half_made(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "half.db"
    _half_made(path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("INSERT INTO sweeps (id) VALUES (1)")
        conn.commit()
    line = one_error_line(CliRunner().invoke(app, ["results", "sweeps", "--db", str(path)]), 2)
    assert "holds nothing" not in line, line


# --- 2. the database deleted while a sweep runs ---------------------------------------------------


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    return write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n[measure]\nnumber = 1\nrepeat = 1\n')


def _delete(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _fake_sweep(
    monkeypatch: pytest.MonkeyPatch, *, before_begin: Callable[[], None] = lambda: None, after_begin=None, at_end=None
) -> None:
    """``scheduler.execute_sweep`` without Ray, TVM or a farm: records the sweep and its jobs as ok."""

    def execute_sweep(spec: SweepSpec, store: ResultStore, _home: Path, **_: Any) -> SweepOutcome:
        before_begin()
        jobs = plan_jobs(spec)
        sizes = {sha: p.stat().st_size for sha, p in spec.model_paths.items()}
        store.begin_sweep(
            spec.sweep_id, name=spec.name, label=spec.label, source=spec.source, source_path=spec.source_path,
            jobs=jobs, model_sizes=sizes, tvm_version="0.0.0",
        )  # fmt: skip
        if after_begin is not None:
            after_begin()
        for job in jobs:
            store.finish_job(spec.sweep_id, job.key, "model", "synthetic")
        store.finish_sweep(spec.sweep_id, "complete")
        if at_end is not None:
            at_end()
        outcome = SweepOutcome(sweep_id=spec.sweep_id, new=True, jobs=len(jobs))
        outcome.statuses["ok"] += len(jobs)
        return outcome

    monkeypatch.setattr(scheduler, "execute_sweep", execute_sweep)


def test_a_database_deleted_during_a_sweep_is_said(spec: Path, tmp_path: Path, home: Path, monkeypatch) -> None:
    db = tmp_path / "e.db"
    _fake_sweep(monkeypatch, after_begin=lambda: _delete(db))
    line = one_error_line(CliRunner().invoke(app, ["sweep", "run", str(spec), "--db", str(db)]), 1)
    assert line == (
        f"error: results database {db} was deleted or replaced while the sweep ran: its results are not in it; "
        "run the sweep again"
    )


def test_a_database_deleted_after_the_last_write_is_said(spec: Path, tmp_path: Path, home: Path, monkeypatch) -> None:
    db = tmp_path / "e.db"
    _fake_sweep(monkeypatch, at_end=lambda: _delete(db))
    result = CliRunner().invoke(app, ["sweep", "run", str(spec), "--db", str(db)])
    line = one_error_line(result, 1)  # before: the results table, "1 jobs (1 ok)" and exit 0
    assert "was deleted or replaced while the sweep ran" in line and "run the sweep again" in line, line


def test_a_replaced_database_is_said_on_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    store = ResultStore(f"sqlite:///{path}")
    add_sweep(store, "syn00000001", [Result()])
    store.finish_sweep("syn00000001", "complete")  # the file is the one opened: no complaint
    other = tmp_path / "other.db"
    ResultStore(f"sqlite:///{other}").close()
    os.replace(other, path)  # another program puts a new file at the path
    with pytest.raises(DatabaseGone, match="deleted or replaced while this command ran"):
        store.finish_sweep("syn00000001", "complete")
    store.close()


# --- 3. a full disk -------------------------------------------------------------------------------


def _disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every statement from now on fails as SQLite does when the disk is full (SQLITE_FULL, 13)."""
    from sqlalchemy.engine import default

    def full(self: Any, cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
        error = sqlite3.OperationalError("database or disk is full")
        error.sqlite_errorcode = 13  # type: ignore[attr-defined]
        raise error

    monkeypatch.setattr(default.DefaultDialect, "do_execute", full)


def test_a_full_disk_during_a_sweep_is_one_line_with_resume(
    spec: Path, tmp_path: Path, home: Path, monkeypatch
) -> None:
    db = tmp_path / "f.db"
    full = pytest.MonkeyPatch()
    _fake_sweep(monkeypatch, after_begin=lambda: _disk_full(full))
    try:
        result = CliRunner().invoke(app, ["sweep", "run", str(spec), "--db", str(db)])
    finally:
        full.undo()
    line = one_error_line(result, 1)  # before: a sqlalchemy.exc.OperationalError traceback
    assert line.startswith(f"error: results database {db}: the disk is full (the file system mounted at "), line
    assert str(tmp_path) in line and "free space there, then `tvmbench sweep resume " in line, line
    store = ResultStore(f"sqlite:///{db}")  # what was written before stays, and the line names the sweep
    sweeps = store._read(lambda s: s.scalars(select(m.Sweep.id)).all())
    store.close()
    assert len(sweeps) == 1 and f"`tvmbench sweep resume {sweeps[0]}` runs the jobs not stored yet" in line, line


def test_a_full_disk_while_creating_names_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.db"
    _disk_full(monkeypatch)
    with pytest.raises(DiskFull) as caught:
        ResultStore(f"sqlite:///{path}")
    assert str(caught.value).startswith(f"results database {path}: the disk is full"), caught.value
    assert str(caught.value).endswith("free space there, then run the command again")
    assert os.listdir(tmp_path) == []  # nothing half made


# --- 4. an interrupt before the sweep is recorded -------------------------------------------------


def _interrupt(exc: type[KeyboardInterrupt]) -> Callable[[], None]:
    def stop() -> None:
        raise exc()

    return stop


@pytest.mark.parametrize(
    ("kind", "code", "name"), [(KeyboardInterrupt, 130, "Ctrl-C"), (interrupts.Terminated, 143, "SIGTERM")]
)
def test_an_interrupt_before_the_sweep_is_recorded(
    spec: Path, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, kind: type, code: int, name: str
) -> None:
    _fake_sweep(monkeypatch, before_begin=_interrupt(kind))
    line = one_error_line(CliRunner().invoke(app, ["sweep", "run", str(spec), "--db", str(tmp_path / "i.db")]), code)
    # Before: "finished jobs are stored; `tvmbench sweep resume ID` runs the rest", and that resume said "no sweep".
    assert line == f"error: interrupted ({name}) before the sweep was recorded: nothing is stored; run it again"


def test_an_interrupt_after_the_sweep_is_recorded_advises_resume(
    spec: Path, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_sweep(monkeypatch, after_begin=_interrupt(KeyboardInterrupt))
    line = one_error_line(CliRunner().invoke(app, ["sweep", "run", str(spec), "--db", str(tmp_path / "i.db")]), 130)
    assert line.startswith("error: interrupted (Ctrl-C): finished jobs are stored; `tvmbench sweep resume "), line
