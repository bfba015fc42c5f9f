"""Cortex-M boards the AOT backend builds firmware for (their entries are board kinds: workers/board_kinds.py)."""

from __future__ import annotations

from typing import Any

from workers.board_kinds import KINDS, McuBoard

__all__ = ["BOARDS", "McuBoard", "board_for_target", "is_mcu_target", "target_dict"]

BOARDS: dict[str, McuBoard] = {k.name: k.mcu for k in KINDS.values() if k.mcu is not None}


def board_for_target(tvm_target: dict[str, Any]) -> McuBoard:
    """The board a target dict (``{"kind": "c", "mcpu": "cortex-m4", ...}``) names through its mcpu."""
    cpu = tvm_target.get("mcpu") or tvm_target.get("board")
    for board in BOARDS.values():
        if cpu in (board.cpu, board.name):
            return board
    raise KeyError(f"no Cortex-M board for mcpu {cpu!r}; known: {', '.join(sorted(BOARDS))}")


def is_mcu_target(tvm_target: dict[str, Any]) -> bool:
    """Whether a target dict names one of these boards (built by the aot-c executor, not the Relax VM)."""
    return tvm_target.get("kind") == "c" and any(tvm_target.get("mcpu") == b.cpu for b in BOARDS.values())


def target_dict(board: McuBoard) -> dict[str, Any]:
    """The sweep-file target of a board: TVM's C target naming the core."""
    return {"kind": "c", "mcpu": board.cpu}
