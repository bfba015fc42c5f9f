"""A local farm: a TVM RPC tracker and board agents started by this machine, on loopback unless told otherwise."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.farm.errors import FarmError, wait_until
from orchestrator.farm.network import LOOPBACK, free_port, warn_exposed
from orchestrator.farm.processes import _spawn, _tracker_cmd, stop_pid
from orchestrator.farm.provisioning import EMULATED_BOARD_START_S, EMULATED_BOARDS, board_command, board_root
from tvmbench.core.liveness import pid_alive
from workers.board_kinds import kind_for_key
from workers.toolchains import registry
from workers.toolchains.boards import release_key
from workers.toolchains.probe import PROJECT_ROOT, child_env
from workers.toolchains.toolchain import Toolchain
from workers.tracker_client import registered_keys, tracker_summary


def _board_log_name(key: str, port: int) -> str:
    """board-KEY-PORT.log, KEY reduced to a plain file name: whatever the key, the log stays in the log folder."""
    # The CLI and sweep files check keys already; this holds for any caller: no '/', no '..' of its own (the
    # "board-" prefix), no control character, and short enough for any file system's 255-byte names.
    return f"board-{re.sub(r'[^A-Za-z0-9._+-]', '_', key)[:100]}-{port}.log"


def _last_line(log: Path) -> str:
    """The last non-blank line of ``log`` (what a process that died said last), or a note that there is none."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    return lines[-1][:300] if lines else "it wrote nothing"


@dataclass
class BoardProcess:
    """One board agent this farm started: ``key`` is the tracker key it registered under (a release's
    boards register under ``release_key``); ``tvm_version`` and ``toolchain`` say which runtime it runs
    (None: the installed one, the interpreter tvmbench runs on)."""

    key: str
    port: int
    pid: int
    tvm_version: str | None = None
    toolchain: str | None = None


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
        toolchains: Sequence[Toolchain] | None = None,
    ) -> LocalFarm:
        """Start a tracker and ``boards`` ({key: count}, default one "host" board); wait until registered.

        A key of ``EMULATED_BOARDS`` (such as "arm64-emu") starts that emulated board from its
        provisioned root (``board_roots[key]``, else ``board_root(key)``). With ``toolchains``, the
        native boards are started once per toolchain, each under that toolchain's interpreter and
        registered under its release's key (one host board per release: ``boards={"host": 1}``); include
        ``toolchain.installed()`` to also have boards of the installed release. Emulated Linux boards too,
        each from its release's root (``board_roots`` by tracker key); MCUs run the installed release only.
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
            farm._wait_for_tracker(proc, timeout_s)
            for key, count in (boards or {"host": 1}).items():
                # Native agents run under each toolchain; an emulated Linux board from each release's root.
                per_release = (kind := kind_for_key(key)) is None or kind.agent in ("native", "qemu-user")
                runtimes: Sequence[Toolchain | None] = toolchains if toolchains is not None and per_release else [None]
                for runtime in runtimes:
                    for _ in range(count):
                        farm.add_board(key, wait=False, toolchain=runtime)
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
        self._wait_for_tracker(proc, timeout_s)

    def _wait_for_tracker(self, proc: subprocess.Popen, timeout_s: float) -> None:
        """Wait until our tracker answers; FarmError at once, with its log's last line, if it exits first."""
        log = Path(self.log_dir) / "tracker.log"
        # Its process is asked first: a tracker that could not bind exits at once, and whatever else listens
        # on the port (a database) must not be polled for a minute as if it were the tracker starting up.
        wait_until(
            lambda: proc.poll() is not None or tracker_summary(self.tracker, timeout_s=2) is not None,
            timeout_s,
            f"the tracker on {self.tracker} (log: {log})",
        )
        if proc.poll() is not None:
            raise FarmError(
                f"the tracker on {self.tracker} exited at once (status {proc.returncode}): {_last_line(log)} "
                f"(log: {log})"
            )

    def add_board(
        self, key: str = "host", *, wait: bool = True, timeout_s: float = 60.0, toolchain: Toolchain | None = None
    ) -> BoardProcess:
        """Start one board agent on this machine registered under ``key``.

        With ``toolchain``, the agent runs under that toolchain's interpreter (its TVM runtime, none of
        this process's paths: ``probe.child_env``) from the project root, and registers under
        ``release_key(key, toolchain.tvm_version)``, where only jobs of that release look for boards. An
        emulated board of a release runs from that release's root (``board_roots[tracker key]``, else
        ``board_root(tracker key)``; ``provision_boards`` with ``tvm_versions`` provisions it).
        """
        port = free_port(self.host)
        version = toolchain.tvm_version if toolchain is not None else None
        tracker_key = release_key(key, version)
        root = self.board_roots.get(tracker_key)
        env: dict[str, str] | None = None
        cwd: Path | None = None
        if tracker_key == key:  # the installed release (or none named): the agent as before, this interpreter
            cmd = board_command(key, self.tracker, self.host, port, Path(root) if root else None)
        elif key in EMULATED_BOARDS:  # the emulator runs the release its own root was provisioned with
            release_root = Path(root) if root else board_root(tracker_key)
            cmd = board_command(key, self.tracker, self.host, port, release_root, tracker_key=tracker_key)
        else:
            assert toolchain is not None
            hold = registry.lock_file(toolchain.name)  # `toolchains remove` refuses while the agent runs
            cmd = board_command(
                key, self.tracker, self.host, port, None, python=toolchain.python, tracker_key=tracker_key, hold=hold
            )
            env, cwd = child_env(toolchain.pythonpath), PROJECT_ROOT
        log = Path(self.log_dir) / _board_log_name(tracker_key, port)
        proc = _spawn(cmd, log, env=env, die_with_parent=self.die_with_parent, cwd=cwd)
        board = BoardProcess(
            key=tracker_key,
            port=port,
            pid=proc.pid,
            tvm_version=version if tracker_key != key else None,
            toolchain=toolchain.name if toolchain is not None and tracker_key != key else None,
        )
        self.boards.append(board)
        if wait:
            self.wait_for_boards(max(timeout_s, EMULATED_BOARD_START_S) if key in EMULATED_BOARDS else timeout_s)
        return board

    def wait_for_boards(self, timeout_s: float = 60.0) -> None:
        """Wait until every running board agent of this farm is registered with its tracker.

        A board whose process is gone (killed, crashed since an earlier command) is not waited for: a dead
        board made every later `farm add` wait out its timeout and then blame the new board.
        """
        want: dict[str, int] = {}
        for b in self.boards:
            if pid_alive(b.pid):
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
