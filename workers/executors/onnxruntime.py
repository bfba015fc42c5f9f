"""The ``onnxruntime`` executor: the baseline, the ONNX model run by ONNX Runtime on the board itself.

Nothing is compiled: the model is the artifact. The board agent's ``tvmbench.onnxruntime`` runs it,
checked against the reference and timed like a TVM run, so every ranking has a baseline column.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import time
from typing import Any

import numpy as np

from tvmbench.core.records import Build, Run, canonical_hash
from workers.board_session import SessionRunner, check_outputs, ok_run
from workers.build_common import build_identity
from workers.executors.requests import BuildRequest, MeasureRequest, foreign_toolchain
from workers.phases import PhaseLog
from workers.sampling import SamplingPlan, sample
from workers.tracker_client import Session


def board_function(remote: Any) -> Any | None:
    """The board agent's ``tvmbench.onnxruntime`` (None: a stock TVM RPC server, which has none)."""
    try:
        return remote.get_function("tvmbench.onnxruntime")
    except Exception:
        return None


def model_file_name(sha256: str) -> str:
    """The name an ONNX model is uploaded under in the board's session folder (one per model)."""
    return f"tvmbench-{sha256[:16]}.onnx"


def run_on_board(run_fn: Any, name: str, number: int, repeat: int, names: list[str], args: list[Any]) -> Any:
    """The agent's answer for the uploaded model ``name``: ``available`` (with ``reason``), ``samples_ms``
    (``repeat`` means of ``number`` runs each, after an untimed warm-up in a fresh session) and ``outputs``."""
    return json.loads(run_fn(name, number, repeat, json.dumps(names), *args))


class OnnxRuntimeBuilder:
    """The baseline's "build": the ONNX bytes themselves, identified by their hash."""

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        """An ok Build whose artifact is the model (intake checked it): no codegen to skip, no tuning.

        Fails only for a toolchain other than the running one (the fingerprint names no TVM, but the
        build key does).
        """
        job, model_data = request.job, request.model_data
        common = build_identity(job)
        foreign = foreign_toolchain(request, common)
        if foreign is not None:
            return foreign, None
        sha = hashlib.sha256(model_data).hexdigest()
        return Build(
            status="ok",
            fingerprint=canonical_hash({"onnx": sha, "executor": job.executor})[:16],
            compile_s=0.0,
            artifact_sha256=sha,
            artifact_size=len(model_data),
            **common,
        ), model_data


class OnnxRuntimeRunner(SessionRunner):
    """The ONNX model under the board's own ONNX Runtime (needs workers/board_agent.py on the board).

    No golden model: see its registry entry.
    """

    def on_board(self, session: Session, request: MeasureRequest, base: dict[str, Any]) -> Run:
        import tvm

        job, build, model = request.job, request.build, request.artifact
        inputs, reference, builds_in_flight = request.inputs, request.reference, request.builds_in_flight
        remote, settings = session.remote, job.measure
        run_fn = board_function(remote)
        if run_fn is None:
            return Run(
                status="build",
                error=f"{base['board_id']} runs a stock TVM RPC server: the onnxruntime executor needs "
                "workers/board_agent.py on the board",
                finished_at=time.time(),
                **base,
            )
        name = model_file_name(build.artifact_sha256)
        log = PhaseLog()
        log.read_memory(remote, "before_load")
        log.upload(remote, model, name)
        log.notes["load"] = log.notes["first_inference"] = {
            "available": False,
            "reason": "ONNX Runtime loads and runs inside the agent's tvmbench.onnxruntime call (not timed apart)",
        }
        names = [n for n, _, _ in job.model.inputs]
        dev = remote.cpu(0)
        args = [tvm.runtime.tensor(inputs[n], dev) for n in names]
        load = os.getloadavg()[0]
        answer = run_on_board(run_fn, name, settings.number, 1, names, args)
        if not answer.get("available"):
            return Run(
                status="build", error=f"{base['board_id']}: {answer.get('reason')}", finished_at=time.time(), **base
            )
        outputs = [np.load(io.BytesIO(base64.b64decode(o)), allow_pickle=False) for o in answer["outputs"]]
        max_abs, max_rel, wrong = check_outputs(outputs, reference, settings, base)
        if wrong is not None:
            return wrong

        def timer(k: int) -> list[float]:  # each ask opens a fresh InferenceSession on the board, untimed
            return run_on_board(run_fn, name, settings.number, k, names, args)["samples_ms"]

        log.read_state(remote, "before")
        sampled = sample(timer, SamplingPlan.from_settings(settings))
        log.read_state(remote, "after")
        log.read_memory(remote, "after_runs")
        if settings.profile:
            base["kernel_profile"] = {"available": False, "reason": "the onnxruntime executor has no per-kernel view"}
        return ok_run(
            sampled.samples_ms,
            max_abs_err=max_abs,
            max_rel_err=max_rel,
            load_avg_1m=load,
            builds_in_flight=builds_in_flight,
            **log.fields(sampled),
            **base,
        )


# The baseline's entry (registry.py) names no golden model: its boards are not health-checked.
BUILDER = OnnxRuntimeBuilder()
RUNNER = OnnxRuntimeRunner()
