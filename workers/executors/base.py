"""The two seams of an executor family, and its registry entry.

Shaped after TVM MetaSchedule's builder/ and runner/ packages: each seam is a small interface and a
failure comes back as data (a Build or Run with an error kind), never as an exception crossing a stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tvmbench.core.health import GoldenModel
from tvmbench.core.records import Build, Job, Run, TargetSpec
from workers.aot.boards import is_mcu_target
from workers.program_index import ClaimFn


class Builder(Protocol):
    """Job + ONNX bytes -> (Build, artifact bytes or None). Never raises for a bad model or a compiler error.

    With ``claim`` (workers/program_index.py), a Builder that knows its program before codegen asks
    whether another build compiles it already; if so it returns an ok Build with ``reused_from`` set and
    no artifact. Builders that cannot tell early ignore it.
    """

    def build(self, job: Job, model_data: bytes, *, claim: ClaimFn | None = None) -> tuple[Build, bytes | None]: ...


class Runner(Protocol):
    """Run one built job on a board of its key reached through the tracker: check outputs, then time it.

    ``avoid``/``prefer_not``/``registration_wait_s`` go to the tracker request
    (workers/tracker_client.request_session). With ``golden``, a board not in ``checked_boards`` first
    runs the golden model (runners whose entry has no ``golden_executor`` ignore it).
    """

    def run(
        self,
        job: Job,
        build: Build,
        artifact: bytes,
        inputs: dict[str, np.ndarray],
        reference: list[np.ndarray],
        tracker: str,
        attempt: int = 1,
        builds_in_flight: int | None = None,
        *,
        avoid: frozenset[str] = frozenset(),
        prefer_not: frozenset[str] = frozenset(),
        registration_wait_s: float | None = None,
        golden: GoldenModel | None = None,
        checked_boards: frozenset[str] = frozenset(),
    ) -> Run: ...


@dataclass(frozen=True)
class Executor:
    """One executor name of the sweep files' ``axes.executor``, and what builds and runs it."""

    name: str
    builder: Builder
    runner: Runner
    # Which targets it builds for (microcontrollers take only aot-c, the others only non-MCU executors).
    accepts: Callable[[TargetSpec], bool]
    # The values of the ``axes.kernels`` axis it takes; () when it has no such axis.
    kernel_paths: tuple[str, ...] = ()
    # The executor the golden model is built with for health checks of its boards; None: no health check.
    golden_executor: str | None = None
    # Whether its builder takes the tuning axis (MetaSchedule on the farm, workers/tuning) on llvm targets.
    tunable: bool = False


def not_mcu(target: TargetSpec) -> bool:
    """Targets that are not microcontrollers (the Relax VM and ONNX Runtime run on those)."""
    return not is_mcu_target(target.tvm_target)
