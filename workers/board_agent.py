"""The program a board runs: a TVM RPC server registered with a tracker, plus tvmbench's board functions.

This file depends on TVM (and the standard library) only, so it can be copied to any board:

    python3 board_agent.py --tracker 192.168.1.10:9190 --key rpi4 --host 0.0.0.0

Functions registered for the orchestrator (reachable through the RPC session):
- ``tvmbench.board_facts() -> str``: JSON with architecture, CPU, cores, memory, OS and versions.

The RPC server executes whatever code a client uploads, by design. It binds 127.0.0.1 unless --host
says otherwise, and then warns.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys

AGENT_VERSION = "1"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model", "uarch"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_mb() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def board_facts(key: str, port: int, emulated: bool) -> dict:
    """What this board is: stored with every run measured on it."""
    import tvm

    try:
        import tvm_ffi

        ffi_version = tvm_ffi.__version__
    except ImportError:
        ffi_version = None
    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    return {
        "agent_version": AGENT_VERSION,
        "key": key,
        "hostname": socket.gethostname(),
        "port": port,
        "arch": platform.machine().lower().replace("arm64", "aarch64").replace("amd64", "x86_64"),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "mem_total_mb": _mem_total_mb(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tvm_version": tvm.__version__,
        "ffi_version": ffi_version,
        "onnxruntime_version": ort_version,
        "emulated": emulated,
    }


def register_functions(key: str, port: int, emulated: bool) -> None:
    """Register the agent's functions; RPC sessions run in forked children, which inherit them."""
    import tvm_ffi

    facts = json.dumps(board_facts(key, port, emulated))

    @tvm_ffi.register_global_func("tvmbench.board_facts", override=True)
    def _facts() -> str:
        return facts


def serve(tracker: str | None, key: str, host: str, port: int, port_end: int, emulated: bool) -> None:
    """Run the RPC server in this process until it is killed."""
    from tvm.rpc.server import PopenRPCServerState

    if host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: board agent listening on {host}: TVM RPC runs uploaded code for anyone who can "
            "connect, in plain text; expose it only on a trusted network",
            file=sys.stderr,
        )
    tracker_addr = None
    if tracker:
        thost, _, tport = tracker.rpartition(":")
        tracker_addr = (thost, int(tport))
    # The in-process server (not `python -m tvm.exec.rpc_server`, which re-executes Python for its
    # worker) so that an interpreter started under qemu -L keeps its loader prefix.
    register_functions(key, port, emulated)
    state = PopenRPCServerState(host, port, port_end, tracker_addr=tracker_addr, key=key, silent=True)
    print(f"board agent: key={key} listening on {host}:{state.port} tracker={tracker}", flush=True)
    state.thread.join()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tvmbench board agent: a TVM RPC server for one board")
    parser.add_argument("--tracker", help="HOST:PORT of the TVM RPC tracker to register with")
    parser.add_argument("--key", required=True, help="device key the orchestrator asks the tracker for")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; anything wider exposes code execution)"
    )
    parser.add_argument("--port", type=int, default=9090)
    parser.add_argument("--port-end", type=int, default=None, help="last port to try (default: --port only)")
    parser.add_argument("--emulated", action="store_true", help="this board runs under an emulator")
    args = parser.parse_args(argv)
    serve(args.tracker, args.key, args.host, args.port, args.port_end or args.port + 1, args.emulated)


if __name__ == "__main__":
    main()
