"""Every kind of board tvmbench knows, in one place: a new board kind is one entry of ``KINDS``.

An entry says what a sweep file's preset of that name builds (its ``TargetSpec``: TVM target, cross
compiler, board key, architecture, emulated or not), whether it is a Linux board or a microcontroller,
and how its agent starts: ``native`` (workers/board_agent.py, on the board itself or on this machine),
``qemu-user`` (infra/farm/<key>/launch.sh runs the agent under a qemu user-mode emulator in a root that
infra/farm/<key>/provision.sh sets up) or ``mcu`` (workers/mcu_agent.py, driving a QEMU Cortex-M machine).
workers.targets (the presets), workers.aot.boards (the firmware boards) and orchestrator.farm (which
boards this machine can start and provision) all read it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from tvmbench.core.records import TargetSpec
from workers.host_cpu import host_arch, host_target

INFRA_DIR = Path(__file__).resolve().parent.parent / "infra" / "farm"
BOARD_AGENT = Path(__file__).resolve().parent / "board_agent.py"

Agent = Literal["native", "qemu-user", "mcu"]


@dataclass(frozen=True)
class McuBoard:
    """A Cortex-M board the AOT backend builds firmware for: compiler flags, LLVM target, memory, QEMU machine."""

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


@dataclass(frozen=True)
class BoardKind:
    """One kind of board: what its preset builds (the TargetSpec fields) and how its agent starts."""

    name: str  # the preset name a sweep file uses
    key: str  # the tracker key its boards register under
    arch: str  # the machine an artifact must run on (`uname -m`; the core of a microcontroller)
    # TVM target dict or {"tag": ...}; a function is asked on first use (the host's CPU: a cached file, or TVM)
    tvm_target: dict[str, Any] | Callable[[], dict[str, Any]]
    cross_compiler: str | None = None
    cross_compiler_package: str | None = None  # Debian packages (space-separated): compiler and its libc
    emulated: bool = False  # timings come from an emulator and say nothing about real speed
    agent: Agent = "native"
    emulator: str | None = None  # qemu-user: the qemu binary the launcher needs
    emulator_package: str | None = None  # qemu-user: the Debian package providing it
    mcu: McuBoard | None = None  # mcu: the firmware board

    @cached_property
    def target(self) -> TargetSpec:
        """The preset of this kind (workers.targets.PRESETS[name])."""
        tvm_target = self.tvm_target() if callable(self.tvm_target) else self.tvm_target
        return TargetSpec(
            name=self.name,
            tvm_target=tvm_target,
            board_key=self.key,
            arch=self.arch,
            cross_compiler=self.cross_compiler,
            cross_compiler_package=self.cross_compiler_package,
            emulated=self.emulated,
        )

    @property
    def platform(self) -> Literal["linux", "mcu"]:
        return "mcu" if self.mcu is not None else "linux"

    @property
    def provisioned(self) -> bool:
        """Whether this machine runs it from a root that infra/farm/<key>/provision.sh sets up."""
        return self.agent == "qemu-user"

    @property
    def provision_script(self) -> Path:
        return INFRA_DIR / self.key / "provision.sh"

    @property
    def launch_script(self) -> Path:
        return INFRA_DIR / self.key / "launch.sh"

    def agent_command(self, agent_args: list[str], root: Path | None = None, python: str = sys.executable) -> list[str]:
        """The command that runs one agent of this kind with ``agent_args`` (--tracker, --key, ...).

        ``root`` is the provisioned root of a ``qemu-user`` kind; the caller checks that it is provisioned.
        """
        if self.agent == "mcu":
            return [python, "-m", "workers.mcu_agent", "--board", self.name, *agent_args]
        if self.agent == "qemu-user":
            if root is None:
                raise ValueError(f"board {self.key} runs from a provisioned root; none given")
            return ["bash", str(self.launch_script), str(root), *agent_args]
        return [python, str(BOARD_AGENT), *agent_args]


_ARM64_GCC = {
    "cross_compiler": "aarch64-linux-gnu-gcc",
    "cross_compiler_package": "gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
}
_ARMHF_GCC = {
    "cross_compiler": "arm-linux-gnueabihf-gcc",
    "cross_compiler_package": "gcc-arm-linux-gnueabihf libc6-dev-armhf-cross",
}
_RISCV64_GCC = {
    "cross_compiler": "riscv64-linux-gnu-gcc",
    "cross_compiler_package": "gcc-riscv64-linux-gnu libc6-dev-riscv64-cross",
}
_CORTEX_M_GCC = {
    "cross_compiler": "arm-none-eabi-gcc",
    "cross_compiler_package": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
}


def _mcu(board: McuBoard) -> BoardKind:
    """An emulated Cortex-M board (executor aot-c): firmware built with arm-none-eabi-gcc, run under QEMU."""
    return BoardKind(
        name=board.name,
        key=board.board_key,
        arch=board.cpu,
        tvm_target={"kind": "c", "mcpu": board.cpu},  # TVM's C target naming the core
        emulated=True,
        agent="mcu",
        mcu=board,
        **_CORTEX_M_GCC,
    )


# mps2-an385/an386: 4 MB of code memory at 0x0 and 4 MB of RAM at 0x20000000; SysTick runs at 25 MHz.
# Under `-icount shift=0` one guest instruction takes 1 ns of virtual time, so one tick is 40 instructions.
_CORTEX_M4 = McuBoard(
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
)
_CORTEX_M3 = McuBoard(
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
)

KINDS: dict[str, BoardKind] = {
    k.name: k
    for k in (
        BoardKind(name="host", key="host", arch=host_arch(), tvm_target=host_target),
        BoardKind(
            name="rpi4",
            tvm_target={"tag": "raspberry-pi/4b-aarch64"},
            key="rpi4",
            arch="aarch64",
            **_ARM64_GCC,
        ),
        BoardKind(
            name="arm64-emu",
            tvm_target={"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]},
            key="arm64-emu",
            arch="aarch64",
            emulated=True,
            **_ARM64_GCC,
            agent="qemu-user",
            emulator="qemu-aarch64-static",
            emulator_package="qemu-user-static",
        ),
        # 32-bit hard-float Linux (Raspberry Pi 2/3 on Raspberry Pi OS 32-bit, BeagleBone, i.MX6...).
        # Without "mfloat-abi": "hard" LLVM emits soft-float calls and arm-linux-gnueabihf-gcc refuses
        # to link them ("uses VFP register arguments").
        BoardKind(
            name="rpi3",
            tvm_target={
                "kind": "llvm",
                "mtriple": "armv7l-linux-gnueabihf",
                "mcpu": "cortex-a53",
                "mattr": ["+neon"],
                "mfloat-abi": "hard",
                "num-cores": 4,
            },
            key="rpi3",
            arch="armv7l",
            **_ARMHF_GCC,
        ),
        BoardKind(
            name="armv7",
            tvm_target={
                "kind": "llvm",
                "mtriple": "armv7l-linux-gnueabihf",
                "mattr": ["+neon"],
                "mfloat-abi": "hard",
            },
            key="armv7",
            arch="armv7l",
            **_ARMHF_GCC,
        ),
        # RV64GC Linux boards (SiFive U74: VisionFive 2, HiFive Unmatched); lp64d matches Debian's ABI.
        BoardKind(
            name="riscv64",
            tvm_target={
                "kind": "llvm",
                "mtriple": "riscv64-linux-gnu",
                "mcpu": "sifive-u74",
                "mattr": ["+64bit", "+m", "+a", "+f", "+d", "+c"],
                "mabi": "lp64d",
            },
            key="riscv64",
            arch="riscv64",
            **_RISCV64_GCC,
        ),
        # Jetson AGX Orin: CUDA kernels for sm_87, host code for its Cortex-A78AE cores. The .so
        # carries CUDA C source that the board compiles on load (nvrtc), so no nvcc is needed here.
        BoardKind(
            name="jetson-orin",
            tvm_target={"tag": "nvidia/jetson-agx-orin-64gb"},
            key="jetson-orin",
            arch="aarch64",
            **_ARM64_GCC,
        ),
        # An A100-class GPU server of this machine's architecture; builds here with no GPU.
        BoardKind(
            name="cuda-sm80",
            tvm_target={"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}},
            key="cuda-sm80",
            arch=host_arch(),
        ),
        _mcu(_CORTEX_M4),
        _mcu(_CORTEX_M3),
    )
}


def kind_for_key(key: str) -> BoardKind | None:
    """The kind whose boards register under tracker key ``key``, or None (an agent of its own: native)."""
    for kind in KINDS.values():
        if kind.key == key:
            return kind
    return None


def provisioned_kinds() -> dict[str, BoardKind]:
    """{key: kind} of the kinds this machine runs from a provisioned root (the emulated Linux boards)."""
    return {k.key: k for k in KINDS.values() if k.provisioned}
