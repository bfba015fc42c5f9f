"""The hostile user's sweeps, for real: `tvmbench sweep run` with its local farm, real Ray and real ONNX Runtime.

- The odd models (tests/odd_models.py) next to a good one: every job ends in exactly one final row, a
  reference that raises ends its jobs as `model` rows naming the input and what to write, NaN positions
  that agree are `ok`, and `sweep resume` repeats nothing.
- While it runs, every listening socket of the driver and everything under it (tracker, board, Ray's
  gcs_server, raylet, workers, agents, monitor) is on loopback, and Ray's auth notice is not printed.
- A driver killed with SIGKILL leaves nothing running: the farm, Ray's agents and workers all go.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import onnx
import psutil
import pytest

from orchestrator.farm import wait_until
from tests import odd_models
from tests.conftest import write_sweep
from tvmbench.core.records import FINAL_STATUSES
from workers import model_zoo

TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _label(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:120] or proc.name()
    except psutil.Error:
        return "?"


class SocketWatch(threading.Thread):
    """Records every listening TCP socket of a process tree until stopped: (address, process label)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.seen, self.stop = pid, set(), threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for proc in _tree(self.pid):
                try:
                    for conn in proc.net_connections(kind="inet"):
                        if conn.status == psutil.CONN_LISTEN:
                            self.seen.add((conn.laddr.ip, conn.laddr.port, _label(proc)))
                except psutil.Error:
                    pass
            self.stop.wait(0.2)


def _sweep_text(models: list[str]) -> str:
    entries = "".join(f'[[models]]\npath = "models/{m}.onnx"\n' for m in models)
    return (
        entries + '[axes]\nexecutor = ["vm-bytecode", "onnxruntime"]\n'
        "[measure]\nnumber = 1\nrepeat = 2\nsession_timeout_s = 120\ndevice_wait_s = 60\n"
    )


def _runs(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


@pytest.mark.slow
def test_odd_models_sweep_every_job_one_final_row_on_loopback(tmp_path: Path, home: Path) -> None:
    odd_models.write_odd_models(tmp_path / "models")
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "models" / "good.onnx")
    names = ["good", *odd_models.ODD_MODELS]
    sweep = write_sweep(tmp_path, _sweep_text(names))

    driver = subprocess.Popen(
        [TVMBENCH, "sweep", "run", str(sweep), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watch = SocketWatch(driver.pid)
    watch.start()
    try:
        out, err = driver.communicate(timeout=900)
    finally:
        watch.stop.set()
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1, err[-3000:]  # some jobs failed (gather_shifted), none waits, no crash
    result = json.loads(out)
    rows = result["results"]
    planned = len(names) * 2
    assert len(rows) == planned and len({r["job_key"] for r in rows}) == planned, rows
    assert all(r["status"] in FINAL_STATUSES for r in rows), [(r["model"], r["status"]) for r in rows]
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    # The reference raised: one `model` row per job, naming the input and what to write; nothing built.
    for r in by_model["gather_shifted"]:
        assert r["status"] == "model" and r["fingerprint"] is None, r
        assert "ids int64[3]" in r["error"] and "input_ranges = { ids = [LO, HI] }" in r["error"], r["error"]
    # The rest ran: the table lookup inside its table, NaN where ONNX Runtime has NaN, bool and float16 inputs.
    for model in ("good", "gather_table", "log_nan", "two_ranks", "bool_input"):
        assert [r["status"] for r in by_model[model]] == ["ok", "ok"], by_model[model]
    assert all(r["status"] in ("ok", "wrong-result") for r in by_model["float16_mlp"]), by_model["float16_mlp"]
    assert "Token authentication is enabled" not in err, err[-2000:]

    # Loopback only, and the check saw the processes it is about (not a vacuous pass).
    exposed = sorted({(ip, label) for ip, _, label in watch.seen if ip not in LOOPBACK})
    assert not exposed, exposed
    labels = " | ".join(label for _, _, label in watch.seen)
    for process in ("gcs_server", "raylet", "ray::", "board_agent", "tvm.rpc.tracker", "tvmbench sweep run"):
        assert process in labels, (process, labels)

    # A resume repeats nothing: every job is final, nothing is built or measured again.
    runs_before = _runs(home / "results.db")
    resume = subprocess.run(
        [TVMBENCH, "sweep", "resume", result["sweep_id"], "--json"], capture_output=True, text=True, timeout=600
    )
    assert resume.returncode == 1, resume.stderr[-2000:]
    outcome = json.loads(resume.stdout)["outcome"]
    assert outcome["already_final"] == planned and outcome["built"] == 0 and outcome["measured"] == 0, outcome
    assert _runs(home / "results.db") == runs_before


def _alive(procs: dict[int, tuple[float, str]]) -> list[str]:
    left = []
    for pid, (started, label) in procs.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {label}")
        except psutil.Error:
            pass
    return left


@pytest.mark.slow
def test_killed_driver_leaves_nothing_running(tmp_path: Path, home: Path) -> None:
    onnx.save(model_zoo.tiny_cnn(), tmp_path / "m.onnx")
    sweep = write_sweep(
        tmp_path, '[[models]]\npath = "m.onnx"\n[axes]\nopt_level = [0, 1, 2, 3]\nexecutor = ["vm-bytecode"]\n'
    )
    driver = subprocess.Popen([TVMBENCH, "sweep", "run", str(sweep)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs: dict[int, tuple[float, str]] = {}
    try:

        def started_all() -> bool:
            for proc in _tree(driver.pid)[1:]:
                with contextlib.suppress(psutil.Error):
                    procs[proc.pid] = (proc.create_time(), _label(proc))
            labels = " ".join(label for _, label in procs.values())
            wanted = ("DashboardAgent", "RuntimeEnvAgent", "raylet", "gcs_server", "board_agent", "tvm.rpc.tracker")
            return all(w in labels for w in wanted)

        wait_until(started_all, 240, "the farm and Ray's agents to start under the driver", interval_s=0.2)
        time.sleep(1)  # let the reaper's list catch up with the last process started
        started_all()
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        # Nothing it started keeps running (or listening): Ray's agents alone would linger for a minute.
        deadline = time.monotonic() + 20
        while _alive(procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(procs), _alive(procs)
    finally:
        if driver.poll() is None:
            driver.kill()
        for pid, _ in procs.items():
            if _alive({pid: procs[pid]}):
                os.kill(pid, signal.SIGKILL)
