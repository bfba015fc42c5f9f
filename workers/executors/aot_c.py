"""The ``aot-c`` executor: a job built into microcontroller firmware (workers/aot), run on an emulated
microcontroller board reached through the tracker, counted in instructions."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tvmbench.core.errors import one_line
from tvmbench.core.records import Build, Job, Run, TargetSpec, canonical_hash
from workers.aot import AotUnsupported
from workers.aot.boards import board_for_target, is_mcu_target
from workers.aot.build import build_firmware, pack_artifact, unpack_artifact
from workers.aot.firmware import toolchain_missing
from workers.aot.kernels import KERNEL_PATHS
from workers.aot.runner import pack_inputs
from workers.board_session import Attempt, SessionRunner, board_facts, check_outputs, ok_run
from workers.build_common import build_identity, pass_trace_instrument
from workers.executors.base import Executor
from workers.program_index import ClaimFn
from workers.tracker_client import Session

NAME = "aot-c"
MCU_RUN_FUNCTION = "tvmbench.mcu.run"
UNIT = "instructions"


def build_aot_job(job: Job, model_data: bytes) -> tuple[Build, bytes | None]:
    """Compile one aot-c job; never raises for a bad model, an unsupported operator or a size that does
    not fit: those come back as a Build with status "model" or "build" and a one-line reason."""
    import tvm_ffi

    common = build_identity(job)
    tvm_version = common["tvm_version"]
    missing = toolchain_missing()
    if missing:
        return Build(status="build", error=f"{missing} (on {socket.gethostname()})", **common), None
    try:
        board = board_for_target(job.target.tvm_target)
    except KeyError as exc:
        return Build(status="build", error=str(exc.args[0]), **common), None
    try:
        import onnx

        onnx.load_from_string(model_data)
    except Exception as exc:
        return Build(status="model", error=f"ONNX import failed: {one_line(exc)}", **common), None

    trace = pass_trace_instrument()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tvmbench-aot-") as tmp:
        try:
            built = build_firmware(
                model_data,
                job.model.shape_dict,
                board,
                job.kernels or "c",
                Path(tmp),
                opt_level=job.opt_level,
                instruments=[trace],
            )
            data = pack_artifact(Path(tmp))
        except AotUnsupported as exc:
            return Build(
                status="build",
                error=f"aot-c on {board.name}: {exc}",
                pass_trace=tuple(trace.names),
                compile_s=time.perf_counter() - started,
                **common,
            ), None
        except Exception as exc:
            return Build(
                status="build",
                error=one_line(exc),
                pass_trace=tuple(trace.names),
                compile_s=time.perf_counter() - started,
                **common,
            ), None
    fingerprint = canonical_hash(
        {
            "ir": str(tvm_ffi.structural_hash(built.program.lowered)),
            "executor": job.executor,
            "kernels": job.kernels,
            "target": job.target.tvm_target,
            "tvm": tvm_version,
        }
    )[:16]
    return Build(
        status="ok",
        fingerprint=fingerprint,
        pass_trace=tuple(trace.names),
        kernel_count=len(built.program.kernels.functions),
        compile_s=time.perf_counter() - started,
        artifact_sha256=hashlib.sha256(data).hexdigest(),
        artifact_size=len(data),
        artifact_arch=board.cpu,
        memory=dict(built.memory),
        **common,
    ), data


def decode_outputs(manifest: dict[str, Any], raw: bytes) -> list[np.ndarray]:
    """The output arrays from the firmware's output bytes, in the manifest's order."""
    outputs, offset = [], 0
    for spec in manifest["outputs"]:
        dtype = np.dtype(spec["dtype"])
        size = int(np.prod(spec["shape"], dtype=np.int64)) * dtype.itemsize
        chunk = raw[offset : offset + size]
        if len(chunk) != size:
            raise ValueError(f"firmware wrote {len(raw)} output bytes; output {spec['name']!r} needs {size} more")
        outputs.append(np.frombuffer(chunk, dtype).reshape(spec["shape"]))
        offset += size
    return outputs


class AotCBuilder:
    """Builder of the aot-c executor: firmware for the target's microcontroller board."""

    def build(self, job: Job, model_data: bytes, *, claim: ClaimFn | None = None) -> tuple[Build, bytes | None]:
        """See ``build_aot_job`` (the program is known only after codegen: ``claim`` is not used)."""
        return build_aot_job(job, model_data)


class AotCRunner(SessionRunner):
    """Runner of the aot-c executor: the firmware under the board's MCU agent, counted in instructions."""

    run_fields: ClassVar[dict[str, Any]] = {"emulated": True, "unit": UNIT}
    checks_arch = False  # the MCU agent's facts name the board's CPU: on_board compares it with the firmware's

    def on_board(self, session: Session, attempt: Attempt, base: dict[str, Any]) -> Run:
        job, build, artifact = attempt.job, attempt.build, attempt.artifact
        inputs, reference, builds_in_flight = attempt.inputs, attempt.reference, attempt.builds_in_flight
        remote, settings = session.remote, job.measure
        facts = board_facts(remote) or {}
        base["board_facts"] = facts
        mcu = facts.get("mcu") or {}
        if mcu.get("cpu") != build.artifact_arch:
            return Run(
                status="build",
                finished_at=time.time(),
                error=f"firmware is for {build.artifact_arch} but board {session.board_id} is "
                f"{mcu.get('cpu') or 'not a microcontroller agent'}: use the preset whose board_key it serves",
                **base,
            )
        manifest, elf = unpack_artifact(artifact)
        payload = pack_inputs(
            [np.ascontiguousarray(inputs[name], dtype=dtype).tobytes() for name, _, dtype in job.model.inputs],
            settings.repeat,
        )
        # The emulator gets the session's deadline minus a margin to report back before the session ends.
        deadline = max(1.0, settings.session_timeout_s - 5.0)
        answer = json.loads(
            remote.get_function(MCU_RUN_FUNCTION)(bytearray(elf), bytearray(payload), settings.repeat, deadline)
        )
        base["board_facts"] = {**facts, "mcu_run": {k: v for k, v in answer.items() if k != "outputs"}}
        if answer["status"] == "timeout":
            return Run(
                status="timeout", error=f"{session.board_id}: {answer['error']}", finished_at=time.time(), **base
            )
        if answer["status"] != "ok":
            return Run(status="build", error=f"{session.board_id}: {answer['error']}", finished_at=time.time(), **base)
        outputs = decode_outputs(manifest, base64.b64decode(answer["outputs"]))
        max_abs, max_rel, wrong = check_outputs(outputs, reference, settings, base)
        if wrong is not None:
            return wrong
        # The "_ms" fields hold instruction counts here: base carries unit="instructions".
        return ok_run(
            answer["instructions"], max_abs_err=max_abs, max_rel_err=max_rel, builds_in_flight=builds_in_flight, **base
        )


def _is_mcu(target: TargetSpec) -> bool:
    return is_mcu_target(target.tvm_target)


# Microcontrollers take only this executor, and it takes only them; the kernels axis picks the codegen.
EXECUTOR = Executor(NAME, AotCBuilder(), AotCRunner(), accepts=_is_mcu, kernel_paths=KERNEL_PATHS)
