"""A damaged results database is one line naming it and what to do, in the CLI and in the dashboard.

Before, a SQLite page overwritten with 0xff inside ``jobs`` (or text that is not UTF-8 in a column such
as ``pass_trace``) gave a traceback from every read command (sqlite3.DatabaseError: database disk image
is malformed) and a bare plain-text 500, with a traceback in the log, for every dashboard page.
"""

from __future__ import annotations

import io
import logging
import shutil
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.engine import DamagedDatabase, DatabaseLocked
from db.store import ResultStore
from tests.conftest import one_error_line
from tests.synthetic import Result, add_sweep, noisy
from tvmbench.answers import query
from tvmbench.cli import app
from tvmbench.dashboard.server import ServeError, listen, make_server, open_readonly

SWEEP = "syn00000001"
READS = [("results", "sweeps"), ("results", "list"), ("results", "best"), ("report", SWEEP)]
ADVICE = "restore it from a backup, or run a new sweep into another --db"


@pytest.fixture(autouse=True)
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Run in the test's folder (`report` writes report.html where it runs)."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def whole(tmp_path: Path) -> Path:
    """A tvmbench database with one sweep of two jobs, each with its own build, all in the main file."""
    path = tmp_path / "whole.db"
    store = ResultStore(f"sqlite:///{path}")
    add_sweep(
        store,
        SWEEP,
        [
            Result(samples=noisy(1.0), pass_trace=["FuseOps", "LegalizeOps"]),
            Result(executor="vm-bytecode", samples=noisy(2.0), pass_trace=["FuseOps"]),
        ],
    )
    store.close()
    with closing(sqlite3.connect(path)) as conn:  # everything into the file itself: a copy of it is the database
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def copy(whole: Path, name: str) -> Path:
    path = whole.with_name(name)
    shutil.copyfile(whole, path)
    return path


def overwrite_table_root(path: Path, table: str) -> None:
    """64 bytes of 0xff at the start of ``table``'s root page (what the hostile user did)."""
    with sqlite3.connect(path) as conn:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with path.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * 64)


def invalid_utf8_pass_trace(path: Path, *, last_build_only: bool) -> None:
    """Bytes that are not UTF-8 as the ``pass_trace`` text of the builds (or of the last one only)."""
    where = " WHERE rowid = (SELECT max(rowid) FROM builds)" if last_build_only else ""
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE builds SET pass_trace = CAST(X'5b22ff22fe5d' AS TEXT){where}")
    conn.close()


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_a_damaged_page_is_one_line_from_every_read(whole: Path, args: tuple[str, ...]) -> None:
    bad = copy(whole, "page.db")
    overwrite_table_root(bad, "jobs")
    line = one_error_line(CliRunner().invoke(app, [*args, "--db", str(bad)]), exit_code=2)
    assert f"results database {bad} is damaged (database disk image is malformed): {ADVICE}" in line


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_text_that_is_not_utf8_is_one_line_from_every_read(whole: Path, args: tuple[str, ...]) -> None:
    bad = copy(whole, "utf8.db")
    invalid_utf8_pass_trace(bad, last_build_only=False)
    line = one_error_line(CliRunner().invoke(app, [*args, "--db", str(bad)]), exit_code=2)
    assert f"results database {bad} is damaged (column pass_trace holds text that is not UTF-8): {ADVICE}" in line


def test_damage_met_by_a_later_read_is_a_store_error(whole: Path) -> None:
    """Damage past the first rows passes the open; the read that meets it raises DamagedDatabase."""
    bad = copy(whole, "later.db")
    invalid_utf8_pass_trace(bad, last_build_only=True)
    store = ResultStore(f"sqlite:///{bad}", read_only=True)
    try:
        assert [r["sweep_id"] for r in query.sweeps_overview(store)] == [SWEEP]  # reads no pass trace
        with pytest.raises(DamagedDatabase, match=f"results database {bad} is damaged .*pass_trace.*{ADVICE}"):
            query.results(store, SWEEP)
    finally:
        store.close()


@pytest.mark.parametrize("args", [("results", "list"), ("report", SWEEP)], ids=" ".join)
def test_damage_met_by_a_later_read_is_one_line_from_the_cli(whole: Path, args: tuple[str, ...]) -> None:
    bad = copy(whole, "later-cli.db")
    invalid_utf8_pass_trace(bad, last_build_only=True)
    line = one_error_line(CliRunner().invoke(app, [*args, "--db", str(bad)]), exit_code=2)
    assert f"results database {bad} is damaged" in line and ADVICE in line, line


def test_a_writer_meeting_damage_is_not_retried(whole: Path) -> None:
    """A writer's damaged read is DamagedDatabase at once, not an OperationalError retried with back-off."""
    bad = copy(whole, "writer.db")
    invalid_utf8_pass_trace(bad, last_build_only=False)
    store = ResultStore(f"sqlite:///{bad}")
    try:
        keys = store.built_keys(set())  # nothing asked: nothing read
        assert keys == set()
        with store.read() as session, pytest.raises(DamagedDatabase, match="pass_trace"):
            session.connection().exec_driver_sql("SELECT pass_trace FROM builds").all()
    finally:
        store.close()


def test_the_dashboard_refuses_to_start_on_a_damaged_page(whole: Path) -> None:
    bad = copy(whole, "serve.db")
    overwrite_table_root(bad, "jobs")
    with pytest.raises(ServeError, match=f"results database {bad} is damaged"):
        open_readonly(f"sqlite:///{bad}")


@contextmanager
def dashboard(store: ResultStore, log: io.StringIO) -> Iterator[str]:
    """The dashboard over ``store`` on a free loopback port, uvicorn's error log written into ``log``."""
    sock = listen("127.0.0.1", 0)
    server = make_server(store, sock)  # configures uvicorn's logging: the test's handler goes on after it
    handler = logging.StreamHandler(log)
    logging.getLogger("uvicorn.error").addHandler(handler)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    try:
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        logging.getLogger("uvicorn.error").removeHandler(handler)


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.headers.get("content-type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type", ""), e.read().decode()


def test_the_dashboard_answers_its_error_page_and_logs_one_line(whole: Path) -> None:
    reader = ResultStore(f"sqlite:///{whole}", read_only=True)
    keys = [row["job_key"] for row in query.results(reader, SWEEP)]
    reader.close()
    bad = copy(whole, "pages.db")
    invalid_utf8_pass_trace(bad, last_build_only=True)
    store = open_readonly(f"sqlite:///{bad}")
    log = io.StringIO()
    try:
        with dashboard(store, log) as base:
            assert get(f"{base}/sweeps")[0] == 200  # the pages that meet no damage still answer
            answers = [get(f"{base}/job/{key}") for key in keys for _ in range(3)]
            failed = [a for a in answers if a[0] != 200]
            assert len(failed) == 3, [a[0] for a in answers]  # the job of the damaged build, each time
            for status, kind, body in failed:
                assert status == 503 and kind.startswith("text/html"), (status, kind)
                assert "Results database unavailable" in body and f"{bad} is damaged" in body and ADVICE in body
            status, kind, body = get(f"{base}/api/job/{keys[-1]}")
            assert status == 503 and kind == "application/json" and "is damaged" in body
    finally:
        store.close()
    written = log.getvalue()
    assert "Traceback" not in written, written
    assert [line for line in written.splitlines() if line.strip()] == [
        f"results database {bad} is damaged (column pass_trace holds text that is not UTF-8): {ADVICE}"
    ]


@contextmanager
def held_exclusively(path: Path) -> Iterator[None]:
    """Another program's open transaction on ``path`` in rollback-journal mode, where it blocks readers too."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.mark.parametrize("args", [("results", "list"), ("results", "sweeps")], ids=" ".join)
def test_a_lock_held_past_the_busy_timeout_is_one_line(
    whole: Path, args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "cannot open results database: ... OperationalError: (sqlite3.OperationalError) database is
    locked", exit 2 as for bad input. Now it names the database and what to do, exit 1: nothing was wrong."""
    monkeypatch.setattr("db.engine.BUSY_TIMEOUT_S", 0.2)
    with held_exclusively(whole):
        line = one_error_line(CliRunner().invoke(app, [*args, "--db", str(whole)]), exit_code=1)
    assert f"results database {whole} stayed locked by another program" in line, line
    assert "end that program's open transaction" in line and "OperationalError" not in line, line
    with closing(sqlite3.connect(whole)) as conn:  # the lock gone, everything is still there
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2


def test_a_writer_outwaits_a_lock_then_names_it(whole: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer retries while another program holds the lock (as for a busy database), then says DatabaseLocked."""
    monkeypatch.setattr("db.engine.BUSY_TIMEOUT_S", 0.05)
    monkeypatch.setattr("db.store.time.sleep", lambda _s: None)  # the back-off's waits, not the lock's
    store = ResultStore(f"sqlite:///{whole}")
    store.engine.dispose()  # its pooled connection would keep the file in WAL mode
    attempts = []

    def count(session: object) -> None:
        attempts.append(1)
        session.connection().exec_driver_sql("DELETE FROM jobs WHERE 0")  # type: ignore[attr-defined]

    try:
        with held_exclusively(whole), pytest.raises(DatabaseLocked, match=f"results database {whole} stayed locked"):
            store._write(count)
        assert len(attempts) == 6, attempts
    finally:
        store.close()
