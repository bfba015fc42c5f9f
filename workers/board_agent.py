"""The program a board runs: a TVM RPC server registered with a tracker, plus tvmbench's board functions.

This file depends on TVM (and the standard library) only, so it can be copied to any board:

    python3 board_agent.py --tracker 192.168.1.10:9190 --key rpi4 --host 0.0.0.0

Functions registered for the orchestrator (reachable through the RPC session):
- ``tvmbench.board_facts() -> str``: JSON with architecture, CPU, cores, memory, OS and versions.
- ``tvmbench.board_runtime() -> str``: JSON ``{"tvm_version", "ffi_version"}`` of the runtime this agent
  runs: asked before every upload, because an artifact loads only in the runtime of the release that built
  it (workers/board_session.py refuses a board whose runtime is not its key's release).
- ``tvmbench.profile(file_name, repeat, *inputs) -> str``: JSON with the time of every kernel call of
  ``main`` in an uploaded module, taken by a VM instrument on the board (TVM 0.27 has no VM profiler).
- ``tvmbench.onnxruntime(file_name, number, repeat, input_names_json, *inputs) -> str``: runs an uploaded
  ONNX model under the board's own ONNX Runtime (when installed): outputs and timings, the baseline that
  TVM builds are compared with on the same board.
- ``tvmbench.memory() -> str``: JSON with VmRSS/VmHWM of the session process (board_state.py).
- ``tvmbench.board_state() -> str``: JSON with governors, clocks, temperatures and load (board_state.py).
- ``tvmbench.first_run(vm_module, func_name, device) -> float``: one ``invoke_stateful``
  of a VM opened in this session (inputs already set), timed here in ms, so the first inference carries
  no network round trip.

Copy ``board_state.py`` next to this file: it is the only other file the agent imports.

The RPC server executes whatever code a client uploads, by design. It binds 127.0.0.1 unless --host
says otherwise, and then warns.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import sys
from typing import Any

try:  # run as a script from its folder (on a board), or imported as part of the package (tests)
    import board_state  # type: ignore[import-not-found]
except ImportError:
    from workers import board_state

AGENT_VERSION = "5"  # 4: tvmbench.board_runtime; 5: TVM's runtime threads = the board's cores (facts say)


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


def board_runtime() -> dict:
    """The TVM runtime this agent serves: the versions of the ``tvm`` and ``tvm_ffi`` it imported."""
    import tvm

    try:
        import tvm_ffi

        ffi_version = tvm_ffi.__version__
    except ImportError:
        ffi_version = None
    return {"tvm_version": tvm.__version__, "ffi_version": ffi_version}


def board_facts(key: str, port: int, emulated: bool, threads: dict | None = None) -> dict:
    """What this board is: stored with every run measured on it.

    ``threads``: ``board_state.use_every_core()``'s answer, how many threads TVM's runtime runs here.
    """
    runtime = board_runtime()
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
        "runtime_threads": (threads or {}).get("threads"),
        "runtime_threads_from": (threads or {}).get("source"),
        "mem_total_mb": _mem_total_mb(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tvm_version": runtime["tvm_version"],
        "ffi_version": runtime["ffi_version"],
        "onnxruntime_version": ort_version,
        "emulated": emulated,
    }


def profile_module(path: str, repeat: int, inputs: list) -> dict:
    """Per-kernel times of ``main`` in the module at ``path``, run ``repeat`` times on the inputs' device.

    The VM calls an instrument before and after each Call instruction; the time between the two is the
    kernel's (the device is synchronised first, so asynchronous GPU kernels are counted where they run).
    Only the bytecode VM interprets calls one by one: a "compiled" VM executable shows no kernel calls,
    and the result then says so instead of reporting zeros.
    """
    import time

    import tvm
    from tvm import relax

    dev = inputs[0].device if inputs else tvm.cpu(0)
    vm = relax.VirtualMachine(tvm.runtime.load_module(path), dev)
    totals: dict[str, list[float]] = {}
    started: list[float] = []

    def instrument(_func, symbol, before_run, _ret, *_args) -> int:
        dev.sync()
        if before_run:
            started.append(time.perf_counter())
        else:
            totals.setdefault(str(symbol), []).append((time.perf_counter() - started.pop()) * 1e3)
        return 0

    vm["main"](*inputs)  # warm-up outside the measurement: first calls allocate and load
    vm.set_instrument(instrument)
    wall = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        vm["main"](*inputs)
        dev.sync()
        wall.append((time.perf_counter() - t0) * 1e3)
    runs = max(1, repeat)
    kernels = [
        {
            "name": name,
            # VM builtins (allocation, shape checks) are calls too; "kernel" marks the compiled ones.
            "kind": "builtin" if name.startswith("vm.builtin.") else "kernel",
            "calls_per_run": len(times) // runs,
            "total_ms": sum(times) / runs,
        }
        for name, times in totals.items()
    ]
    kernels.sort(key=lambda k: -k["total_ms"])
    result = {
        "available": bool(kernels),
        "repeat": runs,
        "run_ms": sum(wall) / runs,
        "kernels": kernels,
    }
    if not kernels:
        result["reason"] = "the VM reported no kernel calls (a vm-compiled executable runs them without the VM)"
    return result


def onnxruntime_run(path: str, number: int, repeat: int, inputs: dict) -> dict:
    """Run an ONNX model under this board's ONNX Runtime (CPU): its outputs and ``repeat`` mean times.

    Outputs travel back as base64 .npy so they can be checked on the orchestrator like a TVM run's.
    """
    import base64
    import io
    import time

    import numpy as np

    try:
        import onnxruntime as ort
    except ImportError:
        return {"available": False, "reason": "onnxruntime is not installed on this board (pip install onnxruntime)"}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, inputs)  # also the warm-up
    samples = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        for _ in range(max(1, number)):
            session.run(None, inputs)
        samples.append((time.perf_counter() - t0) / max(1, number) * 1e3)
    encoded = []
    for out in outputs:
        buf = io.BytesIO()
        np.save(buf, np.asarray(out), allow_pickle=False)
        encoded.append(base64.b64encode(buf.getvalue()).decode())
    return {"available": True, "version": ort.__version__, "samples_ms": samples, "outputs": encoded}


def register_functions(key: str, port: int, emulated: bool, threads: dict | None = None) -> None:
    """Register the agent's functions; RPC sessions run in forked children, which inherit them."""
    import tvm_ffi

    facts = json.dumps(board_facts(key, port, emulated, threads))
    runtime = json.dumps(board_runtime())

    @tvm_ffi.register_global_func("tvmbench.board_facts", override=True)
    def _facts() -> str:
        return facts

    @tvm_ffi.register_global_func("tvmbench.board_runtime", override=True)
    def _runtime() -> str:
        return runtime

    @tvm_ffi.register_global_func("tvmbench.profile", override=True)
    def _profile(file_name: str, repeat: int, *inputs) -> str:
        # The RPC server keeps uploads in its session's work folder; it resolves names there.
        path = tvm_ffi.get_global_func("tvm.rpc.server.workpath")(file_name)
        return json.dumps(profile_module(path, int(repeat), list(inputs)))

    # These run in the session's forked process: /proc/self is the session, not the server.
    @tvm_ffi.register_global_func("tvmbench.memory", override=True)
    def _memory() -> str:
        return json.dumps(board_state.session_memory())

    @tvm_ffi.register_global_func("tvmbench.board_state", override=True)
    def _board_state() -> str:
        return json.dumps(board_state.read_state())

    @tvm_ffi.register_global_func("tvmbench.first_run", override=True)
    def _first_run(vm_module, func_name: str, device) -> float:
        import time

        invoke = vm_module["invoke_stateful"]
        t0 = time.perf_counter()
        invoke(func_name)
        device.sync()  # asynchronous devices: count the kernels, not their launch
        return (time.perf_counter() - t0) * 1e3

    @tvm_ffi.register_global_func("tvmbench.onnxruntime", override=True)
    def _onnxruntime(file_name: str, number: int, repeat: int, input_names: str, *inputs) -> str:
        path = tvm_ffi.get_global_func("tvm.rpc.server.workpath")(file_name)
        feeds = {name: tensor.numpy() for name, tensor in zip(json.loads(input_names), inputs, strict=True)}
        return json.dumps(onnxruntime_run(path, int(number), int(repeat), feeds))


def survive_session_crashes() -> None:
    """Make TVM's RPC server outlive a session process that dies (a crashing kernel, a killed session).

    TVM 0.27's ``_serving`` raises when the forked session process exits non-zero; the exception ends the
    server's listen thread and with it the whole agent, so one segfaulting kernel (or a session killed
    from outside) took the board off the farm for every later job. This version logs the exit and keeps
    listening; everything else is TVM's own (including the session timeout that kills a hung kernel).
    """
    import logging
    import multiprocessing

    from tvm.rpc import _ffi_api, server
    from tvm.support import utils

    log = logging.getLogger("RPCServer")

    def _serving(sock, addr, opts, load_library) -> None:
        work_path = utils.tempdir()
        old_cwd = os.getcwd()
        os.chdir(work_path.path)  # sessions upload by bare file name: one folder each
        try:
            proc = multiprocessing.Process(target=server._serve_loop, args=(sock, load_library, work_path))
            proc.start()
            proc.join(opts.get("timeout", None))
            if proc.is_alive():
                _ffi_api.ReturnException(
                    sock.fileno(),
                    f"RPCSessionTimeoutError: Your {opts['timeout']}s session has expired, "
                    'try to increase the "session_timeout" value.',
                )
                _terminate_tree(proc.pid)
                proc.join(10)
            elif proc.exitcode != 0:
                print(
                    f"board agent: session from {addr[0]}:{addr[1]} ended with exit code {proc.exitcode} "
                    "(its process crashed or was killed); still serving",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            os.chdir(old_cwd)
            work_path.remove()
            sock.close()
            log.debug("finished serving %s", addr)

    server._serving = _serving


def keep_looking_for_the_tracker() -> None:
    """Make TVM's RPC server wait for its tracker however long it is gone.

    TVM 0.27's listen loop reconnects through ``base.connect_with_retry``, which gives up after 60 s with a
    RuntimeError that ends the listen thread and with it the agent: a tracker restarted after a minute
    found no boards (``farm status``: not running). Here it retries every 5 s until the tracker is back.
    """
    from tvm.rpc import base

    give_up = base.connect_with_retry
    if getattr(give_up, "keeps_looking", False):
        return

    def connect_with_retry(addr: Any, timeout: float = 60, retry_period: float = 5) -> Any:
        return give_up(addr, timeout=float("inf"), retry_period=retry_period)

    connect_with_retry.keeps_looking = True  # type: ignore[attr-defined]
    base.connect_with_retry = connect_with_retry


def _terminate_tree(pid: int) -> None:
    """SIGTERM a session process and its children (psutil when present, as TVM does)."""
    import signal

    try:
        import psutil

        for child in psutil.Process(pid).children(recursive=True):
            child.terminate()
    except Exception:  # psutil missing on the board, or the process already gone
        pass
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def serve(
    tracker: str | None, key: str, host: str, port: int, port_end: int, emulated: bool, threads: dict | None = None
) -> None:
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
    register_functions(key, port, emulated, threads)
    survive_session_crashes()
    keep_looking_for_the_tracker()
    state = PopenRPCServerState(host, port, port_end, tracker_addr=tracker_addr, key=key, silent=True)
    runs = f" runtime_threads={threads['threads']} ({threads['source']})" if threads else ""
    print(f"board agent: key={key} listening on {host}:{state.port} tracker={tracker}{runs}", flush=True)
    state.thread.join()


_HELD: list[Any] = []  # the open lock files this agent holds until it exits


def hold_shared(path: str) -> None:
    """Hold ``path`` shared for the life of this process: an agent of a toolchain's runtime holds that toolchain,
    so that `tvmbench toolchains remove` refuses while it serves (it waits for an add of it to finish)."""
    import fcntl

    lock = open(path, "a")  # noqa: SIM115 - kept open until the process ends
    fcntl.flock(lock, fcntl.LOCK_SH)
    _HELD.append(lock)


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
    parser.add_argument(
        "--hold", default=None, help="lock file to hold shared while this agent runs (its toolchain's, if any)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads of TVM's runtime (default: TVM_NUM_THREADS, else one per physical core this agent may use)",
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads {args.threads}: give 1 or more (TVM's runtime threads on this board)")
        os.environ["TVM_NUM_THREADS"] = str(args.threads)
    threads = board_state.use_every_core()  # before TVM's thread pool starts: it reads the count once
    if args.hold:
        hold_shared(args.hold)
    serve(args.tracker, args.key, args.host, args.port, args.port_end or args.port + 1, args.emulated, threads)


if __name__ == "__main__":
    main()
