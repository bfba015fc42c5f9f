"""Cortex-M boards the AOT backend builds firmware for: compiler flags, LLVM target, memory, QEMU machine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class McuBoard:
    name: str  # the target preset name, e.g. "cortex-m4"
    cpu: str
    qemu_machine: str
    board_key: str  # tracker key of the emulated board
    gcc_flags: tuple[str, ...]
    llvm_target: dict[str, Any]
    flash_origin: int
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    systick_hz: int  # SysTick's processor clock in the QEMU machine
    has_fpu: bool


# mps2-an385/an386: 4 MB of code memory at 0x0 and 4 MB of RAM at 0x20000000; SysTick runs at 25 MHz.
# Under `-icount shift=0` one guest instruction takes 1 ns of virtual time, so one tick is 40 instructions.
BOARDS: dict[str, McuBoard] = {
    b.name: b
    for b in (
        McuBoard(
            name="cortex-m4",
            cpu="cortex-m4",
            qemu_machine="mps2-an386",
            board_key="cortex-m4-emu",
            gcc_flags=("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"),
            llvm_target={
                "kind": "llvm",
                "mtriple": "thumbv7em-none-eabihf",
                "mcpu": "cortex-m4",
                "mattr": ["+vfp4d16sp"],
                "mfloat-abi": "hard",
            },
            flash_origin=0x00000000,
            flash_bytes=4 << 20,
            ram_origin=0x20000000,
            ram_bytes=4 << 20,
            systick_hz=25_000_000,
            has_fpu=True,
        ),
        McuBoard(
            name="cortex-m3",
            cpu="cortex-m3",
            qemu_machine="mps2-an385",
            board_key="cortex-m3-emu",
            gcc_flags=("-mcpu=cortex-m3", "-mthumb", "-mfloat-abi=soft"),
            llvm_target={"kind": "llvm", "mtriple": "thumbv7m-none-eabi", "mcpu": "cortex-m3", "mfloat-abi": "soft"},
            flash_origin=0x00000000,
            flash_bytes=4 << 20,
            ram_origin=0x20000000,
            ram_bytes=4 << 20,
            systick_hz=25_000_000,
            has_fpu=False,
        ),
    )
}


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
