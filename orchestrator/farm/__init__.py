"""The device farm: a TVM RPC tracker and the boards registered with it.

A local farm is a real tracker and real board-agent processes on 127.0.0.1. ``farm up`` keeps one
running between commands (its state in TVMBENCH_HOME/farm.json); ``farm connect`` points tvmbench at an
existing tracker; ``sweep run`` with neither starts an ephemeral local farm and stops it afterwards.

One module a job: ``network`` (loopback, free ports, the exposure warning), ``errors`` (FarmError, the
deadline poll), ``processes`` (spawn, stop, die with the parent, pid files, reaping), ``provisioning``
(board commands, emulated boards' roots), ``local`` (LocalFarm), ``state`` (farm.json: up, add, connect,
down), ``ephemeral`` (the farm a sweep runs against) and ``boards_view`` (`farm list`). Every name is
also here, so ``from orchestrator import farm; farm.X`` reads as before the split; each loads on first
use (PEP 562), so that the CLI's help and the dashboard's loopback check do not start TVM's RPC client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.farm.boards_view import board_list, board_rows, known_board_rows, live_board_facts
    from orchestrator.farm.ephemeral import farm_for_run
    from orchestrator.farm.errors import FarmError, wait_until
    from orchestrator.farm.local import BoardProcess, LocalFarm
    from orchestrator.farm.network import (
        LOOPBACK,
        RPC_WARNING,
        free_port,
        free_ports,
        is_loopback,
        listen,
        warn_exposed,
    )
    from orchestrator.farm.processes import reap_stale_farms, stop_pid, stop_recorded_farm, write_pid_file
    from orchestrator.farm.provisioning import (
        EMULATED_BOARD_START_S,
        EMULATED_BOARDS,
        INFRA_DIR,
        Note,
        board_command,
        board_root,
        is_provisioned,
        provision_board,
        provision_boards,
    )
    from orchestrator.farm.state import add, configured_tracker, connect, down, read_state, state_file, up, write_state

_WHERE: dict[str, str] = {
    "BoardProcess": "local",
    "EMULATED_BOARDS": "provisioning",
    "EMULATED_BOARD_START_S": "provisioning",
    "FarmError": "errors",
    "INFRA_DIR": "provisioning",
    "LOOPBACK": "network",
    "LocalFarm": "local",
    "Note": "provisioning",
    "RPC_WARNING": "network",
    "add": "state",
    "board_command": "provisioning",
    "board_list": "boards_view",
    "board_root": "provisioning",
    "board_rows": "boards_view",
    "configured_tracker": "state",
    "connect": "state",
    "down": "state",
    "farm_for_run": "ephemeral",
    "free_port": "network",
    "free_ports": "network",
    "is_loopback": "network",
    "is_provisioned": "provisioning",
    "known_board_rows": "boards_view",
    "listen": "network",
    "live_board_facts": "boards_view",
    "provision_board": "provisioning",
    "provision_boards": "provisioning",
    "read_state": "state",
    "reap_stale_farms": "processes",
    "state_file": "state",
    "stop_pid": "processes",
    "stop_recorded_farm": "processes",
    "up": "state",
    "wait_until": "errors",
    "warn_exposed": "network",
    "write_pid_file": "processes",
    "write_state": "state",
}
__all__ = [
    "EMULATED_BOARDS",
    "EMULATED_BOARD_START_S",
    "INFRA_DIR",
    "LOOPBACK",
    "RPC_WARNING",
    "BoardProcess",
    "FarmError",
    "LocalFarm",
    "Note",
    "add",
    "board_command",
    "board_list",
    "board_root",
    "board_rows",
    "configured_tracker",
    "connect",
    "down",
    "farm_for_run",
    "free_port",
    "free_ports",
    "is_loopback",
    "is_provisioned",
    "known_board_rows",
    "listen",
    "live_board_facts",
    "provision_board",
    "provision_boards",
    "read_state",
    "reap_stale_farms",
    "state_file",
    "stop_pid",
    "stop_recorded_farm",
    "up",
    "wait_until",
    "warn_exposed",
    "write_pid_file",
    "write_state",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'orchestrator.farm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"orchestrator.farm.{where}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value
