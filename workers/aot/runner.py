"""Running firmware on a board: the seam (``BoardRunner``) and the QEMU implementation.

A runner takes a firmware ELF and the input bytes, returns the output bytes and the SysTick ticks of
each run. ``QemuRunner`` runs the ELF under ``qemu-system-arm -icount shift=0`` with semihosting, where
the count is deterministic; a real board would flash with OpenOCD or pyOCD and read the same
``TVMBENCH ...`` line and output bytes over UART (see infra/mcu/README.md).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from workers.aot.boards import McuBoard

QEMU = "qemu-system-arm"
QEMU_PACKAGE = "qemu-system-arm"
ICOUNT_SHIFT = 0  # one instruction per ns of virtual time: counts are deterministic and comparable


@dataclass(frozen=True)
class FirmwareRun:
    """What one firmware execution gave back; ``error`` set when it did not finish."""

    status: str  # "ok", "timeout", "crash" (hard fault, bad exit), "kernel-error"
    outputs: bytes = b""
    ticks: tuple[int, ...] = ()
    instructions: tuple[int, ...] = ()  # ticks converted with the board's SysTick clock
    workspace_peak: int | None = None
    stack_used: int | None = None
    wall_s: float = 0.0
    error: str | None = None
    console: str = ""
    facts: dict = field(default_factory=dict)


class BoardRunner(Protocol):
    """Flash or load firmware, feed it inputs, collect outputs and counts, within a deadline."""

    def run(self, elf: bytes, inputs: bytes, repeat: int, timeout_s: float) -> FirmwareRun: ...


def pack_inputs(arrays: list[bytes], repeat: int) -> bytes:
    """The harness's input file: the repeat count, then each input's bytes in order."""
    return struct.pack("<I", repeat) + b"".join(arrays)


_LINE = re.compile(r"TVMBENCH status=(-?\d+) workspace_peak=(\d+) stack_used=(\d+) ticks=([\d,]*)")


def instructions_per_tick(board: McuBoard, shift: int = ICOUNT_SHIFT) -> float:
    """Guest instructions per SysTick tick: virtual ns per tick over virtual ns per instruction."""
    return (1e9 / board.systick_hz) / (1 << shift)


@dataclass
class QemuRunner:
    """Runs firmware on QEMU's model of the board (mps2-an386 for Cortex-M4)."""

    board: McuBoard
    qemu: str = QEMU

    def available(self) -> str | None:
        if shutil.which(self.qemu) is None:
            return f"{self.qemu} not found: apt-get install {QEMU_PACKAGE}"
        return None

    def run(self, elf: bytes, inputs: bytes, repeat: int, timeout_s: float) -> FirmwareRun:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="tvmbench-qemu-") as tmp:
            work = Path(tmp)
            (work / "firmware.elf").write_bytes(elf)
            (work / "inputs.bin").write_bytes(inputs)
            cmd = [
                self.qemu,
                "-M",
                self.board.qemu_machine,
                "-nographic",
                "-monitor",
                "none",
                "-serial",
                "none",
                "-icount",
                f"shift={ICOUNT_SHIFT}",
                "-semihosting-config",
                "enable=on,target=native",
                "-kernel",
                "firmware.elf",
            ]
            try:
                # A new session so the whole emulator is killed at the deadline.
                proc = subprocess.run(
                    cmd, cwd=work, capture_output=True, text=True, timeout=timeout_s, start_new_session=True
                )
            except subprocess.TimeoutExpired as exc:
                return FirmwareRun(
                    status="timeout",
                    wall_s=time.monotonic() - started,
                    error=f"{self.board.qemu_machine}: firmware still running after {timeout_s:g}s: killed",
                    console=(exc.stdout or b"").decode(errors="replace")[-2000:]
                    if isinstance(exc.stdout, bytes)
                    else "",
                )
            wall = time.monotonic() - started
            console = (proc.stdout + proc.stderr)[-4000:]
            match = _LINE.search(proc.stdout)
            if match is None:
                return FirmwareRun(
                    status="crash",
                    wall_s=wall,
                    error=f"{self.board.qemu_machine}: firmware exited {proc.returncode} without a result line "
                    f"(hard fault or missing input): {console.strip()[-300:]}",
                    console=console,
                )
            status, ws_peak, stack, ticks_text = match.groups()
            ticks = tuple(int(t) for t in ticks_text.split(",") if t)
            per_tick = instructions_per_tick(self.board)
            if int(status) != 0:
                return FirmwareRun(
                    status="kernel-error",
                    wall_s=wall,
                    error=f"kernel {status} of the driver returned an error (workspace exhausted?)",
                    console=console,
                )
            out_path = work / "outputs.bin"
            return FirmwareRun(
                status="ok",
                outputs=out_path.read_bytes() if out_path.exists() else b"",
                ticks=ticks,
                instructions=tuple(int(t * per_tick) for t in ticks),
                workspace_peak=int(ws_peak),
                stack_used=int(stack),
                wall_s=wall,
                console=console,
                facts={"qemu_machine": self.board.qemu_machine, "icount_shift": ICOUNT_SHIFT},
            )
