"""Target presets: a name a sweep file can use for a TVM target, its cross compiler and its board key."""

from __future__ import annotations

import platform
from typing import Any

from core.records import TargetSpec
from workers.aot.boards import BOARDS, target_dict

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
            cross_compiler_package="gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
        ),
        TargetSpec(
            name="arm64-emu",
            tvm_target={"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]},
            board_key="arm64-emu",
            arch="aarch64",
            cross_compiler="aarch64-linux-gnu-gcc",
            cross_compiler_package="gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
            emulated=True,
        ),
        # 32-bit hard-float Linux (Raspberry Pi 2/3 on Raspberry Pi OS 32-bit, BeagleBone, i.MX6...).
        # Without "mfloat-abi": "hard" LLVM emits soft-float calls and arm-linux-gnueabihf-gcc refuses
        # to link them ("uses VFP register arguments").
        TargetSpec(
            name="rpi3",
            tvm_target={
                "kind": "llvm",
                "mtriple": "armv7l-linux-gnueabihf",
                "mcpu": "cortex-a53",
                "mattr": ["+neon"],
                "mfloat-abi": "hard",
                "num-cores": 4,
            },
            board_key="rpi3",
            arch="armv7l",
            cross_compiler="arm-linux-gnueabihf-gcc",
            cross_compiler_package="gcc-arm-linux-gnueabihf libc6-dev-armhf-cross",
        ),
        TargetSpec(
            name="armv7",
            tvm_target={"kind": "llvm", "mtriple": "armv7l-linux-gnueabihf", "mattr": ["+neon"], "mfloat-abi": "hard"},
            board_key="armv7",
            arch="armv7l",
            cross_compiler="arm-linux-gnueabihf-gcc",
            cross_compiler_package="gcc-arm-linux-gnueabihf libc6-dev-armhf-cross",
        ),
        # RV64GC Linux boards (SiFive U74: VisionFive 2, HiFive Unmatched); lp64d matches Debian's ABI.
        TargetSpec(
            name="riscv64",
            tvm_target={
                "kind": "llvm",
                "mtriple": "riscv64-linux-gnu",
                "mcpu": "sifive-u74",
                "mattr": ["+64bit", "+m", "+a", "+f", "+d", "+c"],
                "mabi": "lp64d",
            },
            board_key="riscv64",
            arch="riscv64",
            cross_compiler="riscv64-linux-gnu-gcc",
            cross_compiler_package="gcc-riscv64-linux-gnu libc6-dev-riscv64-cross",
        ),
        # Jetson AGX Orin: CUDA kernels for sm_87, host code for its Cortex-A78AE cores. The .so
        # carries CUDA C source that the board compiles on load (nvrtc), so no nvcc is needed here.
        TargetSpec(
            name="jetson-orin",
            tvm_target={"tag": "nvidia/jetson-agx-orin-64gb"},
            board_key="jetson-orin",
            arch="aarch64",
            cross_compiler="aarch64-linux-gnu-gcc",
            cross_compiler_package="gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
        ),
        # An A100-class GPU server of this machine's architecture; builds here with no GPU.
        TargetSpec(
            name="cuda-sm80",
            tvm_target={"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}},
            board_key="cuda-sm80",
            arch=host_arch(),
        ),
    )
}


def _mcu_presets() -> dict[str, TargetSpec]:
    """Emulated Cortex-M boards (executor aot-c): firmware built with arm-none-eabi-gcc, run under QEMU."""
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


def target_kind(tvm_target: dict[str, Any]) -> str:
    """The TVM target kind ("llvm", "cuda", ...) of a dict or {"tag": name} target."""
    if "kind" in tvm_target:
        return str(tvm_target["kind"])
    if "tag" in tvm_target:
        from tvm.target import Target

        return str(Target(tvm_target["tag"]).kind.name)
    return "llvm"


def presets_for(arch: str | None, board_key: str | None = None) -> list[str]:
    """Preset names that build for ``arch``; a preset whose board key is ``board_key`` comes first."""
    names = [p.name for p in PRESETS.values() if arch and p.arch == arch]
    names.sort(key=lambda n: PRESETS[n].board_key != board_key)
    return names


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
