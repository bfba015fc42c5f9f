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

from tvmbench.core.records import Build, Job, Run, canonical_hash
from workers.board_session import Attempt, SessionRunner, check_outputs, ok_run
from workers.build_common import build_identity
from workers.executors.base import Executor, not_mcu
from workers.phases import PhaseLog
from workers.program_index import ClaimFn
from workers.sampling import SamplingPlan, sample
from workers.tracker_client import Session

NAME = "onnxruntime"


class OnnxRuntimeBuilder:
    """The baseline's "build": the ONNX bytes themselves, identified by their hash."""

    def build(self, job: Job, model_data: bytes, *, claim: ClaimFn | None = None) -> tuple[Build, bytes | None]:
        """An ok Build whose artifact is the model (intake checked it): nothing can fail, no codegen to skip."""
        sha = hashlib.sha256(model_data).hexdigest()
        return Build(
            status="ok",
            fingerprint=canonical_hash({"onnx": sha, "executor": job.executor})[:16],
            compile_s=0.0,
            artifact_sha256=sha,
            artifact_size=len(model_data),
            **build_identity(job),
        ), model_data


class OnnxRuntimeRunner(SessionRunner):
    """The ONNX model under the board's own ONNX Runtime (needs workers/board_agent.py on the board).

    No golden model: see its registry entry.
    """

    def on_board(self, session: Session, attempt: Attempt, base: dict[str, Any]) -> Run:
        import tvm

        job, build, model = attempt.job, attempt.build, attempt.artifact
        inputs, reference, builds_in_flight = attempt.inputs, attempt.reference, attempt.builds_in_flight
        remote, settings = session.remote, job.measure
        try:
            run_fn = remote.get_function("tvmbench.onnxruntime")
        except Exception:
            run_fn = None
        if run_fn is None:
            return Run(
                status="build",
                error=f"{base['board_id']} runs a stock TVM RPC server: the onnxruntime executor needs "
                "workers/board_agent.py on the board",
                finished_at=time.time(),
                **base,
            )
        name = f"tvmbench-{build.artifact_sha256[:16]}.onnx"
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
        answer = json.loads(run_fn(name, settings.number, 1, json.dumps(names), *args))
        if not answer.get("available"):
            return Run(
                status="build", error=f"{base['board_id']}: {answer.get('reason')}", finished_at=time.time(), **base
            )
        outputs = [np.load(io.BytesIO(base64.b64decode(o)), allow_pickle=False) for o in answer["outputs"]]
        max_abs, max_rel, wrong = check_outputs(outputs, reference, settings, base)
        if wrong is not None:
            return wrong

        def timer(k: int) -> list[float]:  # each ask opens a fresh InferenceSession on the board, untimed
            return json.loads(run_fn(name, settings.number, k, json.dumps(names), *args))["samples_ms"]

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


# The golden model is a Relax VM program: boards of this runner are not health-checked.
EXECUTOR = Executor(NAME, OnnxRuntimeBuilder(), OnnxRuntimeRunner(), accepts=not_mcu)
