"""The executors by name: what builds and runs each ``axes.executor`` value of a sweep file.

Adding an executor is one module in this package (a Builder, a Runner and its ``Executor`` entry)
plus one line below. Nothing outside this module asks which executor a job has: the rest of the code
asks the entry (``for_job(job).builder`` ...), so this is the one place that knows them all.
"""

from __future__ import annotations

import numpy as np

from tvmbench.core.records import Build, Job, Run, TargetSpec
from workers.executors import aot_c, onnxruntime, relax_vm
from workers.executors.base import Executor
from workers.program_index import ClaimFn

_ENTRIES: tuple[Executor, ...] = (
    *relax_vm.EXECUTORS,  # vm-bytecode, vm-compiled
    onnxruntime.EXECUTOR,  # the baseline
    aot_c.EXECUTOR,  # microcontrollers
)
REGISTRY: dict[str, Executor] = {e.name: e for e in _ENTRIES}
NAMES: tuple[str, ...] = tuple(REGISTRY)
# Every kernels-axis value some executor takes, for validating sweep files.
KERNEL_PATHS: tuple[str, ...] = tuple(dict.fromkeys(k for e in _ENTRIES for k in e.kernel_paths))


def get(name: str) -> Executor:
    """The entry of executor ``name`` (KeyError naming the known ones)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown executor {name!r}: use one of {', '.join(NAMES)}") from None


def for_job(job: Job) -> Executor:
    """The entry of the job's executor."""
    return get(job.executor)


def accepts(name: str, target: TargetSpec) -> bool:
    """Whether executor ``name`` builds for ``target``."""
    return get(name).accepts(target)


def build_job(job: Job, model_data: bytes, *, claim: ClaimFn | None = None) -> tuple[Build, bytes | None]:
    """Build one job with its executor's Builder; failures come back as a Build with an error kind.

    ``claim``: see ``Builder`` (identical programs skip codegen).
    """
    return for_job(job).builder.build(job, model_data, claim=claim)


def measure_job(
    job: Job,
    build: Build,
    artifact: bytes,
    inputs: dict[str, np.ndarray],
    reference: list[np.ndarray],
    tracker: str,
    attempt: int = 1,
    builds_in_flight: int | None = None,
    **board: object,
) -> Run:
    """Run one built job with its executor's Runner (``board``: see ``Runner.run``'s keyword options)."""
    return for_job(job).runner.run(
        job,
        build,
        artifact,
        inputs,
        reference,
        tracker,
        attempt,
        builds_in_flight,
        **board,  # type: ignore[arg-type]
    )
