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
from tvmbench.core.records import Build, Run, canonical_hash
from workers.aot import AotUnsupported
from workers.aot.boards import board_for_target
from workers.aot.build import build_firmware, pack_artifact, unpack_artifact
from workers.aot.firmware import toolchain_missing
from workers.aot.runner import pack_inputs
from workers.board_session import SessionRunner, board_facts, check_outputs, ok_run
from workers.build_common import build_identity, pass_trace_instrument
from workers.executors.base import INSTRUCTIONS
from workers.executors.requests import BuildRequest, MeasureRequest, foreign_toolchain
from workers.tracker_client import Session

MCU_RUN_FUNCTION = "tvmbench.mcu.run"


def build_aot_job(request: BuildRequest) -> tuple[Build, bytes | None]:
    """Compile one aot-c job; never raises for a bad model, an unsupported operator or a size that does
    not fit: those come back as a Build with status "model" or "build" and a one-line reason."""
    import tvm_ffi

    job, model_data = request.job, request.model_data
    common = build_identity(job)
    tvm_version = common["tvm_version"]
    foreign = foreign_toolchain(request, common)
    if foreign is not None:
        return foreign, None
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

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        """See ``build_aot_job`` (the program is known only after codegen: ``claim`` is not used; no tuning)."""
        return build_aot_job(request)


class AotCRunner(SessionRunner):
    """Runner of the aot-c executor: the firmware under the board's MCU agent, counted in instructions."""

    run_fields: ClassVar[dict[str, Any]] = {"emulated": True, "unit": INSTRUCTIONS}
    checks_arch = False  # the MCU agent's facts name the board's CPU: on_board compares it with the firmware's

    def on_board(self, session: Session, request: MeasureRequest, base: dict[str, Any]) -> Run:
        job, build, artifact = request.job, request.build, request.artifact
        inputs, reference, builds_in_flight = request.inputs, request.reference, request.builds_in_flight
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


# Its entry (registry.py) takes microcontroller targets only; the kernels axis picks the codegen.
BUILDER = AotCBuilder()
RUNNER = AotCRunner()
