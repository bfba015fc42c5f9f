"""The device farm: a TVM RPC tracker and the boards registered with it.

A local farm is a real tracker and real board-agent processes on 127.0.0.1. ``farm up`` keeps one
running between commands (its state in TVMBENCH_HOME/farm.json); ``farm connect`` points tvmbench at an
existing tracker; ``sweep run`` with neither starts an ephemeral local farm and stops it afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.board_session import board_facts
from workers.mcu_agent import agent_command
from workers.tracker_client import DeviceUnavailable, parse_addr, registered_keys, request_session, tracker_summary

LOOPBACK = "127.0.0.1"
RPC_WARNING = (
    "TVM RPC runs uploaded code for anyone who can connect, in plain text: expose it only on a trusted network"
)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a service on this machine (127.0.0.0/8, ::1, "localhost")."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def warn_exposed(what: str, host: str, risk: str = RPC_WARNING) -> None:
    """The one warning every service tvmbench starts prints when it listens beyond loopback."""
    print(f"warning: {what} listening on {host}: {risk}", file=sys.stderr)


class FarmError(RuntimeError):
    """The farm could not be started or reached; the message says what to do."""


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until(condition: Any, timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    """Poll ``condition()`` until it returns a truthy value or the deadline passes (FarmError)."""
    deadline = time.monotonic() + timeout_s
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # the thing polled may not be up yet
            last_exc = exc
        time.sleep(interval_s)
    raise FarmError(f"timed out after {timeout_s:g}s waiting for {what}" + (f" ({last_exc})" if last_exc else ""))


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the process that started it dies (Linux prctl)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _spawn(
    cmd: list[str], log: Path, env: dict[str, str] | None = None, die_with_parent: bool = False
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


@dataclass
class BoardProcess:
    key: str
    port: int
    pid: int


INFRA_DIR = Path(__file__).resolve().parent.parent / "infra" / "farm"


@dataclass(frozen=True)
class EmulatedBoardKind:
    """A board this machine can emulate: a provisioned userland run by a qemu user-mode emulator."""

    key: str
    emulator: str  # the qemu binary the launcher needs
    emulator_package: str  # Debian package providing it

    @property
    def provision_script(self) -> Path:
        return INFRA_DIR / self.key / "provision.sh"

    @property
    def launch_script(self) -> Path:
        return INFRA_DIR / self.key / "launch.sh"


EMULATED_BOARDS: dict[str, EmulatedBoardKind] = {
    "arm64-emu": EmulatedBoardKind("arm64-emu", "qemu-aarch64-static", "qemu-user-static"),
}
EMULATED_BOARD_START_S = 180.0  # `import tvm` alone takes 6-30 s under qemu on a busy machine


def board_root(key: str) -> Path:
    """Where the emulated board ``key`` is provisioned: TVMBENCH_BOARD_ROOT_<KEY>, else TVMBENCH_HOME/boards/<key>."""
    env = os.environ.get("TVMBENCH_BOARD_ROOT_" + key.upper().replace("-", "_"))
    if env:
        return Path(env)
    home = Path(os.environ.get("TVMBENCH_HOME", Path.home() / ".tvmbench"))
    return home / "boards" / key


def is_provisioned(root: Path) -> bool:
    return (root / ".tvmbench-provisioned").is_file()


def provision_board(key: str, root: Path | None = None, log: Path | None = None) -> Path:
    """Provision the emulated board ``key`` into ``root`` (once; a provisioned root is reused)."""
    kind = EMULATED_BOARDS[key]
    root = root or board_root(key)
    # The script is idempotent (it checks its own pins), so a provisioned root costs one bash start.
    result = subprocess.run(
        ["bash", str(kind.provision_script), str(root)],
        env={**os.environ, "PYTHON": sys.executable},  # this interpreter has pip; a bare python3 may not
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        check=False,
    )
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(result.stdout)
    if result.returncode != 0:
        tail = " | ".join(result.stdout.strip().splitlines()[-3:])
        raise FarmError(f"provisioning board {key} into {root} failed: {tail}")
    return root


def board_command(key: str, tracker: str, host: str, port: int, root: Path | None = None) -> list[str]:
    """The command that runs one board agent for ``key``: natively, or under its emulator."""
    agent_args = ["--tracker", tracker, "--key", key, "--host", host, "--port", str(port)]
    mcu = agent_command(key)  # an emulated microcontroller's key (cortex-m4-emu, ...) gets the MCU agent
    if mcu is not None:
        return [*mcu, *agent_args]
    kind = EMULATED_BOARDS.get(key)
    if kind is None:
        agent = Path(__file__).resolve().parent.parent / "workers" / "board_agent.py"
        return [sys.executable, str(agent), *agent_args]
    if shutil.which(kind.emulator) is None:
        raise FarmError(f"board {key} needs {kind.emulator}: apt-get install {kind.emulator_package}")
    root = root or board_root(key)
    if not is_provisioned(root):
        raise FarmError(
            f"board {key} is not provisioned at {root}: run {kind.provision_script} {root} "
            f"(or `tvmbench farm up --board {key}`, which provisions it)"
        )
    return ["bash", str(kind.launch_script), str(root), *agent_args]


@dataclass
class LocalFarm:
    """A tracker and board agents started by this machine, on loopback unless told otherwise."""

    tracker_port: int
    tracker_pid: int
    host: str = LOOPBACK
    boards: list[BoardProcess] = field(default_factory=list)
    log_dir: str = ""
    board_roots: dict[str, str] = field(default_factory=dict)  # emulated board key -> provisioned root
    die_with_parent: bool = False  # an ephemeral farm dies with the driver that started it, even by SIGKILL

    @property
    def tracker(self) -> str:
        return f"{self.host}:{self.tracker_port}"

    @classmethod
    def start(
        cls,
        log_dir: Path,
        boards: dict[str, int] | None = None,
        host: str = LOOPBACK,
        tracker_port: int | None = None,
        timeout_s: float = 60.0,
        board_roots: dict[str, str] | None = None,
        die_with_parent: bool = False,
    ) -> LocalFarm:
        """Start a tracker and ``boards`` ({key: count}, default one "host" board); wait until registered.

        A key of ``EMULATED_BOARDS`` (such as "arm64-emu") starts that emulated board from its
        provisioned root (``board_roots[key]``, else ``board_root(key)``).
        """
        if host != LOOPBACK:
            warn_exposed("farm", host)
        port = tracker_port or free_port(host)
        proc = _spawn(
            _tracker_cmd(host, port),
            log_dir / "tracker.log",
            die_with_parent=die_with_parent,
        )
        farm = cls(
            tracker_port=port,
            tracker_pid=proc.pid,
            host=host,
            log_dir=str(log_dir),
            board_roots=board_roots or {},
            die_with_parent=die_with_parent,
        )
        try:
            wait_until(
                lambda: tracker_summary(farm.tracker, timeout_s=2) is not None,
                timeout_s,
                f"the tracker on {farm.tracker} (log: {log_dir / 'tracker.log'})",
            )
            for key, count in (boards or {"host": 1}).items():
                for _ in range(count):
                    farm.add_board(key, wait=False)
            emulated = any(k in EMULATED_BOARDS for k in boards or {})
            farm.wait_for_boards(max(timeout_s, EMULATED_BOARD_START_S) if emulated else timeout_s)
        except BaseException:
            farm.stop()
            raise
        return farm

    def restart_tracker(self, timeout_s: float = 60.0) -> None:
        """Stop the tracker and start a new one on the same port (boards re-register by themselves)."""
        stop_pid(self.tracker_pid)
        proc = _spawn(
            _tracker_cmd(self.host, self.tracker_port),
            Path(self.log_dir) / "tracker.log",
            die_with_parent=self.die_with_parent,
        )
        self.tracker_pid = proc.pid
        wait_until(lambda: tracker_summary(self.tracker, timeout_s=2) is not None, timeout_s, f"tracker {self.tracker}")

    def add_board(self, key: str = "host", *, wait: bool = True, timeout_s: float = 60.0) -> BoardProcess:
        """Start one board agent on this machine registered under ``key``."""
        port = free_port(self.host)
        root = self.board_roots.get(key)
        cmd = board_command(key, self.tracker, self.host, port, Path(root) if root else None)
        proc = _spawn(cmd, Path(self.log_dir) / f"board-{key}-{port}.log", die_with_parent=self.die_with_parent)
        board = BoardProcess(key=key, port=port, pid=proc.pid)
        self.boards.append(board)
        if wait:
            self.wait_for_boards(max(timeout_s, EMULATED_BOARD_START_S) if key in EMULATED_BOARDS else timeout_s)
        return board

    def wait_for_boards(self, timeout_s: float = 60.0) -> None:
        want: dict[str, int] = {}
        for b in self.boards:
            want[b.key] = want.get(b.key, 0) + 1

        def registered() -> bool:
            have = registered_keys(tracker_summary(self.tracker, timeout_s=2))
            return all(have.get(k, 0) >= n for k, n in want.items())

        wait_until(registered, timeout_s, f"boards {want} to register with {self.tracker} (logs in {self.log_dir})")

    def stop(self) -> None:
        for board in self.boards:
            stop_pid(board.pid)
        stop_pid(self.tracker_pid)

    def to_json(self) -> dict[str, Any]:
        return {
            "tracker": self.tracker,
            "managed": True,
            "tracker_pid": self.tracker_pid,
            "host": self.host,
            "tracker_port": self.tracker_port,
            "log_dir": self.log_dir,
            "boards": [b.__dict__ for b in self.boards],
            "board_roots": self.board_roots,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LocalFarm:
        return cls(
            tracker_port=data["tracker_port"],
            tracker_pid=data["tracker_pid"],
            host=data["host"],
            log_dir=data["log_dir"],
            boards=[BoardProcess(**b) for b in data["boards"]],
            board_roots=data.get("board_roots", {}),
        )


def state_file(home: Path) -> Path:
    return home / "farm.json"


def read_state(home: Path) -> dict[str, Any] | None:
    try:
        return json.loads(state_file(home).read_text())
    except FileNotFoundError:
        return None


def write_state(home: Path, data: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    state_file(home).write_text(json.dumps(data, indent=2))


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
    try:
        summary = tracker_summary(tracker, timeout_s=5)
    except OSError as exc:
        raise FarmError(
            f"no TVM RPC tracker answers at {tracker} ({exc}); check the address and that "
            "`python -m tvm.exec.rpc_tracker` runs there"
        ) from None
    write_state(home, {"tracker": tracker, "managed": False})
    return summary


def down(home: Path) -> str | None:
    """Stop the farm `farm up` started (or forget a connected one); returns its tracker address."""
    state = read_state(home)
    if state is None:
        return None
    if state.get("managed"):
        LocalFarm.from_json(state).stop()
    state_file(home).unlink(missing_ok=True)
    return state["tracker"]


def board_rows(tracker: str) -> list[dict[str, Any]]:
    """Boards registered with the tracker, one dict each (key, address), plus per-key queue counts."""
    summary = tracker_summary(tracker)
    queues = summary.get("queue_info", {})
    rows = []
    for server in summary.get("server_info", []):
        key = str(server.get("key", "")).removeprefix("server:")
        host, port = server.get("addr", ["?", "?"])
        q = queues.get(key, {})
        rows.append(
            {
                "board": f"{key}@{host}:{port}",
                "key": key,
                "free_in_key": q.get("free", 0),
                "pending_in_key": q.get("pending", 0),
            }
        )
    return rows


def live_board_facts(tracker: str, deadline_s: float = 5.0) -> dict[str, dict[str, Any] | None]:
    """Ask every free board for its facts: {board id: facts, or None for a stock RPC server}.

    The tracker hands out a board per request, not a named one, so for a key with N free boards N
    sessions are held open at once, which reaches each board once. A board busy with a sweep is not
    waited for (it is simply missing from the answer).
    """
    summary = tracker_summary(tracker)
    facts: dict[str, dict[str, Any] | None] = {}
    for key, queue in summary.get("queue_info", {}).items():
        sessions = []
        try:
            for _ in range(int(queue.get("free", 0))):
                try:
                    session = request_session(tracker, key, deadline_s, session_timeout_s=30)
                except (DeviceUnavailable, OSError, RuntimeError):
                    break
                sessions.append(session)
                facts[session.board_id] = board_facts(session.remote)
        finally:
            sessions.clear()  # dropping the sessions frees the boards
    return facts


def board_list(tracker: str, known: dict[str, Any], live: bool = True) -> list[dict[str, Any]]:
    """`farm list`: every board the tracker knows, merged with what the database knows of it.

    ``known`` maps board id -> its database row (state, facts, arch, emulated). With ``live``, free
    boards are asked for their facts now; a board that does not answer is in use (busy).
    """
    rows = board_rows(tracker)
    try:
        fresh = live_board_facts(tracker) if live else {}
    except OSError:
        fresh = {}
    for row in rows:
        board = known.get(row["board"])
        facts = fresh.get(row["board"]) or (board.facts if board else None) or {}
        health = board.state if board else "new"
        # Answered now: free (or its recorded health if that is bad); not answered: in use.
        answered = "free" if health in ("new", "ok") else health
        state = answered if row["board"] in fresh else ("busy" if live else health)
        row.update(
            {
                "state": state,
                "agent": "tvmbench" if facts else ("stock" if row["board"] in fresh else None),
                "arch": facts.get("arch") or (board.arch if board else None),
                "emulated": facts.get("emulated", board.emulated if board else None),
                "cpu": facts.get("cpu_model"),
                "cores": facts.get("cores"),
                "mem_mb": facts.get("mem_total_mb"),
                "os": facts.get("os"),
                "tvm": facts.get("tvm_version"),
                "failures_in_a_row": board.consecutive_failures if board else 0,  # toward quarantine
                "facts": facts or None,
            }
        )
    return rows


def known_board_rows(known_boards: list[Any]) -> list[dict[str, Any]]:
    """Every board the results database has seen (``answers.query.boards``): key, health, facts."""
    rows = []
    for board in known_boards:
        facts = board.facts or {}
        rows.append(
            {
                "board": board.id,
                "key": board.key,
                "arch": board.arch,
                "emulated": board.emulated,
                "health": board.state,
                "failures_in_a_row": board.consecutive_failures,  # QUARANTINE_AFTER in a row quarantine it
                "last_seen": board.last_seen.isoformat() if board.last_seen else None,
                "cpu": facts.get("cpu_model"),
                "cores": facts.get("cores"),
                "mem_mb": facts.get("mem_total_mb"),
                "os": facts.get("os"),
                "tvm": facts.get("tvm_version"),
                "facts": facts or None,
            }
        )
    return rows


# --- provisioning and local farms -------------------------------------------------------------------

Note = Callable[[str], None]  # how a long step tells the user what it is doing (the CLI prints it dimmed)


def provision_boards(home: Path, keys: list[str], note: Note = lambda _msg: None) -> dict[str, str]:
    """Provision each emulated board of ``keys`` (once; a provisioned root is reused): {key: root}.

    FarmError names a key this machine cannot emulate, or a provisioning that failed.
    """
    roots: dict[str, str] = {}
    for key in keys:
        if key not in EMULATED_BOARDS:
            raise FarmError(
                f"--board {key!r} is not a board this machine can emulate; use one of: {', '.join(EMULATED_BOARDS)}"
            )
        root = board_root(key)
        if not is_provisioned(root):
            note(f"provisioning board {key} into {root} (once; about a minute)")
        roots[key] = str(provision_board(key, root, log=home / "logs" / f"provision-{key}.log"))
    return roots


def up(
    home: Path,
    boards: dict[str, int],
    emulated: list[str],
    *,
    host: str = LOOPBACK,
    port: int | None = None,
    note: Note = lambda _msg: None,
) -> LocalFarm:
    """`farm up`: a local farm that stays up until `farm down`, recorded in TVMBENCH_HOME/farm.json.

    ``boards`` are native board agents by key; ``emulated`` adds one emulated board per entry.
    """
    state = read_state(home)
    if state:
        raise FarmError(f"a farm is already configured at {state['tracker']}; run `tvmbench farm down` first")
    wanted = {k: n for k, n in boards.items() if n}
    roots = provision_boards(home, list(dict.fromkeys(emulated)), note)
    for key in emulated:
        wanted[key] = wanted.get(key, 0) + 1
    if not wanted:
        raise FarmError("no boards asked for: give --boards N and/or --board KIND")
    local = LocalFarm.start(home / "logs" / "farm", wanted, host=host, tracker_port=port, board_roots=roots)
    write_state(home, local.to_json())
    return local


def add(home: Path, key: str = "host") -> tuple[LocalFarm, BoardProcess]:
    """`farm add`: one more board agent in the farm `farm up` started."""
    state = read_state(home)
    if not state or not state.get("managed"):
        raise FarmError("no local farm is up; run `tvmbench farm up` first")
    local = LocalFarm.from_json(state)
    board = local.add_board(key)
    write_state(home, local.to_json())
    return local, board


def _pid_files(home: Path) -> Path:
    return home / "run"


def reap_stale_farms(home: Path) -> None:
    """Stop ephemeral farms whose driver died (a pid file left in TVMBENCH_HOME/run)."""
    for pid_file in _pid_files(home).glob("ephemeral-farm-*.json"):
        try:
            data = json.loads(pid_file.read_text())
            os.kill(int(data["driver_pid"]), 0)
            continue  # that driver is alive: its farm is in use
        except ProcessLookupError:
            LocalFarm.from_json(data["farm"]).stop()
        except (OSError, ValueError, KeyError):
            pass
        pid_file.unlink(missing_ok=True)


@contextmanager
def farm_for_run(
    home: Path, tracker: str | None, boards: int, board_keys: set[str] | None = None, note: Note = lambda _m: None
) -> Iterator[str]:
    """The tracker to run a sweep against: ``tracker``, the configured farm, or an ephemeral local one.

    The ephemeral farm (stopped afterwards) starts ``boards`` host boards and one board for each key of
    ``board_keys`` this machine can emulate (an aarch64 board under qemu, provisioned the first time; a
    Cortex-M under QEMU). Its processes die with this driver even on SIGKILL (PR_SET_PDEATHSIG), and are
    recorded in a pid file so that the next run or resume stops anything a killed driver left behind.
    """
    address = tracker or configured_tracker(home)
    if address:
        yield address
        return
    reap_stale_farms(home)
    keys = board_keys or set()
    wanted: dict[str, int] = {"host": boards}
    roots = provision_boards(home, sorted(keys & set(EMULATED_BOARDS)), note)
    wanted.update(dict.fromkeys(roots, 1))
    wanted.update(dict.fromkeys(sorted(k for k in keys if agent_command(k) is not None), 1))
    described = ", ".join(f"{n} {k}" for k, n in wanted.items())
    note(f"no farm configured: starting a local tracker and board(s) {described} on 127.0.0.1")
    local = LocalFarm.start(home / "logs" / "ephemeral-farm", wanted, board_roots=roots, die_with_parent=True)
    pid_file = _pid_files(home) / f"ephemeral-farm-{os.getpid()}.json"
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(json.dumps({"driver_pid": os.getpid(), "farm": local.to_json()}))
    try:
        yield local.tracker
    finally:
        local.stop()
        pid_file.unlink(missing_ok=True)
