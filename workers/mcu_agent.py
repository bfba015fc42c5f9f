"""The board agent of an emulated microcontroller: a TVM RPC server whose "board" is a QEMU machine.

    python -m workers.mcu_agent --board cortex-m4 --tracker 127.0.0.1:9190 [--key cortex-m4-emu]

It registers the usual board functions (workers/board_agent.py) plus
``tvmbench.mcu.run(elf: bytes, inputs: bytes, repeat: int, timeout_s: float) -> str``: runs the firmware
with a ``BoardRunner`` (QEMU now; a real board behind OpenOCD/pyOCD + UART would plug in here, see
infra/mcu/README.md) and answers JSON with the outputs (base64), the SysTick ticks and the instruction
counts of each run, the workspace and stack actually used. A run past ``timeout_s`` is killed.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
from pathlib import Path

from workers.aot.boards import BOARDS, McuBoard
from workers.aot.runner import ICOUNT_SHIFT, QEMU, BoardRunner, QemuRunner
from workers.board_agent import survive_session_crashes
from workers.board_kinds import kind_for_key


def agent_command(key: str, python: str = sys.executable) -> list[str] | None:
    """The command that starts an agent for ``key`` when it is an emulated microcontroller's key."""
    kind = kind_for_key(key)
    return kind.agent_command([], python=python) if kind is not None and kind.agent == "mcu" else None


def qemu_version() -> str | None:
    try:
        out = subprocess.run([QEMU, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0] if out else None


def mcu_facts(board: McuBoard) -> dict:
    return {
        "board": board.name,
        "cpu": board.cpu,
        "qemu_machine": board.qemu_machine,
        "qemu": qemu_version(),
        "icount_shift": ICOUNT_SHIFT,
        "flash_bytes": board.flash_bytes,
        "ram_bytes": board.ram_bytes,
    }


def run_firmware(runner: BoardRunner, elf: bytes, inputs: bytes, repeat: int, timeout_s: float) -> str:
    """One firmware run as the JSON answer of ``tvmbench.mcu.run``."""
    result = runner.run(bytes(elf), bytes(inputs), int(repeat), float(timeout_s))
    return json.dumps(
        {
            "status": result.status,
            "error": result.error,
            "outputs": base64.b64encode(result.outputs).decode(),
            "ticks": list(result.ticks),
            "instructions": list(result.instructions),
            "workspace_peak": result.workspace_peak,
            "stack_used": result.stack_used,
            "wall_s": result.wall_s,
        }
    )


def register_mcu_functions(board: McuBoard, key: str, port: int, runner: BoardRunner | None = None) -> None:
    """Register ``tvmbench.mcu.run`` and extend ``tvmbench.board_facts`` with the microcontroller's facts."""
    import tvm_ffi

    from workers.board_agent import board_facts

    runner = runner or QemuRunner(board)
    facts = json.dumps({**board_facts(key, port, emulated=True), "arch": board.cpu, "mcu": mcu_facts(board)})

    @tvm_ffi.register_global_func("tvmbench.board_facts", override=True)
    def _facts() -> str:
        return facts

    @tvm_ffi.register_global_func("tvmbench.mcu.run", override=True)
    def _run(elf: bytes, inputs: bytes, repeat: int, timeout_s: float) -> str:
        return run_firmware(runner, elf, inputs, repeat, timeout_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tvmbench microcontroller agent: an emulated Cortex-M behind TVM RPC")
    parser.add_argument("--board", required=True, choices=sorted(BOARDS), help="board preset to emulate")
    parser.add_argument("--tracker", help="HOST:PORT of the TVM RPC tracker to register with")
    parser.add_argument("--key", help="tracker key (default: the preset's, e.g. cortex-m4-emu)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9090)
    parser.add_argument("--port-end", type=int, default=None)
    args = parser.parse_args(argv)
    board = BOARDS[args.board]
    key = args.key or board.board_key
    missing = QemuRunner(board).available()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        raise SystemExit(2)

    from tvm.rpc.server import PopenRPCServerState

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: MCU agent listening on {args.host}: TVM RPC runs uploaded code; trusted networks only")
    register_mcu_functions(board, key, args.port)
    survive_session_crashes()
    tracker_addr = None
    if args.tracker:
        thost, _, tport = args.tracker.rpartition(":")
        tracker_addr = (thost, int(tport))
    state = PopenRPCServerState(
        args.host, args.port, args.port_end or args.port + 1, tracker_addr=tracker_addr, key=key, silent=True
    )
    print(f"mcu agent: {board.name} ({board.qemu_machine}) key={key} on {args.host}:{state.port}", flush=True)
    state.thread.join()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
