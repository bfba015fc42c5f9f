"""A sweep whose driver is gone reads as `interrupted` (tvmbench/core/liveness.py): the rule, and every reader of it.

The rule is checked with real pids (this process, and a child that has exited) and with heartbeats of
given ages; the readers (`results sweeps`, `sweep status`, `sweep cancel`, the dashboard's data) on real
databases whose sweep was begun by a real process that then exited. The end-to-end kill -9 of a real
`tvmbench sweep run` is in tests/test_faults_sweep.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import MetaData, update
from typer.testing import CliRunner

from db import models as m
from db.store import ResultStore, make_engine
from orchestrator.submit import cancel_local
from tests.test_dashboard import get, get_json, running
from tests.test_migration_0005 import _migrate
from tests.test_store_backends import begin
from tvmbench.answers import query as reads
from tvmbench.cli import app
from tvmbench.core import liveness
from tvmbench.dashboard.server import open_readonly

HERE = socket.gethostname()
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_rule_same_host_judges_by_the_pid() -> None:
    fresh = NOW - timedelta(seconds=1)
    assert liveness.driver_gone(HERE, os.getpid(), fresh, now=NOW) is False
    assert liveness.driver_gone(HERE, _dead_pid(), fresh, now=NOW) is True  # killed: the beat is still fresh
    # Alive however old the heartbeat: a busy driver on this host is not called dead.
    assert liveness.driver_gone(HERE, os.getpid(), NOW - timedelta(hours=5), now=NOW) is False


def test_rule_other_host_judges_by_the_heartbeat() -> None:
    def never(_pid: int) -> bool:
        raise AssertionError("a pid of another host must not be looked up here")

    stale = NOW - timedelta(seconds=liveness.STALE_AFTER_S + 1)
    recent = NOW - timedelta(seconds=liveness.STALE_AFTER_S - 1)
    assert liveness.driver_gone("node-7", 12345, stale, now=NOW, alive=never) is True
    assert liveness.driver_gone("node-7", 12345, recent, now=NOW, alive=never) is False
    # SQLite hands back naive datetimes (stored as UTC).
    assert liveness.driver_gone("node-7", 1, stale.replace(tzinfo=None), now=NOW, alive=never) is True


def test_rule_without_driver_facts_cannot_judge() -> None:
    assert liveness.driver_gone(None, None, None, now=NOW) is None
    assert liveness.driver_gone("", 5, NOW, now=NOW) is None
    assert liveness.shown_status("running", None, None, None) == "running"


def test_rule_only_turns_active_statuses() -> None:
    dead = _dead_pid()
    assert liveness.shown_status("running", HERE, dead, NOW) == "interrupted"
    assert liveness.shown_status("cancelling", HERE, dead, NOW) == "interrupted"
    for final in ("complete", "incomplete", "cancelled"):
        assert liveness.shown_status(final, HERE, dead, NOW) == final


def _begun_by_a_process_that_exited(url: str, sweep_id: str) -> int:
    """Begin a sweep in a child process (its driver), which then exits as a killed driver would; its pid."""
    code = (
        "from db.store import ResultStore; from tests.test_store_backends import begin; "
        f"begin(ResultStore({url!r}), {sweep_id!r})"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], cwd=Path(__file__).parent.parent, stderr=subprocess.PIPE, text=True
    )
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-2000:]
    return child.pid


def test_readers_show_a_dead_driver_as_interrupted(db_url: str) -> None:
    store = ResultStore(db_url)
    try:
        begin(store, "alive0000001")  # this process is its driver: alive
        pid = _begun_by_a_process_that_exited(db_url, "dead00000001")
        sweep = store.get_sweep("dead00000001")
        assert sweep.status == "running" and sweep.driver_host == HERE and sweep.driver_pid == pid
        assert sweep.heartbeat_at is not None

        rows = {r["sweep_id"]: r for r in reads.sweeps_overview(store)}
        assert rows["alive0000001"]["status"] == "running" and rows["alive0000001"]["resume"] is None
        assert rows["dead00000001"]["status"] == "interrupted", rows["dead00000001"]
        assert rows["dead00000001"]["resume"] == "tvmbench sweep resume dead00000001"
        assert rows["dead00000001"]["driver"]["pid"] == pid
        # What the dashboard polls: an interrupted sweep still shows up among the active ones.
        watched = {r["sweep_id"]: r["status"] for r in reads.sweeps_overview(store, active_or=[])}
        assert watched == {"alive0000001": "running", "dead00000001": "interrupted"}

        cli = CliRunner()
        listed = cli.invoke(app, ["results", "sweeps", "--db", db_url, "--json"])
        assert listed.exit_code == 0, listed.output
        assert {r["sweep_id"]: r["status"] for r in json.loads(listed.output)}["dead00000001"] == "interrupted"
        table = cli.invoke(app, ["results", "sweeps", "--db", db_url])
        assert "`tvmbench sweep resume dead00000001` finishes it" in table.output, table.output
        assert "alive0000001` finishes" not in table.output
        status = cli.invoke(app, ["sweep", "status", "dead00000001", "--db", db_url, "--json"])
        assert status.exit_code == 0, status.output
        shown = json.loads(status.output)
        assert shown["state"] == "interrupted" and shown["resume"] == "tvmbench sweep resume dead00000001", shown

        # A driver on another host (a Ray cluster node) is judged by its heartbeat.
        with store._tx() as s:
            s.execute(
                update(m.Sweep)
                .where(m.Sweep.id == "alive0000001")
                .values(driver_host="node-7", heartbeat_at=datetime.now(UTC) - timedelta(minutes=10))
            )
        assert {r["sweep_id"]: r["status"] for r in reads.sweeps_overview(store)}["alive0000001"] == "interrupted"
        store.heartbeat("alive0000001")  # what the driver's loop does every few seconds
        assert {r["sweep_id"]: r["status"] for r in reads.sweeps_overview(store)}["alive0000001"] == "running"
    finally:
        store.close()


def test_dashboard_shows_an_interrupted_sweep_and_how_to_resume_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    pid = _begun_by_a_process_that_exited(url, "dead00000001")
    reader = open_readonly(url)
    try:
        with running(reader) as base:
            (row,) = get_json(f"{base}/api/sweeps")
            assert (row["status"], row["resume"]) == ("interrupted", "tvmbench sweep resume dead00000001"), row
            status, _, page = get(f"{base}/sweep/dead00000001")
            assert status == 200
            assert "status-interrupted" in page and f"pid {pid}" in page, page[:3000]
            assert "<code>tvmbench sweep resume dead00000001</code> finishes it" in page
    finally:
        reader.close()


def test_cancel_of_a_dead_drivers_sweep_does_not_wait_for_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    _begun_by_a_process_that_exited(url, "dead00000001")
    store = ResultStore(url)
    try:
        started = time.monotonic()
        result = cancel_local(store, "dead00000001", wait_s=300.0)
        # Without the rule it polls the cancel flag for the whole wait_s: no driver will ever answer it.
        assert time.monotonic() - started < 100, "cancel waited for a driver that is gone"
        assert result["cancelled"] == 4 and store.get_sweep("dead00000001").status == "cancelled"
    finally:
        store.close()


def test_old_database_without_driver_facts_opens_and_reads(tmp_path: Path) -> None:
    """A database at 0006 (no driver columns) with a running sweep: a read asks for `db upgrade` and leaves the
    file as it was (reads never migrate); upgraded, it keeps showing running (no driver facts to judge by)."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    _migrate(engine, "0006")
    meta = MetaData()
    meta.reflect(engine)
    assert "heartbeat_at" not in meta.tables["sweeps"].c  # really the old schema
    with engine.begin() as conn:
        conn.execute(
            meta.tables["sweeps"]
            .insert()
            .values(
                id="old000000001",
                name="old",
                label="",
                source_path="x.toml",
                source="",
                status="running",
                job_count=0,
                host="h",
                tvm_version="0.27",
                created_at=datetime.now(UTC),
            )
        )
    engine.dispose()
    before = (tmp_path / "old.db").read_bytes()
    refused = CliRunner().invoke(app, ["results", "sweeps", "--db", url, "--json"])
    assert refused.exit_code == 2 and "revision 0006" in refused.output and "db upgrade" in refused.output
    assert (tmp_path / "old.db").read_bytes() == before
    upgraded = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert upgraded.exit_code == 0, upgraded.output
    listed = CliRunner().invoke(app, ["results", "sweeps", "--db", url, "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert row["status"] == "running" and row["driver"] is None and row["resume"] is None, row


class _LiveDriver:
    """A child process that begins ``sweep_id`` (its driver) and stays alive until ``stop()``."""

    def __init__(self, url: str, sweep_id: str) -> None:
        code = (
            "import sys; from db.store import ResultStore; from tests.test_store_backends import begin; "
            f"begin(ResultStore({url!r}), {sweep_id!r}); print('begun', flush=True); sys.stdin.read()"
        )
        self.child = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=Path(__file__).parent.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.child.stdout.readline()  # EOF (not a hang) if the child fails
        assert line.strip() == "begun", self.child.stderr.read()[-2000:]

    def stop(self) -> None:
        self.child.stdin.close()
        self.child.wait(timeout=60)


def test_a_second_driver_is_refused_while_the_first_lives_and_takes_over_once_it_is_gone(db_url: str) -> None:
    from db.writes import SweepBusy

    store = ResultStore(db_url)
    driver = _LiveDriver(db_url, "busy00000001")
    try:
        try:
            begin(store, "busy00000001")
            raise AssertionError("a second driver began a sweep whose driver is alive")
        except SweepBusy as exc:
            message = str(exc)
        assert f"process {driver.child.pid} on {HERE}" in message, message
        assert "tvmbench sweep cancel busy00000001" in message, message
        assert store.get_sweep("busy00000001").driver_pid == driver.child.pid  # the first driver's row is kept
    finally:
        driver.stop()
    assert begin(store, "busy00000001") is False  # its driver is gone: taken over, as a resume after a crash
    assert store.get_sweep("busy00000001").driver_pid == os.getpid()

    # A driver on another host (a Ray cluster node) is judged by its heartbeat.
    def driven_from(host: str, beat_age: timedelta, status: str = "running") -> None:
        with store._tx() as s:
            s.execute(
                update(m.Sweep)
                .where(m.Sweep.id == "busy00000001")
                .values(driver_host=host, driver_pid=1, heartbeat_at=datetime.now(UTC) - beat_age, status=status)
            )

    driven_from("node-7", timedelta(seconds=1))
    try:
        begin(store, "busy00000001")
        raise AssertionError("a second driver began a sweep driven from another host a second ago")
    except SweepBusy as exc:
        assert "process 1 on node-7" in str(exc)
    driven_from("node-7", timedelta(seconds=liveness.STALE_AFTER_S + 30))
    assert begin(store, "busy00000001") is False
    # A sweep that ended has no driver at work, whoever ran it last.
    driven_from("node-7", timedelta(seconds=1), status="complete")
    assert begin(store, "busy00000001") is False
    store.close()


def test_sweep_run_of_a_sweep_another_driver_runs_is_one_line_before_anything_starts(
    tmp_path: Path, home: Path
) -> None:
    import onnx

    from orchestrator.spec import load_spec
    from tests.conftest import one_error_line, write_sweep
    from workers import model_zoo

    onnx.save(model_zoo.tiny_mlp(), tmp_path / "mlp.onnx")
    sweep = write_sweep(tmp_path, '[[models]]\npath = "mlp.onnx"\n')
    url = f"sqlite:///{tmp_path / 'r.db'}"
    sweep_id = load_spec(sweep).sweep_id
    driver = _LiveDriver(url, sweep_id)
    try:
        result = CliRunner().invoke(app, ["sweep", "run", str(sweep), "--db", url])
        line = one_error_line(result, exit_code=1)
        assert f"sweep {sweep_id} is already being run by process {driver.child.pid}" in line, line
        assert "farm" not in result.output.replace(line, ""), result.output  # refused before a farm started
        store = ResultStore(url)
        assert store.get_sweep(sweep_id).driver_pid == driver.child.pid
        store.close()
    finally:
        driver.stop()


def test_two_drivers_started_together_on_one_machine_refuse_the_second_before_its_farm(
    tmp_path: Path, home: Path
) -> None:
    """Two `sweep run` of one file started within the same second: the second used to start a farm and Ray
    (18 s) before the database, where the first had not claimed the sweep yet, refused it. The first holds
    the machine's lock on the sweep from its first step: the second is refused at once, nothing started."""
    import fcntl

    import onnx

    from orchestrator.spec import load_spec
    from tests.conftest import one_error_line, write_sweep
    from workers import model_zoo

    onnx.save(model_zoo.tiny_mlp(), tmp_path / "mlp.onnx")
    sweep = write_sweep(tmp_path, '[[models]]\npath = "mlp.onnx"\n')
    url = f"sqlite:///{tmp_path / 'r.db'}"
    sweep_id = load_spec(sweep).sweep_id
    (home / "run").mkdir(parents=True, exist_ok=True)
    # What the first driver holds before it writes anything (orchestrator/scheduling/run.driving).
    with open(home / "run" / f"sweep-{sweep_id}.lock", "a") as first:
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = CliRunner().invoke(app, ["sweep", "run", str(sweep), "--db", url])
    line = one_error_line(result, exit_code=1)
    assert f"sweep {sweep_id} is already being run by another process on this machine" in line, line
    assert "farm" not in result.output.replace(line, ""), result.output
    assert not list((home / "run").glob("ephemeral-farm-*.json")), "no farm was started"
