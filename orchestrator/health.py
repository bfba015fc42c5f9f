"""Board health: a golden model each board must run correctly, and quarantine after repeated failures.

Policy (board states live in the ``boards`` table):
- ``ok`` -> ``suspect`` on any ``infra`` or ``timeout`` attempt; every failure in a row counts.
- A board runs the golden model (model_zoo.tiny_mlp, built for the job's target, checked against
  ONNX Runtime) the first time a sweep gets it and again after each failure on it. A passing golden
  run resets the count: a slow model timing out is the model's fault, not the board's.
- ``QUARANTINE_AFTER`` failures in a row (job or golden) -> ``quarantined``: never scheduled again
  until ``tvmbench farm reset <board>``.

The tracker, not tvmbench, picks which board answers a request, so quarantine cannot be enforced by
choosing a board. It is enforced on the session instead: the scheduler passes the quarantined board
ids to ``workers.measure.request_session`` as ``avoid``; a session that lands on one is held (so the
tracker must offer a different board) and the request repeated until the deadline; held sessions are
closed afterwards. If every registered board of a key is quarantined the job ends
``device-unavailable`` naming them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from db.store import QUARANTINE_AFTER  # noqa: F401  (the policy constant, re-exported for readers)
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.onnx_model import seeded_inputs
from workers.records import Job, ModelRef
from workers.reference import reference_outputs


@dataclass(frozen=True)
class GoldenModel:
    """A small program with known-good outputs, built for one target."""

    name: str
    artifact: bytes
    sha256: str
    input_names: tuple[str, ...]
    inputs: dict[str, np.ndarray]
    expected: tuple[np.ndarray, ...]
    atol: float = 1e-4
    rtol: float = 1e-3


def golden_job(job: Job) -> Job:
    """The golden model as a job on ``job``'s target (same executor; opt_level 2, per-target pipeline)."""
    data = model_zoo.tiny_mlp().SerializeToString()
    ref = ModelRef(
        name="golden-tiny_mlp",
        sha256=hashlib.sha256(data).hexdigest(),
        source="golden",
        inputs=(("x", (1, 16), "float32"),),
    )
    return Job(model=ref, target=job.target, executor=job.executor, opt_level=2, pipeline="per-target")


def build_golden(job: Job, cache: ArtifactCache) -> GoldenModel | None:
    """Build (or take from the cache) the golden model for ``job``'s target; None if it cannot be built.

    A target the golden model cannot be built for gets no health checks rather than no measurements.
    """
    from workers.compile import build_job, tvm_versions

    golden = golden_job(job)
    model_data = model_zoo.tiny_mlp().SerializeToString()
    index = cache.root / "golden" / f"{golden.build_key(tvm_versions()[0])}.sha256"
    data = cache.get(index.read_text().strip()) if index.is_file() else None
    if data is None:
        build, data = build_job(golden, model_data)
        if not build.ok or data is None:
            return None
        index.parent.mkdir(parents=True, exist_ok=True)
        index.write_text(cache.put(data))
    inputs = seeded_inputs(golden.model.inputs, seed=0)
    return GoldenModel(
        name="tiny_mlp",
        artifact=data,
        sha256=hashlib.sha256(data).hexdigest(),
        input_names=("x",),
        inputs=inputs,
        expected=tuple(reference_outputs(model_data, inputs)),
    )
