"""Board health in the driver: which golden model a job's boards are checked with, and where it is kept.

The rule itself (``QUARANTINE_AFTER``, the next board state, the ``GoldenModel`` record) lives in
tvmbench/core/health.py, which the store applies when it records a run. Here: a board runs the golden model
(model_zoo.tiny_mlp, built for the job's target, checked against ONNX Runtime) the first time a sweep
gets it and again after each failure on it. The golden model is built as a Ray task like any other
build (orchestrator/scheduler.py) and its artifact kept in the artifact cache, indexed by build key.

The tracker, not tvmbench, picks which board answers a request, so quarantine cannot be enforced by
choosing a board. It is enforced on the session instead: the scheduler passes the quarantined board
ids to ``workers.tracker_client.request_session`` as ``avoid``; a session that lands on one is held (so
the tracker must offer a different board) and the request repeated until the deadline; held sessions
are closed afterwards. If every registered board of a key is quarantined the job ends
``device-unavailable`` naming them.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from tvmbench.core.health import QUARANTINE_AFTER, GoldenModel
from tvmbench.core.records import Job, ModelRef
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.build_common import tvm_versions
from workers.executors import registry
from workers.executors.requests import BuildRequest
from workers.onnx_model import seeded_inputs
from workers.reference import reference_outputs

__all__ = ["QUARANTINE_AFTER", "GoldenModel", "build_golden", "cached_golden", "golden_job", "remember_golden"]
GOLDEN_NAME = "tiny_mlp"


@functools.cache
def golden_model_data() -> bytes:
    """The golden model's ONNX bytes (deterministic: seeded weights; built once per process)."""
    return model_zoo.tiny_mlp().SerializeToString()


def golden_job(job: Job) -> Job | None:
    """The golden model as a job on ``job``'s target, or None when the job's runner has no health check.

    Built with the executor the job's registry entry names (opt_level 2, per-target pipeline).
    """
    executor = registry.for_job(job).golden_executor
    if executor is None:
        return None
    data = golden_model_data()
    ref = ModelRef(
        name="golden-tiny_mlp",
        sha256=hashlib.sha256(data).hexdigest(),
        source="golden",
        inputs=(("x", (1, 16), "float32"),),
    )
    return Job(model=ref, target=job.target, executor=executor, opt_level=2, pipeline="per-target")


def golden_model(golden: Job, artifact: bytes) -> GoldenModel:
    """The health check's payload: the built golden artifact, seeded inputs and ONNX Runtime's outputs."""
    inputs = seeded_inputs(golden.model.inputs, seed=0)
    return GoldenModel(
        name=GOLDEN_NAME,
        artifact=artifact,
        sha256=hashlib.sha256(artifact).hexdigest(),
        input_names=tuple(n for n, _, _ in golden.model.inputs),
        inputs=inputs,
        expected=tuple(reference_outputs(golden_model_data(), inputs)),
    )


def _index(cache: ArtifactCache, golden: Job, tvm_version: str) -> Path:
    return cache.root / "golden" / f"{golden.build_key(tvm_version)}.sha256"


def cached_golden(golden: Job, cache: ArtifactCache, tvm_version: str) -> GoldenModel | None:
    """The golden model from the artifact cache, or None when it was not built yet."""
    index = _index(cache, golden, tvm_version)
    data = cache.get(index.read_text().strip()) if index.is_file() else None
    return golden_model(golden, data) if data is not None else None


def remember_golden(golden: Job, cache: ArtifactCache, tvm_version: str, artifact: bytes) -> GoldenModel:
    """Keep a built golden artifact in the cache (for later sweeps) and return the model."""
    index = _index(cache, golden, tvm_version)
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(cache.put(artifact))
    return golden_model(golden, artifact)


def build_golden(job: Job, cache: ArtifactCache) -> GoldenModel | None:
    """Build in this process (or take from the cache) the golden model for ``job``'s target.

    None if the job's runner has no health check or the golden model cannot be built for the target
    (such a target gets no health checks rather than no measurements). The scheduler builds it as a
    Ray task instead; this is for callers outside a sweep.
    """
    golden = golden_job(job)
    if golden is None:
        return None
    version = tvm_versions()[0]
    cached = cached_golden(golden, cache, version)
    if cached is not None:
        return cached
    build, data = registry.build_job(BuildRequest(golden, golden_model_data()))
    if not build.ok or data is None:
        return None
    return remember_golden(golden, cache, version, data)
