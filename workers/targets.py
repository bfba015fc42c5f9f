"""Target presets: a name a sweep file can use for a TVM target, its cross compiler and its board key."""

from __future__ import annotations

import platform
from typing import Any

from workers.records import TargetSpec

_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def host_arch() -> str:
    """The machine name of this host, normalised like ``uname -m`` on Linux."""
    machine = platform.machine().lower()
    return _MACHINE_ALIASES.get(machine, machine)


PRESETS: dict[str, TargetSpec] = {
    p.name: p
    for p in (
        TargetSpec(name="host", tvm_target={"kind": "llvm"}, board_key="host", arch=host_arch()),
        TargetSpec(
            name="rpi4",
            tvm_target={"tag": "raspberry-pi/4b-aarch64"},
            board_key="rpi4",
            arch="aarch64",
            cross_compiler="aarch64-linux-gnu-gcc",
            cross_compiler_package="gcc-aarch64-linux-gnu",
        ),
        TargetSpec(
            name="arm64-emu",
            tvm_target={"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]},
            board_key="arm64-emu",
            arch="aarch64",
            cross_compiler="aarch64-linux-gnu-gcc",
            cross_compiler_package="gcc-aarch64-linux-gnu",
            emulated=True,
        ),
    )
}


def _mcu_presets() -> dict[str, TargetSpec]:
    """Emulated Cortex-M boards (executor aot-c): firmware built with arm-none-eabi-gcc, run under QEMU."""
    from workers.aot.boards import BOARDS, target_dict

    return {
        b.name: TargetSpec(
            name=b.name,
            tvm_target=target_dict(b),
            board_key=b.board_key,
            arch=b.cpu,
            cross_compiler="arm-none-eabi-gcc",
            cross_compiler_package="gcc-arm-none-eabi libnewlib-arm-none-eabi",
            emulated=True,
        )
        for b in BOARDS.values()
    }


PRESETS.update(_mcu_presets())


def resolve_target(name: str, table: dict[str, Any] | None = None) -> TargetSpec:
    """A preset by name, or a user-defined target from its sweep-file table.

    ``table`` holds ``target`` (TVM target dict), ``board_key``, ``arch`` and optionally
    ``cross_compiler``/``emulated``; keys given there override the preset's of the same name.
    """
    base = PRESETS.get(name)
    if table is None:
        if base is None:
            raise KeyError(name)
        return base
    fields: dict[str, Any] = {} if base is None else dict(base.__dict__)
    fields["name"] = name
    if "target" in table:
        fields["tvm_target"] = table["target"]
    for key in ("board_key", "arch", "cross_compiler", "emulated"):
        if key in table:
            fields[key] = table[key]
    fields.setdefault("board_key", name)
    return TargetSpec(**fields)
