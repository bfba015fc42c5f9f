"""Sweep-level faults, provoked for real: the driver SIGKILLed and resumed, a cancel mid-measurement, a
Ray build worker killed, the same sweep submitted by two processes at once, a locked database, and the
security defaults (loopback only, no Ray dashboard)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import onnx
import psutil
import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from db.writes import SweepBusy
from orchestrator.farm import LocalFarm, wait_until
from orchestrator.plan import plan_jobs
from orchestrator.scheduler import build_on_node, run_sweep
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.answers import query as reads
from tvmbench.cli import app
from tvmbench.core.records import FINAL_STATUSES
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.tracker_client import tracker_summary

TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))
QUICK = "[measure]\nnumber = 1\nrepeat = 2\nsession_timeout_s = 60\ndevice_wait_s = 60\n"


def _final_jobs(db: Path, sweep_id: str) -> dict[str, str]:
    if not db.exists():
        return {}
    with sqlite3.connect(db, timeout=30) as conn:
        try:
            rows = conn.execute("SELECT job_key, status FROM jobs WHERE sweep_id = ?", (sweep_id,)).fetchall()
        except sqlite3.OperationalError:  # schema not created yet
            return {}
    return {k: s for k, s in rows if s in FINAL_STATUSES}


def _runs(db: Path, sweep_id: str) -> list[tuple[str, int, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT j.job_key, r.attempt, r.status FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.sweep_id = ?",
            (sweep_id,),
        ).fetchall()


def assert_reconciled(store: ResultStore, sweep_id: str, planned: int) -> None:
    """Jobs accepted = final rows, each with a status, no key twice, attempts numbered 1..n."""
    rows = reads.results(store, sweep_id)
    keys = Counter(r["job_key"] for r in rows)
    assert len(rows) == planned and max(keys.values()) == 1, keys
    assert all(r["status"] in FINAL_STATUSES for r in rows), Counter(r["status"] for r in rows)
    for row in rows:
        attempts = [r["attempt"] for r in reads.job_detail(store, row["job_key"], sweep_id)["runs"]]
        assert attempts == list(range(1, len(attempts) + 1)), (row["job_key"], attempts)


@pytest.mark.slow
def test_driver_killed_then_resume_finishes_only_what_is_missing(tmp_path: Path, models_dir: Path, home: Path) -> None:
    sweep = write_sweep(
        tmp_path,
        f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n'
        '[axes]\nexecutor = ["vm-bytecode", "vm-compiled"]\nopt_level = [0, 2]\n' + QUICK,
    )
    spec = load_spec(sweep)
    db = home / "results.db"
    log = open(tmp_path / "driver.log", "wb")  # noqa: SIM115  (the child writes to it)
    driver = subprocess.Popen([TVMBENCH, "sweep", "run", str(sweep)], stdout=log, stderr=subprocess.STDOUT)
    try:
        pid_file = home / "run" / f"ephemeral-farm-{driver.pid}.json"
        wait_until(lambda: len(_final_jobs(db, spec.sweep_id)) >= 1, 300, "a first final row")
        farm = json.loads(pid_file.read_text())["farm"]
        before = _final_jobs(db, spec.sweep_id)
        runs_before = [r for r in _runs(db, spec.sweep_id) if r[0] in before]
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert len(before) < len(plan_jobs(spec)), "the sweep finished before the driver was killed"
    # The ephemeral farm dies with its driver (PR_SET_PDEATHSIG).
    farm_pids = [farm["tracker_pid"]] + [b["pid"] for b in farm["boards"]]
    wait_until(lambda: not any(psutil.pid_exists(p) for p in farm_pids), 120, f"farm processes {farm_pids} to exit")

    # The killed driver's sweep reads as interrupted (not running), with the command that finishes it.
    hint = f"tvmbench sweep resume {spec.sweep_id}"
    listed = subprocess.run([TVMBENCH, "results", "sweeps", "--json"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    (row,) = json.loads(listed.stdout)
    assert (row["status"], row["resume"], row["driver"]["pid"]) == ("interrupted", hint, driver.pid), row
    shown = subprocess.run(
        [TVMBENCH, "sweep", "status", spec.sweep_id, "--json"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert (json.loads(shown.stdout)["state"], json.loads(shown.stdout)["resume"]) == ("interrupted", hint)

    resume = subprocess.run(
        [TVMBENCH, "sweep", "resume", spec.sweep_id, "--json"], capture_output=True, text=True, timeout=600
    )
    assert resume.returncode in (0, 1), resume.stderr[-2000:]
    outcome = json.loads(resume.stdout)["outcome"]
    assert outcome["already_final"] == len(before), outcome
    assert not pid_file.exists(), "the stale pid file of the killed driver was not cleaned up"
    store = ResultStore(f"sqlite:///{db}")
    try:
        assert_reconciled(store, spec.sweep_id, len(plan_jobs(spec)))
        # Jobs final before the kill were not run again.
        assert [r for r in _runs(db, spec.sweep_id) if r[0] in before] == runs_before
        assert store.get_sweep(spec.sweep_id).status == "complete"
        assert reads.sweeps_overview(store)[0]["status"] == "complete"
    finally:
        store.close()


@pytest.mark.slow
def test_cancel_mid_measurement_frees_the_board(
    tmp_path: Path, home: Path, ray_local: None, local_farm: LocalFarm, store: ResultStore
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    onnx.save(model_zoo.slow_matmul(n=512, chain=4), models / "slow.onnx")
    sweep = write_sweep(
        tmp_path,
        '[[models]]\npath = "models/slow.onnx"\n[axes]\nopt_level = [0, 2]\n'
        "[measure]\nnumber = 5\nrepeat = 5\nsession_timeout_s = 300\n",
    )
    spec = load_spec(sweep)
    box: list = []
    thread = threading.Thread(
        target=lambda: box.append(run_sweep(spec, store, local_farm.tracker, ArtifactCache(home / "artifacts"))),
        daemon=True,
    )
    thread.start()

    def measuring() -> bool:
        return tracker_summary(local_farm.tracker)["queue_info"].get("host", {}).get("free", 1) == 0

    wait_until(measuring, 180, "the measurement to hold the board")
    started = time.monotonic()
    result = CliRunner().invoke(app, ["sweep", "cancel", spec.sweep_id, "--db", store.url])
    assert result.exit_code == 0 and "cancelled" in result.output, result.output
    thread.join(300)
    assert box, "run_sweep did not return after the cancel"
    assert time.monotonic() - started < 300  # the cancel ended the session, not its 300 s deadline
    statuses = store.job_statuses(spec.sweep_id)
    assert set(statuses.values()) == {"cancelled"}, statuses
    assert store.get_sweep(spec.sweep_id).status == "cancelled"
    wait_until(lambda: not measuring(), 120, "the board to be free again")


@pytest.mark.slow
def test_ray_worker_killed_mid_build_is_retried_with_one_build_row(
    tmp_path: Path, home: Path, ray_local: None, local_farm: LocalFarm, store: ResultStore
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    onnx.save(model_zoo.slow_matmul(n=256, chain=8), models / "slowbuild.onnx")
    sweep = write_sweep(tmp_path, '[[models]]\npath = "models/slowbuild.onnx"\n' + QUICK)
    spec = load_spec(sweep)
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set() and not killed:
            for proc in psutil.process_iter(["pid", "cmdline"]):
                if f"ray::{build_on_node.__name__}" in " ".join(proc.info["cmdline"] or []):
                    proc.kill()
                    killed.append(proc.pid)
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        outcome = run_sweep(spec, store, local_farm.tracker, ArtifactCache(home / "artifacts"), health_checks=False)
    finally:
        stop.set()
    assert killed, "no build worker was seen to kill"
    assert outcome.statuses == Counter({"ok": 1}), outcome
    with sqlite3.connect(store.url.removeprefix("sqlite:///")) as conn:
        assert conn.execute("SELECT COUNT(*) FROM builds").fetchone()[0] == 1


def _submit(db_url: str, sweep_path: str, barrier, out) -> None:
    store = ResultStore(db_url)
    spec = load_spec(sweep_path)
    barrier.wait()
    try:
        began = store.begin_sweep(
            spec.sweep_id,
            name=spec.name,
            label=spec.label,
            source=spec.source,
            source_path=spec.source_path,
            jobs=plan_jobs(spec),
            model_sizes={sha: p.stat().st_size for sha, p in spec.model_paths.items()},
            tvm_version="test",
        )
        out.put("created" if began else "existed")
    except SweepBusy:
        out.put("refused")
    barrier.wait()  # both drivers stay alive until both have tried: the first is alive when the second asks
    store.close()


def test_same_sweep_submitted_twice_at_once_is_one_sweep(tmp_path: Path, models_dir: Path) -> None:
    sweep = write_sweep(
        tmp_path, f'[[models]]\npath = "{models_dir}/tiny_cnn.onnx"\n[axes]\nopt_level = [0, 1, 2, 3]\n'
    )
    db = tmp_path / "shared.db"
    ResultStore(f"sqlite:///{db}").close()  # schema first, as `tvmbench db upgrade` would
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_submit, args=(f"sqlite:///{db}", str(sweep), barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    # Exactly one created it and became its driver; the other, while that one lives, is refused (db.writes).
    assert sorted([out.get(timeout=5), out.get(timeout=5)]) == ["created", "refused"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM sweeps").fetchone()[0] == 1
        jobs = conn.execute("SELECT job_key FROM jobs").fetchall()
    assert len(jobs) == 4 and len(set(jobs)) == 4


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[tuple[str, object]]]:
    """Run ``fn`` in a daemon thread; the list gets ("ok", result) or ("error", exception) when it ends."""
    box: list[tuple[str, object]] = []

    def run() -> None:
        try:
            box.append(("ok", fn()))
        except Exception as exc:  # the test reports it
            box.append(("error", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_write_waits_for_a_locked_database_and_is_committed_on_return(tmp_path: Path, models_dir: Path) -> None:
    db = tmp_path / "busy.db"
    store = ResultStore(f"sqlite:///{db}")
    spec = load_spec(write_sweep(tmp_path, f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n'))
    [job] = plan_jobs(spec)
    # Another process holds the write lock until it is told to let go (a line on its stdin): how long the
    # write waited is up to the test, not to how fast a busy machine runs the two processes.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.readline(); c.execute('COMMIT')",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    thread, box = _in_thread(
        lambda: store.begin_sweep(
            spec.sweep_id,
            name="busy",
            label="",
            source="",
            source_path="",
            jobs=[job],
            model_sizes={job.model.sha256: 1},
            tvm_version="test",
        )
    )
    thread.join(2.0)
    # Still waiting while the lock is held (a slow machine only makes it wait longer), not failed.
    assert thread.is_alive() and not box, box
    holder.stdin.write("go\n")
    holder.stdin.flush()
    holder.wait(30)
    thread.join(60)
    assert box == [("ok", True)], box  # it waited for the lock, then wrote
    # Acknowledged means committed: a fresh connection sees the row at once.
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_farm_binds_loopback_and_warns_otherwise(tmp_path: Path, local_farm: LocalFarm, capfd) -> None:
    for pid in [local_farm.tracker_pid] + [b.pid for b in local_farm.boards]:
        leader = psutil.Process(pid)  # the tracker listens in a child process
        listening = [
            c.laddr.ip
            for proc in [leader, *leader.children(recursive=True)]
            for c in proc.net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening and set(listening) == {"127.0.0.1"}, (pid, listening)
    # Any other address gets the warning (127.0.0.2 is still loopback, so nothing is exposed here).
    farm = LocalFarm.start(tmp_path / "farm", {"host": 1}, host="127.0.0.2")
    try:
        assert "TVM RPC runs uploaded code" in capfd.readouterr().err
    finally:
        farm.stop()


def test_ray_dashboard_is_not_started(ray_local: None) -> None:
    import ray

    node = ray._private.worker.global_worker.node
    assert not node.address_info.get("webui_url"), node.address_info
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0"


def test_cancel_without_a_driver_marks_the_rest_and_keeps_results(tmp_path: Path, models_dir: Path) -> None:
    from tvmbench.core.records import Run

    store = ResultStore(f"sqlite:///{tmp_path / 'c.db'}")
    spec = load_spec(
        write_sweep(tmp_path, f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n[axes]\nopt_level = [0, 1, 2]\n')
    )
    jobs = plan_jobs(spec)
    store.begin_sweep(
        spec.sweep_id,
        name="c",
        label="",
        source="",
        source_path="",
        jobs=jobs,
        model_sizes={jobs[0].model.sha256: 1},
        tvm_version="test",
    )
    store.record_run(spec.sweep_id, Run(job_key=jobs[0].key, attempt=1, status="ok"), final=True)
    store.finish_sweep(spec.sweep_id, "incomplete")  # its driver is gone
    result = CliRunner().invoke(app, ["sweep", "cancel", spec.sweep_id, "--db", store.url, "--wait", "0"])
    assert result.exit_code == 0 and "2 job(s) cancelled, 1 kept" in result.output, result.output
    statuses = store.job_statuses(spec.sweep_id)
    assert sorted(statuses.values()) == ["cancelled", "cancelled", "ok"]
    # A late result for a cancelled job is kept as an attempt but never becomes a second outcome.
    store.record_run(spec.sweep_id, Run(job_key=jobs[1].key, attempt=1, status="ok"), final=True)
    assert store.job_statuses(spec.sweep_id)[jobs[1].key] == "cancelled"
    assert [r["attempt"] for r in reads.job_detail(store, jobs[1].key, spec.sweep_id)["runs"]] == [1]
    assert store.get_sweep(spec.sweep_id).status == "cancelled"
    store.close()
