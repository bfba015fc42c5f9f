"""The phases of one timed run on a board: upload, module load, first inference, steady state.

Each phase is measured apart and returned as Run fields, together with what the board agent reports
around them: the session's resident memory (before load, after load, after the runs) and the board's
state (before and after the samples). A stock ``tvm.exec.rpc_server`` has none of the agent's
functions: then memory and board state are ``{"available": False, "reason": ...}`` and the first
inference is timed from this side (one network round trip included, and said so).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from tvmbench.core.errors import one_line
from workers.board_state import assess
from workers.sampling import Sampled

STOCK_REASON = "the board runs a stock TVM RPC server; {what} needs workers/board_agent.py on the board"
KB_PER_MB = 1024


def agent_json(remote: Any, name: str, what: str, *args: Any) -> dict[str, Any]:
    """Call the agent's ``name`` and decode its JSON, or say why it could not be had."""
    try:
        fn = remote.get_function(name)
    except Exception:
        return {"available": False, "reason": STOCK_REASON.format(what=what)}
    try:
        return json.loads(fn(*args))
    except Exception as exc:  # the agent is there but the reading failed: keep the reason
        return {"available": False, "reason": f"{name} failed on the board: {one_line(exc)}"}


@dataclass
class PhaseLog:
    """What one run has measured so far; ``fields()`` turns it into Run keyword arguments."""

    upload_bytes: int | None = None
    upload_s: float | None = None
    load_s: float | None = None
    first_ms: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)

    def read_memory(self, remote: Any, when: str) -> None:
        """The session process's VmRSS/VmHWM now, under ``when`` (before_load / after_load / after_runs)."""
        self.memory[when] = agent_json(remote, "tvmbench.memory", "session memory")

    def read_state(self, remote: Any, when: str) -> None:
        """The board's clocks, temperatures and load now, under ``when`` (before / after)."""
        self.state[when] = agent_json(remote, "tvmbench.board_state", "board state")

    def upload(self, remote: Any, data: bytes, name: str) -> None:
        t0 = time.perf_counter()
        remote.upload(bytearray(data), name)
        self.upload_s, self.upload_bytes = time.perf_counter() - t0, len(data)

    def load_vm(self, remote: Any, name: str, dev: Any) -> Any:
        """Load the uploaded module and open a Relax VM on it (both remote calls), timed."""
        from tvm import relax

        t0 = time.perf_counter()
        vm = relax.VirtualMachine(remote.load_module(name), dev)
        self.load_s = time.perf_counter() - t0
        return vm

    def first_inference(self, remote: Any, vm: Any, dev: Any, args: list[Any], func: str = "main") -> None:
        """Run ``func`` once (its outputs are then fetched for the check), timed on the board when it can."""
        vm.set_input(func, *args)
        try:
            first_run = remote.get_function("tvmbench.first_run")
        except Exception:
            first_run = None
        if first_run is not None:
            self.first_ms = float(first_run(vm.module, func, dev))
            self.notes["first_inference"] = {"source": "board"}
            return
        t0 = time.perf_counter()
        vm.invoke_stateful(func)
        self.first_ms = (time.perf_counter() - t0) * 1e3
        self.notes["first_inference"] = {
            "source": "client",
            "note": "timed from the orchestrator: includes one RPC round trip (stock RPC server)",
        }

    def fields(self, sampled: Sampled | None) -> dict[str, Any]:
        """Run fields for the phases, sampling, memory and board state."""
        out: dict[str, Any] = {
            "upload_bytes": self.upload_bytes,
            "upload_s": self.upload_s,
            "load_s": self.load_s,
            "first_ms": self.first_ms,
            "phases": {**self.notes} or None,
        }
        if sampled is not None:
            out.update(
                warmup_runs=len(sampled.warmup_ms),
                stop_reason=sampled.stop_reason,
                ci_rel=sampled.rel_ci if sampled.rel_ci == sampled.rel_ci else None,
                sampling=sampled.record(),
            )
        peak, memory = memory_record(self.memory)
        out.update(peak_mem_mb=peak, memory=memory)
        if self.state:
            before, after = self.state.get("before"), self.state.get("after")
            out["board_state"] = {"before": before, "after": after}
            out["warnings"] = tuple(assess(before, after))
        return out


def memory_record(readings: dict[str, dict[str, Any]]) -> tuple[float | None, dict[str, Any] | None]:
    """(peak MB, the memory JSON) from the session readings; the peak is VmHWM after the runs.

    ``model_mb`` is what the model added to the session: peak minus the resident set before the load
    (the forked session starts with the server's own pages, TVM's runtime among them).
    """
    if not readings:
        return None, None
    unavailable = next((r for r in readings.values() if not r.get("available")), None)
    if unavailable is not None:
        return None, {"available": False, "reason": unavailable.get("reason")}
    final = readings.get("after_runs") or list(readings.values())[-1]
    peak_mb = final["vmhwm_kb"] / KB_PER_MB
    record: dict[str, Any] = {"available": True, "source": "/proc/self/status of the RPC session", **readings}
    before = readings.get("before_load")
    if before is not None:
        record["model_mb"] = (final["vmhwm_kb"] - before["vmrss_kb"]) / KB_PER_MB
    return peak_mb, record
