"""A local farm: a TVM RPC tracker and board agents started by this machine, on loopback unless told otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.farm.errors import wait_until
from orchestrator.farm.network import LOOPBACK, free_port, warn_exposed
from orchestrator.farm.processes import _spawn, _tracker_cmd, stop_pid
from orchestrator.farm.provisioning import EMULATED_BOARD_START_S, EMULATED_BOARDS, board_command
from workers.tracker_client import registered_keys, tracker_summary


@dataclass
class BoardProcess:
    key: str
    port: int
    pid: int


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
