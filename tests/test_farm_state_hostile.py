"""What a hostile user did to farm.json (TVMBENCH_HOME/farm.json, orchestrator/farm/state.py): two `farm up` or
two `farm add` at once (each wrote what it had read: a farm or a board went unrecorded and ran on with nothing
able to stop it), a full disk under `farm up`/`farm add` (a 0-byte farm.json, an orphaned farm), farm.json files
that are no farm (a traceback in every command), `farm up --boards 0` (exit 1, not 2), and a board request to
a tracker that is gone (reported as "no board with key ... is registered").

Real trackers and boards on loopback: the concurrent commands are real `tvmbench` processes with a fresh
TVMBENCH_HOME; the full disk is simulated in-process (the open of farm.json's file gives a writer that fails
with ENOSPC, as a full disk does after the file is created). No Ray, no sleeps, no timing assertions.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.farm import LOOPBACK, FarmError, LocalFarm, farm_for_run, free_port, stop_pid, wait_until
from orchestrator.farm.processes import _spawn, _tracker_cmd
from tests.conftest import one_error_line
from tests.test_hostile_user import invoke
from workers.tracker_client import NoBoardRegistered, TrackerUnreachable, request_session, tracker_summary

TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))
WAIT_S = 120.0  # the most any one command here may take on a busy machine


def _started_under(home: Path) -> list[int]:
    """Pids of the processes whose output goes to a log under ``home``: the farm's trackers and boards that run.

    The farm's processes write to TVMBENCH_HOME/logs (processes._spawn), so this finds every one started with
    this fresh home, recorded in farm.json or not, and nothing of anyone else's.
    """
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            target = os.readlink(proc / "fd" / "1")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and Path(target).is_relative_to(home):
            found.append(int(proc.name))
    return sorted(found)


@pytest.fixture
def farm_home(home: Path) -> Iterator[Path]:
    """A fresh TVMBENCH_HOME; whatever farm process is left under it at the end is killed (by pid, its group)."""
    yield home
    for pid in _started_under(home):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # each was started in a session of its own (processes._spawn)


def _cli(*args: str) -> subprocess.Popen[str]:
    """A real `tvmbench` process (TVMBENCH_HOME from the ``home`` fixture's environment)."""
    return subprocess.Popen(
        [TVMBENCH, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out


def _run(*args: str) -> tuple[int, str]:
    return _finish(_cli(*args))


def _nothing_left(home: Path) -> None:
    """Every process started under ``home`` is gone (deadline-polled: a stopped process may take a moment to exit)."""
    wait_until(lambda: not _started_under(home), WAIT_S, f"no farm process left under {home}")


# --- 1a. two `farm up` at once ------------------------------------------------------------------------


def test_two_farm_up_at_once_start_one_farm_and_refuse_the_other(farm_home: Path) -> None:
    first, second = _cli("farm", "up", "--boards", "1"), _cli("farm", "up", "--boards", "1")
    results = [_finish(first), _finish(second)]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    (won,) = [out for code, out in results if code == 0]
    (lost,) = [out for code, out in results if code == 1]
    errors = [line for line in lost.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "a farm is" in errors[0] and "farm" in errors[0], lost
    assert "being started" in errors[0] or "already configured" in errors[0], lost
    state = json.loads((farm_home / "farm.json").read_text())
    assert f"tracker {state['tracker']}," in won, (won, state)
    # What runs is exactly what farm.json records: one tracker and one board, nothing of the refused one.
    assert _started_under(farm_home) == sorted([state["tracker_pid"], *(b["pid"] for b in state["boards"])])
    assert len(state["boards"]) == 1
    code, out = _run("farm", "down")
    assert code == 0 and state["tracker"] in out, out
    _nothing_left(farm_home)


# --- 1b. two `farm add` at once -----------------------------------------------------------------------


def test_two_farm_add_at_once_are_both_recorded_and_stopped_by_down(farm_home: Path) -> None:
    code, out = _run("farm", "up", "--boards", "1")
    assert code == 0, out
    first, second = _cli("farm", "add"), _cli("farm", "add")
    for code, out in (_finish(first), _finish(second)):
        assert code == 0 and "registered" in out, out
    state = json.loads((farm_home / "farm.json").read_text())
    assert len(state["boards"]) == 3, state
    assert _started_under(farm_home) == sorted([state["tracker_pid"], *(b["pid"] for b in state["boards"])])
    status = json.loads(_run("farm", "status", "--json")[1])
    assert [b["running"] for b in status["boards"]] == [True, True, True], status
    code, out = _run("farm", "down")
    assert code == 0, out
    _nothing_left(farm_home)


def test_farm_add_after_a_board_died_registers_the_new_board(farm_home: Path) -> None:
    code, out = _run("farm", "up", "--boards", "1")
    assert code == 0, out
    code, out = _run("farm", "add", "--key", "k1")
    assert code == 0, out
    (k1,) = [b for b in json.loads((farm_home / "farm.json").read_text())["boards"] if b["key"] == "k1"]
    os.kill(k1["pid"], signal.SIGKILL)  # the OOM killer, or a user's kill
    wait_until(lambda: k1["pid"] not in _started_under(farm_home), WAIT_S, "the killed board to be gone")
    # Before: it waited its 60 s for the dead k1 to register again, then failed blaming the new board.
    code, out = _run("farm", "add", "--key", "k2")
    assert code == 0 and "registered" in out, out
    code, out = _run("farm", "status", "--json")  # exit 1 and a line after the JSON: a board is down
    status, _ = json.JSONDecoder().raw_decode(out)
    assert code == 1 and {b["key"]: b["running"] for b in status["boards"]} == {"host": True, "k1": False, "k2": True}
    code, out = _run("farm", "down")
    assert code == 0, out
    _nothing_left(farm_home)


# --- 1c. a full disk under `farm up` and `farm add` ---------------------------------------------------


class _FullDiskFile:
    """An open file on a full disk: created, but no byte of it can be written."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, _data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self) -> _FullDiskFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.real.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _fill_disk_for_farm_json(patch: pytest.MonkeyPatch) -> None:
    """Every open of a file named after farm.json for writing (farm.json itself, or a temporary file beside it)
    gives a file that cannot be written, whoever opens it (builtins.open, or pathlib's io.open)."""
    real_open = io.open

    def full_disk_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened = real_open(file, mode, *args, **kwargs)
        named = isinstance(file, str | os.PathLike) and "farm.json" in os.fspath(file)
        return _FullDiskFile(opened) if named and any(m in mode for m in "wax+") else opened

    patch.setattr(builtins, "open", full_disk_open)
    patch.setattr(io, "open", full_disk_open)


@pytest.fixture
def started_farms(monkeypatch: pytest.MonkeyPatch) -> list[LocalFarm]:
    """Every LocalFarm that `farm up` starts in this process, to check that its processes were stopped."""
    started: list[LocalFarm] = []
    real_start = LocalFarm.start.__func__  # type: ignore[attr-defined]

    def start(cls: type[LocalFarm], *args: Any, **kwargs: Any) -> LocalFarm:
        local = real_start(cls, *args, **kwargs)
        started.append(local)
        return local

    monkeypatch.setattr(LocalFarm, "start", classmethod(start))
    return started


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"


def test_farm_up_on_a_full_disk_stops_what_it_started_and_says_farm_json_is_not_written(
    farm_home: Path, monkeypatch: pytest.MonkeyPatch, started_farms: list[LocalFarm]
) -> None:
    _fill_disk_for_farm_json(monkeypatch)
    result = invoke("farm", "up")
    line = one_error_line(result, exit_code=1)
    assert "farm.json" in line and "No space left on device" in line and "full" in line, line
    assert "could not write the output" not in line  # the output was fine: the state file was not
    (local,) = started_farms
    pids = [local.tracker_pid, *(b.pid for b in local.boards)]
    assert not [pid for pid in pids if _is_running(pid)], "the unrecorded farm runs on"
    assert sorted(p.name for p in farm_home.iterdir() if "farm.json" in p.name) == []  # no 0-byte, no temporary
    assert one_error_line(invoke("farm", "status"), exit_code=1).startswith("error: no farm configured")


def test_farm_add_on_a_full_disk_stops_the_new_board_and_keeps_farm_json(
    farm_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert invoke("farm", "up").exit_code == 0
    before = (farm_home / "farm.json").read_bytes()
    try:
        with monkeypatch.context() as patch:
            _fill_disk_for_farm_json(patch)
            line = one_error_line(invoke("farm", "add"), exit_code=1)
        assert "farm.json" in line and "No space left on device" in line and "stopped" in line, line
        assert (farm_home / "farm.json").read_bytes() == before  # the farm as it was, whole
        state = json.loads(before)
        recorded = sorted([state["tracker_pid"], *(b["pid"] for b in state["boards"])])
        wait_until(lambda: _started_under(farm_home) == recorded, WAIT_S, "the unrecorded board to be stopped")
    finally:
        down = invoke("farm", "down")
    assert down.exit_code == 0, down.output
    _nothing_left(farm_home)


# --- 1c. a farm.json that is not a farm ---------------------------------------------------------------

DAMAGED = {
    "empty": "",
    "not-json": "{not json",
    "object-without-tracker": "{}",
    "list": "[]",
    "null": "null",
    "tracker-not-an-address": '{"tracker": 5}',
    "pid-0": json.dumps(
        {
            "tracker": "127.0.0.1:9190",
            "managed": True,
            "tracker_pid": 0,  # stop_pid(0) would signal the command's own process group
            "tracker_port": 9190,
            "host": "127.0.0.1",
            "log_dir": "x",
            "boards": [],
        }
    ),
    "board-not-an-object": json.dumps(
        {
            "tracker": "127.0.0.1:9190",
            "managed": True,
            "tracker_pid": 99999999,
            "tracker_port": 9190,
            "host": "127.0.0.1",
            "log_dir": "x",
            "boards": [7],
        }
    ),
    "not-utf8": "\udcff",
}
COMMANDS = [
    ("farm", "status"),
    ("farm", "status", "--json"),
    ("farm", "down"),
    ("farm", "up"),
    ("farm", "add"),
    ("farm", "list"),
    ("farm", "connect", "127.0.0.1:9"),
]


@pytest.mark.parametrize("content", list(DAMAGED.values()), ids=list(DAMAGED))
def test_a_damaged_farm_json_is_one_line_naming_it_in_every_command(farm_home: Path, content: str) -> None:
    path = farm_home / "farm.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    for args in COMMANDS:
        line = one_error_line(invoke(*args), exit_code=1)
        assert f"{path} is damaged" in line and "`tvmbench farm down --force`" in line, (args, line)
        assert path.read_bytes() == content.encode("utf-8", "surrogateescape")  # left as it was
    # What `sweep run` asks for the farm to use.
    with pytest.raises(FarmError, match="is damaged"), farm_for_run(farm_home, None, 1):
        pass
    assert _started_under(farm_home) == []  # none of them started a farm
    forced = invoke("farm", "down", "--force")
    assert forced.exit_code == 0 and "removed the damaged" in forced.output, forced.output
    assert not path.exists()
    assert one_error_line(invoke("farm", "status"), exit_code=1).startswith("error: no farm configured")


# --- 2. `farm up --boards 0` ----------------------------------------------------------------------------


def test_farm_up_with_no_boards_is_bad_input_naming_boards(farm_home: Path) -> None:
    line = one_error_line(invoke("farm", "up", "--boards", "0"), exit_code=2)
    assert "--boards" in line, line
    assert not (farm_home / "farm.json").exists() and _started_under(farm_home) == []


# --- 3. a board request to a tracker that is not there ------------------------------------------------


def test_a_board_request_to_a_dead_tracker_says_the_tracker_is_not_answering(tmp_path: Path) -> None:
    """The tracker gone (killed, `farm down`) is not "no board registered": the error names the address and
    `farm up`; it stays a NoBoardRegistered, so the job is still parked pending-device for `sweep resume`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(TrackerUnreachable) as caught:
        request_session(address, "host", deadline_s=1.0, session_timeout_s=5)
    message = str(caught.value)
    assert f"the tracker at {address} is not answering" in message and "`tvmbench farm up`" in message, message
    assert isinstance(caught.value, NoBoardRegistered)


def test_a_job_whose_tracker_is_gone_is_parked_saying_so() -> None:
    """The sweep's own wording (acquire_board): the job waits pending-device, and its error names the tracker
    that stopped answering, not "no board registered ... `farm add`" (which then failed: no local farm up)."""
    from tests.test_scheduler_rules import model_ref
    from tvmbench.core.records import Job, MeasureSettings, TargetSpec
    from workers.board_session import acquire_board

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    job = Job(
        model=model_ref(),
        target=TargetSpec("host", {"kind": "llvm"}, "host", "x86_64"),
        executor="vm-bytecode",
        opt_level=2,
        pipeline="per-target",
        measure=MeasureSettings(device_wait_s=1.0),
    )
    run = acquire_board(job, address, {"job_key": job.key, "attempt": 1}, deadline_s=1.0)
    assert run.status == "pending-device", run
    assert f"the tracker at {address} is not answering" in run.error and "farm add" not in run.error, run.error
    assert "`tvmbench sweep resume`" in run.error, run.error


def test_a_tracker_that_answers_with_no_board_of_the_key_is_still_no_board_registered(tmp_path: Path) -> None:
    port = free_port(LOOPBACK)
    tracker = _spawn(_tracker_cmd(LOOPBACK, port), tmp_path / "tracker.log")
    address = f"{LOOPBACK}:{port}"
    try:
        wait_until(lambda: tracker_summary(address, timeout_s=2), WAIT_S, f"the tracker on {address}")
        with pytest.raises(NoBoardRegistered) as caught:
            request_session(address, "host", deadline_s=1.0, session_timeout_s=5, registration_wait_s=0.5)
        assert not isinstance(caught.value, TrackerUnreachable), caught.value
    finally:
        stop_pid(tracker.pid)
