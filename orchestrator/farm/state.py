"""The farm this machine uses, recorded in TVMBENCH_HOME/farm.json: one `farm up` started or `farm connect` named."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orchestrator.farm.errors import FarmError
from orchestrator.farm.local import BoardProcess, LocalFarm
from orchestrator.farm.network import LOOPBACK
from orchestrator.farm.provisioning import Note, provision_boards
from workers.toolchains.toolchain import Toolchain
from workers.tracker_client import parse_addr, tracker_summary


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
    """
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
    write_state(home, local.to_json())
    return local


def add(home: Path, key: str = "host", toolchain: Toolchain | None = None) -> tuple[LocalFarm, BoardProcess]:
    """`farm add`: one more board agent in the farm `farm up` started (of ``toolchain``'s release if given)."""
    state = read_state(home)
    if not state or not state.get("managed"):
        raise FarmError("no local farm is up; run `tvmbench farm up` first")
    local = LocalFarm.from_json(state)
    board = local.add_board(key, toolchain=toolchain)
    write_state(home, local.to_json())
    return local, board
