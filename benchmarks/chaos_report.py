"""Chaos run: a sweep of >= 20 jobs while a board is killed, the tracker restarted and the driver killed,
then resumed; prints jobs run, faults injected and results lost (must be 0).

    .venv/bin/python -m benchmarks.chaos_report [WORKDIR]

Everything is real: a tracker and board agents on loopback, `tvmbench sweep run` as a separate process
(with its own Ray), SIGKILL for the board and the driver. tests/test_chaos.py runs the same function.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import psutil

from orchestrator.farm import BoardProcess, LocalFarm, wait_until
from orchestrator.spec import load_spec
from tvmbench.core.records import FINAL_STATUSES
from workers import model_zoo
from workers.executors.relax_vm import artifact_name

TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))
# slow_matmul first: its builds and measurements come first in the plan, so the board kill (which waits
# for one of its measurements) lands early and leaves jobs to show progress after each later fault.
SWEEP = """name = "chaos"
[[models]]
path = "models/slow_matmul.onnx"
[[models]]
path = "models/tiny_mlp.onnx"
[[models]]
path = "models/tiny_cnn.onnx"
[axes]
executor = ["vm-bytecode", "vm-compiled"]
opt_level = [0, 2]
pipeline = ["per-target", "generic"]
[measure]
number = 1
repeat = 2
session_timeout_s = 60
device_wait_s = 90
"""


@dataclass
class ChaosReport:
    sweep_id: str
    jobs_accepted: int = 0
    final_rows: int = 0
    duplicate_keys: int = 0
    statuses: Counter = field(default_factory=Counter)
    attempts: int = 0
    interrupted_attempts: int = 0  # attempts that ended `infra` (the board or session died under them)
    retried_jobs: int = 0
    bad_attempt_numbers: int = 0
    faults: list[str] = field(default_factory=list)
    resume_exit: int | None = None
    seconds: float = 0.0

    @property
    def results_lost(self) -> int:
        """Accepted jobs without a final row."""
        return self.jobs_accepted - self.final_rows

    def lines(self) -> list[str]:
        return [
            f"sweep {self.sweep_id}: {self.jobs_accepted} jobs accepted, {self.final_rows} final rows "
            f"({dict(self.statuses)}), {self.attempts} attempts ({self.interrupted_attempts} interrupted), "
            f"{self.retried_jobs} jobs retried",
            f"faults injected: {len(self.faults)} ({'; '.join(self.faults)})",
            f"duplicate job keys: {self.duplicate_keys}; jobs with attempts not numbered 1..n: "
            f"{self.bad_attempt_numbers}",
            f"results lost: {self.results_lost}",
            f"resume exit status {self.resume_exit}; {self.seconds:.0f} s in all",
        ]


def _final_count(db: Path, sweep_id: str) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            marks = ",".join("?" * len(FINAL_STATUSES))
            sql = f"SELECT COUNT(*) FROM jobs WHERE sweep_id = ? AND status IN ({marks})"
            return conn.execute(sql, (sweep_id, *FINAL_STATUSES)).fetchone()[0]
    except sqlite3.OperationalError:  # schema not there yet
        return 0


def _session_open(board: BoardProcess) -> bool:
    """Whether a client holds an RPC session on the board now: a connection to its port is established."""
    leader = psutil.Process(board.pid)
    for proc in [leader, *leader.children(recursive=True)]:
        for conn in proc.net_connections("inet"):
            if conn.status == psutil.CONN_ESTABLISHED and conn.laddr.port == board.port:
                return True
    return False


def board_in_session(farm: LocalFarm) -> BoardProcess | None:
    """A board serving an RPC session now: a client connection to its port is established."""
    for board in farm.boards:
        try:
            if _session_open(board):
                return board
        except psutil.NoSuchProcess:
            continue
    return None


def _artifact_names(db: Path, sweep_id: str, model: str) -> set[str]:
    """The file names the built artifacts of ``model`` in the sweep are uploaded under on a board."""
    if not db.exists():
        return set()
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            rows = conn.execute(
                "SELECT DISTINCT b.artifact_sha256 FROM builds b JOIN jobs j ON j.build_key = b.build_key "
                "WHERE j.sweep_id = ? AND j.model_name = ? AND b.artifact_sha256 IS NOT NULL",
                (sweep_id, model),
            ).fetchall()
    except sqlite3.OperationalError:  # schema not there yet
        return set()
    return {artifact_name(sha) for (sha,) in rows}


def board_measuring(farm: LocalFarm, db: Path, sweep_id: str, model: str) -> BoardProcess | None:
    """A board in the middle of measuring ``model``: its open session holds that model's uploaded artifact.

    The agent serves each session in a folder of its own (workers/board_agent.py chdirs there for the
    session and removes it after): an artifact of ``model`` in the agent's folder means the session has
    uploaded it and is loading or timing it now, which for slow_matmul lasts seconds. The client's
    connection must still be open too, so that a session whose client has already let go (the folder is
    removed a moment later) is not taken for one.
    """
    names = _artifact_names(db, sweep_id, model)
    if not names:
        return None
    for board in farm.boards:
        try:
            folder = Path(psutil.Process(board.pid).cwd())
            if names & set(os.listdir(folder)) and _session_open(board):
                return board
        except (psutil.Error, OSError):  # the board or its session folder just went
            continue
    return None


def reconcile(db: Path, sweep_id: str, report: ChaosReport) -> None:
    """Fill ``report`` from the database: the reconciliation invariant's figures."""
    with sqlite3.connect(db) as conn:
        jobs = conn.execute("SELECT id, job_key, status FROM jobs WHERE sweep_id = ?", (sweep_id,)).fetchall()
        runs = conn.execute(
            "SELECT r.job_id, r.attempt, r.status FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.sweep_id = ?",
            (sweep_id,),
        ).fetchall()
    report.jobs_accepted = len(jobs)
    report.final_rows = sum(1 for _, _, status in jobs if status in FINAL_STATUSES)
    report.duplicate_keys = len(jobs) - len({key for _, key, _ in jobs})
    report.statuses = Counter(status for _, _, status in jobs)
    by_job: dict[int, list[int]] = {}
    for job_id, attempt, _ in runs:
        by_job.setdefault(job_id, []).append(attempt)
    report.attempts = len(runs)
    report.interrupted_attempts = sum(1 for _, _, status in runs if status == "infra")
    report.retried_jobs = sum(1 for a in by_job.values() if len(a) > 1)
    report.bad_attempt_numbers = sum(1 for a in by_job.values() if sorted(a) != list(range(1, len(a) + 1)))


def run_chaos(workdir: Path, log: Callable[[str], None] = print, timeout_s: float = 600) -> ChaosReport:
    """Run the chaos scenario in ``workdir`` and return its figures."""
    started = time.monotonic()
    models = workdir / "models"
    models.mkdir(parents=True, exist_ok=True)
    onnx.save(model_zoo.tiny_mlp(), models / "tiny_mlp.onnx")
    onnx.save(model_zoo.tiny_cnn(), models / "tiny_cnn.onnx")
    # About a second per inference: its sessions are long enough to be killed in the middle.
    onnx.save(model_zoo.slow_matmul(n=384, chain=4), models / "slow_matmul.onnx")
    sweep_path = workdir / "chaos.toml"
    sweep_path.write_text(SWEEP)
    spec = load_spec(sweep_path)
    home = workdir / "home"
    env = {**os.environ, "TVMBENCH_HOME": str(home), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("TVMBENCH_DB", None)
    db = home / "results.db"
    report = ChaosReport(sweep_id=spec.sweep_id)
    farm = LocalFarm.start(workdir / "farm", {"host": 2})
    try:
        with open(workdir / "driver.log", "wb") as driver_log:
            driver = subprocess.Popen(
                [TVMBENCH, "sweep", "run", str(sweep_path), "--tracker", farm.tracker],
                stdout=driver_log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            # Kill a board while it measures slow_matmul (seconds per session): the fault lands in a
            # measurement however busy the machine, or the run fails here saying it never saw one.
            victim = wait_until(
                lambda: board_measuring(farm, db, spec.sweep_id, "slow_matmul"),
                timeout_s,
                "a board measuring slow_matmul",
                interval_s=0.05,
            )
            os.killpg(victim.pid, signal.SIGKILL)
            farm.boards.remove(victim)
            report.faults.append(f"board agent on port {victim.port} SIGKILLed")
            log(report.faults[-1])
            farm.add_board("host", wait=False)  # a replacement, as an operator would plug one in

            done = _final_count(db, spec.sweep_id)
            wait_until(lambda: _final_count(db, spec.sweep_id) >= done + 2, timeout_s, "progress after the kill")
            farm.restart_tracker()
            report.faults.append("tracker restarted")
            log(report.faults[-1])

            done = _final_count(db, spec.sweep_id)
            wait_until(lambda: _final_count(db, spec.sweep_id) >= done + 2, timeout_s, "progress after the restart")
            if driver.poll() is None:
                driver.send_signal(signal.SIGKILL)
                driver.wait(30)
                report.faults.append(f"driver SIGKILLed with {_final_count(db, spec.sweep_id)} final rows")
                log(report.faults[-1])
        finally:
            if driver.poll() is None:
                driver.kill()
        farm.wait_for_boards(60)
        resume = subprocess.run(
            [TVMBENCH, "sweep", "resume", spec.sweep_id, "--tracker", farm.tracker],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
        )
        report.resume_exit = resume.returncode
        (workdir / "resume.log").write_text(resume.stdout + resume.stderr)
        if resume.returncode != 0:
            log(resume.stderr[-3000:])
    finally:
        farm.stop()
    reconcile(db, spec.sweep_id, report)
    report.seconds = time.monotonic() - started
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path, nargs="?", help="folder for the run (default: a temporary one)")
    workdir = parser.parse_args().workdir or Path(tempfile.mkdtemp(prefix="tvmbench-chaos-"))
    report = run_chaos(workdir)
    for line in report.lines():
        print(line)
    sys.exit(0 if report.results_lost == 0 and not report.duplicate_keys and report.final_rows else 1)


if __name__ == "__main__":
    main()
