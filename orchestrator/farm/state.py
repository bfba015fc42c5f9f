"""The farm this machine uses, recorded in TVMBENCH_HOME/farm.json: one `farm up` started or `farm connect` named.

Every command that changes farm.json (`farm up/add/connect/down`) reads, changes and writes it holding an
exclusive lock on TVMBENCH_HOME/farm.lock: two at once used to each write what they had read, so a board
or a whole farm went unrecorded and nothing could stop it. farm.json is replaced atomically (a temporary
file in the same folder, fsynced, then os.replace), so a reader never sees half of it and a full disk
leaves the previous one whole. A farm.json that is not what tvmbench writes is one FarmError naming it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

from orchestrator.farm.errors import FarmError
from orchestrator.farm.local import BoardProcess, LocalFarm
from orchestrator.farm.network import LOOPBACK
from orchestrator.farm.processes import stop_pid
from orchestrator.farm.provisioning import Note, provision_boards
from tvmbench.core.files import sync_folder
from workers.toolchains.toolchain import Toolchain
from workers.tracker_client import parse_addr, tracker_summary

# How long `farm add/down/connect` wait for another farm command to finish: a `farm up` that provisions
# an emulated board holds the lock for a few minutes. `farm up` itself never waits (see ``up``).
LOCK_WAIT_S = 900.0
_BOARD_FIELDS = {f.name for f in fields(BoardProcess)}
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def state_file(home: Path) -> Path:
    return home / "farm.json"


def lock_file(home: Path) -> Path:
    return home / "farm.lock"


def damaged(home: Path, problem: str) -> FarmError:
    """The one error every command gives for a farm.json it cannot use, with what to do about it."""
    return FarmError(
        f"{state_file(home)} is damaged ({problem}); `tvmbench farm down --force` removes it (processes it "
        "recorded are not stopped), then `tvmbench farm up` or `tvmbench farm connect HOST:PORT` sets up a farm"
    )


def _pid(value: Any) -> bool:
    # Never 0 or 1: stop_pid(0) would signal this command's own process group, and 1 is init.
    return isinstance(value, int) and not isinstance(value, bool) and value > 1


def _state_problem(data: Any) -> str | None:
    """What makes ``data`` (farm.json, parsed) not a farm tvmbench recorded, or None when it is one."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object" if data is not None else "JSON null, not an object"
    tracker = data.get("tracker")
    if not isinstance(tracker, str):
        return "no tracker address"
    try:
        parse_addr(tracker)
    except ValueError as exc:
        return str(exc)
    if not isinstance(data.get("managed", False), bool):
        return "'managed' is not true or false"
    if not data.get("managed"):
        return None
    if not _pid(data.get("tracker_pid")):
        return "no tracker process id"
    port = data.get("tracker_port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        return "no tracker port"
    if not isinstance(data.get("host"), str) or not isinstance(data.get("log_dir"), str):
        return "no host or log folder"
    boards = data.get("boards")
    if not isinstance(boards, list):
        return "no list of boards"
    for board in boards:
        if not (
            isinstance(board, dict)
            and set(board) <= _BOARD_FIELDS
            and isinstance(board.get("key"), str)
            and isinstance(board.get("port"), int)
            and _pid(board.get("pid"))
        ):
            return f"a board that is not {{key, port, pid}}: {str(board)[:80]}"
    roots = data.get("board_roots", {})
    if not isinstance(roots, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in roots.items()):
        return "board_roots is not an object of paths"
    return None


def read_state(home: Path) -> dict[str, Any] | None:
    """farm.json, or None when there is none; FarmError (one line naming it) when it cannot be read or used."""
    path = state_file(home)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise damaged(home, "not UTF-8 text") from None
    except OSError as exc:  # a folder in its place, no permission, an I/O error
        raise FarmError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:  # 0 bytes (a write a full disk cut short, before writes were atomic), or not JSON
        raise damaged(home, "empty" if not text.strip() else f"not JSON: {exc}") from None
    problem = _state_problem(data)
    if problem is not None:
        raise damaged(home, problem)
    return data


def write_state(home: Path, data: dict[str, Any]) -> None:
    """Replace farm.json with ``data`` atomically; FarmError naming it (and a full disk) when it cannot be written.

    Callers hold ``farm_lock``. The temporary file is in the same folder, so os.replace is a rename on one
    file system: readers see the old farm.json or the new one, never a truncated one.
    """
    home.mkdir(parents=True, exist_ok=True)
    path = state_file(home)
    tmp = home / f".farm.json.{os.getpid()}.tmp"
    try:
        try:
            with open(tmp, "w", encoding="utf-8") as out:
                out.write(json.dumps(data, indent=2) + "\n")
                out.flush()
                os.fsync(out.fileno())  # the bytes are on disk before the name points at them
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        disk = f"the disk of {home} is full" if exc.errno in _DISK_FULL else f"{home} cannot be written"
        raise FarmError(f"could not write {path}: {exc.strerror or exc} ({disk})") from None
    sync_folder(home)  # the rename itself survives a power cut once the folder is synced


def _holder(fd: int) -> str:
    """The pid the lock's holder wrote into farm.lock, as words for a message (empty if unknown)."""
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


@contextmanager
def farm_lock(home: Path, what: str, wait_s: float | None = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the exclusive lock on TVMBENCH_HOME/farm.lock while changing farm.json.

    ``wait_s`` None: FarmError at once if another command holds it; else wait for it up to ``wait_s``. The
    lock goes with the process (flock), so a command that was killed never leaves it held; O_CLOEXEC keeps
    the farm's processes, started while it is held, from inheriting it (they would hold it for their life).
    """
    home.mkdir(parents=True, exist_ok=True)
    path = lock_file(home)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise FarmError(f"cannot open {path} to {what}: {exc.strerror or exc}") from None
    try:
        deadline = time.monotonic() + (wait_s or 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if wait_s is None or time.monotonic() >= deadline:
                    waited = "" if wait_s is None else f" for {wait_s:g}s"
                    raise FarmError(
                        f"cannot {what}: a farm is being started or changed by another tvmbench farm command"
                        f"{_holder(fd)}{waited}; wait for it to finish, then see `tvmbench farm status`"
                    ) from None
                time.sleep(0.1)
        try:  # who holds it, for the message of a command that finds it held; a full disk only loses the pid
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def configured_tracker(home: Path) -> str | None:
    """The tracker to use: TVMBENCH_TRACKER, else the one `farm up`/`farm connect` recorded, else None."""
    env = os.environ.get("TVMBENCH_TRACKER")
    if env:
        return env
    state = read_state(home)
    return state["tracker"] if state else None


def connect(home: Path, tracker: str) -> dict[str, Any]:
    """Record an existing tracker as this machine's farm, after checking that it answers."""
    parse_addr(tracker)
    with farm_lock(home, "connect a farm"):
        state = read_state(home)  # under the lock: a `farm up` that finished meanwhile is not overwritten
        if state:
            raise FarmError(f"a farm is already configured at {state['tracker']}; run `tvmbench farm down` first")
        try:
            summary = tracker_summary(tracker, timeout_s=5)
        except OSError as exc:
            raise FarmError(
                f"no TVM RPC tracker answers at {tracker} ({exc}); check the address and that "
                "`python -m tvm.exec.rpc_tracker` runs there"
            ) from None
        write_state(home, {"tracker": tracker, "managed": False})
    return summary


def down(home: Path, force: bool = False) -> str | None:
    """Stop the farm `farm up` started (or forget a connected one); returns its tracker address.

    With ``force``, a damaged farm.json is removed (returning "" for its unknown tracker): it cannot say
    which processes to stop, and without this nothing in tvmbench could get past it.
    """
    with farm_lock(home, "stop the farm"):
        try:
            state = read_state(home)
        except FarmError:
            if not force or not state_file(home).is_file():
                raise
            state_file(home).unlink(missing_ok=True)
            return ""
        if state is None:
            return None
        if state.get("managed"):
            LocalFarm.from_json(state).stop()
        state_file(home).unlink(missing_ok=True)
        return state["tracker"]


def up(
    home: Path,
    boards: dict[str, int],
    emulated: list[str],
    *,
    host: str = LOOPBACK,
    port: int | None = None,
    note: Note = lambda _msg: None,
    toolchains: list[Toolchain] | None = None,
) -> LocalFarm:
    """`farm up`: a local farm that stays up until `farm down`, recorded in TVMBENCH_HOME/farm.json.

    ``boards`` are native board agents by key; ``emulated`` adds one emulated board per entry. With
    ``toolchains``, every board is started once per toolchain, each running that release's runtime
    (``LocalFarm.start``; an emulated board from a root provisioned with that release's wheels for its
    architecture); farm.json records each board's release, so `farm status` shows it.

    A second `farm up` while one starts is refused at once rather than queued: it would only find the first's
    farm and be refused then, after a wait as long as the first's start.
    """
    with farm_lock(home, "start a farm", wait_s=None):
        state = read_state(home)
        if state:
            raise FarmError(f"a farm is already configured at {state['tracker']}; run `tvmbench farm down` first")
        wanted = {k: n for k, n in boards.items() if n}
        versions = [t.tvm_version for t in toolchains] if toolchains else None
        roots = provision_boards(home, list(dict.fromkeys(emulated)), note, tvm_versions=versions)
        for key in emulated:
            wanted[key] = wanted.get(key, 0) + 1
        if not wanted:
            raise FarmError("no boards asked for: give --boards N and/or --board KIND")
        local = LocalFarm.start(
            home / "logs" / "farm", wanted, host=host, tracker_port=port, board_roots=roots, toolchains=toolchains
        )
        try:
            write_state(home, local.to_json())
        except FarmError as exc:  # unrecorded, nothing could ever stop them: stop them now
            local.stop()
            raise FarmError(f"{exc}; the tracker and boards just started were stopped") from None
        except BaseException:
            local.stop()
            raise
    return local


def add(home: Path, key: str = "host", toolchain: Toolchain | None = None) -> tuple[LocalFarm, BoardProcess]:
    """`farm add`: one more board agent in the farm `farm up` started (of ``toolchain``'s release if given)."""
    with farm_lock(home, "add a board"):
        state = read_state(home)
        if not state or not state.get("managed"):
            raise FarmError("no local farm is up; run `tvmbench farm up` first")
        local = LocalFarm.from_json(state)
        recorded = len(local.boards)
        try:
            board = local.add_board(key, toolchain=toolchain)
            write_state(home, local.to_json())
        except BaseException as exc:  # farm.json still holds the farm without it: the board must not outlive us
            for started in local.boards[recorded:]:  # add_board records the agent before it registers
                stop_pid(started.pid)
            if isinstance(exc, FarmError):
                raise FarmError(f"{exc}; the new board was stopped, the farm is as before") from None
            raise
    return local, board
