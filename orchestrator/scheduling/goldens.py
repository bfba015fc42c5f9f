"""The golden model of each target (orchestrator/health.py): cached, being built, built, or impossible.

A job's boards are health-checked with the golden model built for its target with the executor its
registry entry names. The model is built as a pool task counted with the builds (the host fence
applies); a measurement that needs it waits until it is known. A target the golden model cannot be
built for gets no health checks rather than no measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator import health
from orchestrator.scheduling.tasks import BuildResult
from tvmbench.core.health import GoldenModel
from tvmbench.core.records import Job
from workers.artifacts import ArtifactCache

GoldenKey = tuple[str, str]  # (target name, golden executor)


class Goldens:
    """Golden models by (target name, executor), and the golden builds in flight."""

    def __init__(
        self, enabled: bool, cache: ArtifactCache, tvm_version: str, native: Callable[[Job], bool] = lambda _j: True
    ) -> None:
        # ``native``: whether the job's boards run this TVM. The golden model is built by it, so boards of
        # another release (the tvm axis) could not load it: they get no health check rather than a false one.
        self.enabled, self.cache, self.tvm_version, self.native = enabled, cache, tvm_version, native
        self._models: dict[GoldenKey, GoldenModel | None] = {}
        self._jobs: dict[tuple[str, str], tuple[GoldenKey, Job] | None] = {}
        self.building: set[GoldenKey] = set()
        self._model_ref: Any = None

    def golden_job(self, job: Job) -> tuple[GoldenKey, Job] | None:
        """(key, golden job) of the job's boards, or None when they get no health check."""
        if not self.enabled or not self.native(job):
            return None
        key = (job.target.name, job.executor)
        if key not in self._jobs:
            golden = health.golden_job(job)
            self._jobs[key] = None if golden is None else ((job.target.name, golden.executor), golden)
        return self._jobs[key]

    def needs_build(self, job: Job) -> tuple[GoldenKey, Job] | None:
        """The golden build the job waits for (not started yet), else None (known, cached, or building)."""
        found = self.golden_job(job)
        if found is None or found[0] in self._models or found[0] in self.building:
            return None
        cached = health.cached_golden(found[1], self.cache, self.tvm_version)
        if cached is not None:
            self._models[found[0]] = cached
            return None
        return found

    def ready(self, job: Job) -> bool:
        """Whether the job's golden model is known (built, cached, or impossible)."""
        found = self.golden_job(job)
        return found is None or found[0] in self._models

    def model_ref(self, put: Callable[[Any], Any]) -> Any:
        """The golden model's ONNX bytes, put into the pool once."""
        if self._model_ref is None:
            self._model_ref = put(health.golden_model_data())
        return self._model_ref

    def finished(self, key: GoldenKey, golden: Job, result: BuildResult | None) -> None:
        """A golden build ended (``result`` None: its task died): keep its artifact, or note no health checks."""
        self.building.discard(key)
        if result is None or not result.build.ok or result.data is None:
            self._models[key] = None
            return
        self._models[key] = health.remember_golden(golden, self.cache, self.tvm_version, result.data)

    def model(self, job: Job) -> GoldenModel | None:
        found = self.golden_job(job)
        return None if found is None else self._models.get(found[0])
