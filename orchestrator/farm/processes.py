"""The farm's processes: started in a session of their own (optionally dying with their parent), stopped
as a group, and the pid files that let a later run stop what a killed driver left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the process that started it dies (Linux prctl)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _spawn(
    cmd: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    die_with_parent: bool = False,
    cwd: Path | None = None,
) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        # A session of its own, so that stopping it also stops the RPC server's forked workers.
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=cwd,
            preexec_fn=_die_with_parent if die_with_parent and sys.platform == "linux" else None,
        )


def stop_pid(pid: int, timeout_s: float = 5.0) -> None:
    """Stop a process group started by this module: SIGTERM, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                waited, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child: poll for its disappearance
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                waited = 0
            if waited == pid:
                return
            time.sleep(0.05)


# The tracker runs in this one process. `python -m tvm.exec.rpc_tracker` serves from a PopenWorker child
# instead, which PR_SET_PDEATHSIG does not reach: it kept listening after its driver was SIGKILLed.
_TRACKER_MAIN = (
    "import sys; from tvm.rpc.tracker import PopenTrackerServerState as State; "
    "State(sys.argv[1], int(sys.argv[2]), int(sys.argv[2]) + 1, silent=True).thread.join()"
)


def _tracker_cmd(host: str, port: int) -> list[str]:
    return [sys.executable, "-c", _TRACKER_MAIN, host, str(port)]


def _pid_files(home: Path) -> Path:
    return home / "run"


def write_pid_file(home: Path, farm: dict[str, Any]) -> Path:
    """Record the ephemeral farm this driver started (``LocalFarm.to_json``) in TVMBENCH_HOME/run."""
    pid_file = _pid_files(home) / f"ephemeral-farm-{os.getpid()}.json"
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(json.dumps({"driver_pid": os.getpid(), "farm": farm}))
    return pid_file


def stop_recorded_farm(farm: dict[str, Any]) -> None:
    """Stop the processes of a farm recorded by ``LocalFarm.to_json``: its boards, then its tracker."""
    for board in farm["boards"]:
        stop_pid(int(board["pid"]))
    stop_pid(int(farm["tracker_pid"]))


def reap_stale_farms(home: Path) -> None:
    """Stop ephemeral farms whose driver died (a pid file left in TVMBENCH_HOME/run)."""
    for pid_file in _pid_files(home).glob("ephemeral-farm-*.json"):
        try:
            data = json.loads(pid_file.read_text())
            os.kill(int(data["driver_pid"]), 0)
            continue  # that driver is alive: its farm is in use
        except ProcessLookupError:
            stop_recorded_farm(data["farm"])
        except (OSError, ValueError, KeyError):
            pass
        pid_file.unlink(missing_ok=True)
