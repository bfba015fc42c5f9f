"""The two seams of an executor family, and its registry entry with the executor's traits.

Shaped after TVM MetaSchedule's builder/ and runner/ packages: each seam is a small interface taking one
request record (workers/executors/requests.py), and a failure comes back as data (a Build or Run with an
error kind), never as an exception crossing a stage. Cheap to import: no executor's code is loaded here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tvmbench.core.records import Build, Job, Run, TargetSpec
from workers.aot.boards import is_mcu_target
from workers.executors.requests import BuildRequest, MeasureRequest

# The units a Run's "_ms" fields are in.
MS = "ms"
INSTRUCTIONS = "instructions"  # emulated microcontrollers: instructions counted, not time


class Builder(Protocol):
    """BuildRequest -> (Build, artifact bytes or None). Never raises for a bad model or a compiler error.

    A tuned job (``request.job.tuning`` > 0, planned only for executors whose entry tunes its target)
    tunes inside the same build. With ``request.claim``, a Builder that knows its program before codegen
    returns an ok Build with ``reused_from`` set and no artifact when another build compiles it already.
    """

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]: ...


class Runner(Protocol):
    """MeasureRequest -> Run: on a board of the job's key reached through the tracker, check the outputs,
    then time it (see MeasureRequest for the board options and the golden-model health check)."""

    def run(self, request: MeasureRequest) -> Run: ...


@dataclass(frozen=True)
class Executor:
    """One executor name of the sweep files' ``axes.executor``: what builds and runs it, and its traits."""

    name: str
    # The Builder and Runner; None: the ``BUILDER`` and ``RUNNER`` of ``module``, imported when first
    # asked for, so that the traits below are read without loading any compiler or runtime.
    builder_impl: Builder | None = None
    runner_impl: Runner | None = None
    # Which targets it builds for (microcontrollers take only aot-c, the others only non-MCU executors).
    accepts: Callable[[TargetSpec], bool] = field(kw_only=True)
    module: str | None = field(default=None, kw_only=True)
    # The values of the ``axes.kernels`` axis it takes; () when it has no such axis.
    kernel_paths: tuple[str, ...] = field(default=(), kw_only=True)
    # The executor the golden model is built with for health checks of its boards; None: no health check.
    golden_executor: str | None = field(default=None, kw_only=True)
    # Whether its builder converts the data layout (the layout axis, workers/layouts.py); the others
    # are planned once, without a layout.
    layouts: bool = field(default=False, kw_only=True)
    # The target kinds its builder tunes (the tuning axis: MetaSchedule on the farm, workers/tuning).
    tunable_kinds: tuple[str, ...] = field(default=(), kw_only=True)
    # What its Runs count in (MS or INSTRUCTIONS).
    unit: str = field(default=MS, kw_only=True)
    # The baseline every ranking compares the compiled configurations with.
    baseline: bool = field(default=False, kw_only=True)
    # Its memory is fixed at build (firmware): the build's static RAM is its peak.
    static_memory: bool = field(default=False, kw_only=True)
    # Executors with the same value lower a configuration to the same program and differ only in codegen
    # (the Relax VM modes): their untuned builds of it share a task, and its Builder runs the pipeline once.
    lowering: str | None = field(default=None, kw_only=True)

    @property
    def builder(self) -> Builder:
        """The executor's Builder."""
        return self.builder_impl if self.builder_impl is not None else self._load("BUILDER")

    @property
    def runner(self) -> Runner:
        """The executor's Runner."""
        return self.runner_impl if self.runner_impl is not None else self._load("RUNNER")

    def shared_lowering(self, job: Job) -> str | None:
        """The key under which the job's build shares its pipeline run with other executors' builds, else None."""
        if self.lowering is None or job.tuning:  # a tuned job's pipeline is its own search
            return None
        return f"{self.lowering}/{job.lowering_key()}"

    def _load(self, attr: str) -> object:
        if self.module is None:
            raise LookupError(f"executor {self.name!r} has no {attr.lower()} and no module to load it from")
        return getattr(importlib.import_module(self.module), attr)


def not_mcu(target: TargetSpec) -> bool:
    """Targets that are not microcontrollers (the Relax VM and ONNX Runtime run on those)."""
    return not is_mcu_target(target.tvm_target)


def mcu_only(target: TargetSpec) -> bool:
    """Microcontroller targets (aot-c builds firmware for those only)."""
    return is_mcu_target(target.tvm_target)
