"""The executors by name: what builds and runs each ``axes.executor`` value of a sweep file, and its traits.

Adding an executor is one module in this package (a Builder as ``BUILDER``, a Runner as ``RUNNER``)
plus its entry below, which declares its traits. Nothing outside this module asks which executor a job
has: the rest of the code asks the entry (``for_job(job).builder`` ...) or a trait (``tunable``,
``baseline_names`` ...), so this is the one place that knows them all.

Cheap to import (the answers read traits): an executor's module, and with it TVM or ONNX Runtime, is
loaded only when its Builder or Runner is first asked for.
"""

from __future__ import annotations

from typing import Any

from tvmbench.core.records import Build, Job, Run, TargetSpec
from workers.aot.kernels import KERNEL_PATHS as AOT_KERNEL_PATHS
from workers.executors.base import INSTRUCTIONS, Executor, mcu_only, not_mcu
from workers.executors.requests import BuildRequest, MeasureRequest

_RELAX_VM = "workers.executors.relax_vm"
_ENTRIES: tuple[Executor, ...] = (
    # Both VM modes build and run the same way; exec_mode comes from the name ("bytecode" / "compiled").
    *(
        Executor(
            name,
            module=_RELAX_VM,
            accepts=not_mcu,
            golden_executor=name,
            tunable_kinds=("llvm",),
            layouts=True,
            lowering="relax-vm",
        )
        for name in ("vm-bytecode", "vm-compiled")
    ),
    # The golden model is a Relax VM program: boards of the baseline are not health-checked.
    Executor("onnxruntime", module="workers.executors.onnxruntime", accepts=not_mcu, baseline=True),
    # Microcontrollers take only this executor, and it takes only them; the kernels axis picks the codegen.
    Executor(
        "aot-c",
        module="workers.executors.aot_c",
        accepts=mcu_only,
        kernel_paths=AOT_KERNEL_PATHS,
        unit=INSTRUCTIONS,
        static_memory=True,
    ),
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


def tunable(name: str, tvm_target: dict[str, Any]) -> bool:
    """Whether executor ``name`` tunes jobs on ``tvm_target`` (the only place that says which kinds)."""
    kinds = get(name).tunable_kinds
    if not kinds:
        return False
    from workers.targets import target_kind  # a {"tag": ...} target needs TVM to name its kind

    return target_kind(tvm_target) in kinds


def takes_layouts(name: str) -> bool:
    """Whether executor ``name`` takes the layout axis (its builder converts the module's layout)."""
    return get(name).layouts


def layout_names() -> tuple[str, ...]:
    """The executors that take the layout axis, in registry order."""
    return tuple(e.name for e in _ENTRIES if e.layouts)


def tunable_names() -> tuple[str, ...]:
    """The executors that tune some target kind, in registry order."""
    return tuple(e.name for e in _ENTRIES if e.tunable_kinds)


def tunable_kinds() -> tuple[str, ...]:
    """Every target kind some executor tunes."""
    return tuple(dict.fromkeys(k for e in _ENTRIES for k in e.tunable_kinds))


def baseline_names() -> tuple[str, ...]:
    """The baseline executors: rankings compare every other configuration with them."""
    return tuple(e.name for e in _ENTRIES if e.baseline)


def static_memory_names() -> tuple[str, ...]:
    """The executors whose memory is fixed at build: their build's static RAM is their peak."""
    return tuple(e.name for e in _ENTRIES if e.static_memory)


def unit(name: str) -> str:
    """What executor ``name``'s Runs count in ("ms", or "instructions" on emulated microcontrollers)."""
    return get(name).unit


def build_job(request: BuildRequest) -> tuple[Build, bytes | None]:
    """Build one job with its executor's Builder; failures come back as a Build with an error kind."""
    return for_job(request.job).builder.build(request)


def measure_job(request: MeasureRequest) -> Run:
    """Run one built job with its executor's Runner."""
    return for_job(request.job).runner.run(request)
