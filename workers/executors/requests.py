"""What a Builder and a Runner are asked to do, as records (MetaSchedule's BuilderInput and RunnerInput).

A request carries everything one build or one measurement attempt needs, so the seam is one argument
that grows a field (a toolchain, a new board option) without every executor's signature changing.
Cheap to import: the registry, and through it the answers, load this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tvmbench.core.records import Build, Job

if TYPE_CHECKING:
    import numpy as np

    from tvmbench.core.health import GoldenModel
    from workers.program_index import ClaimFn


@dataclass(frozen=True)
class BuildRequest:
    """One job to build from its ONNX model's bytes."""

    job: Job
    model_data: bytes
    # Program reuse (workers/program_index.py): a Builder that knows its program before codegen asks
    # whether another build compiles it already; Builders that cannot tell early ignore it.
    claim: ClaimFn | None = None
    # The build's host-fence hold (workers/fence.py): a tuned build lets go of it while candidates are timed.
    hold: Any = None
    # What a tuned job (``job.tuning`` > 0) needs from the driver: a workers.tuning.stage.TuningEnv (not
    # imported: workers.tuning imports workers.board_session, which imports this module).
    tuning_env: Any = None
    # The TVM toolchain to build with (the releases axis); None: the one this worker runs.
    toolchain: str | None = None


@dataclass(frozen=True)
class MeasureRequest:
    """One attempt at checking a built job's outputs and timing it on a board of its key."""

    job: Job
    build: Build
    artifact: bytes
    inputs: dict[str, np.ndarray]
    reference: list[np.ndarray]
    tracker: str
    attempt: int = 1
    builds_in_flight: int | None = None  # build tasks running on the farm's machine as it started (the record)
    # To the tracker request (workers/tracker_client.request_session): boards to skip, boards to take
    # last, and how long to wait for a key with no board registered (None: the settings' wait).
    avoid: frozenset[str] = frozenset()
    prefer_not: frozenset[str] = frozenset()
    registration_wait_s: float | None = None
    # With a golden model, a board not in ``checked_boards`` runs it first (runners without a golden
    # check ignore it).
    golden: GoldenModel | None = None
    checked_boards: frozenset[str] = frozenset()


def foreign_toolchain(request: BuildRequest, common: dict[str, Any]) -> Build | None:
    """The failed Build when the request names a toolchain other than the running one, else None.

    ``common``: the build's identity (workers/build_common.build_identity). Until the releases axis
    brings other toolchains, a build never silently uses the wrong TVM.
    """
    wanted = request.toolchain
    if wanted is None or wanted == common["tvm_version"]:
        return None
    return Build(
        status="build",
        error=f"toolchain {wanted!r} asked for, but this worker builds with TVM {common['tvm_version']} only",
        **common,
    )
