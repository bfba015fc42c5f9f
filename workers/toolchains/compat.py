"""What the build path needs of a TVM release, in one place; run as a module, the facts of the TVM it runs on.

Compared on 0.25.0.post1 (ffi 0.1.12), 0.26.0 (ffi 0.1.15.post2) and 0.27.0.post1 (ffi 0.1.14.post1),
x86_64, Python 3.11: every name the build and run code touches (``BUILD_MODULES``, ``BUILD_SURFACE``) is at
the same place in all three, ``relax.build`` and ``from_onnx`` have the same signatures, and
``workers.executors.relax_vm`` builds, exports, loads and times unchanged on each. On a small conv net (both
VM executors, both pipelines, opt_level 0 and 3) the three gave the same kernel counts (12 at 0, 7 at 3
per-target), the same pass counts (205 / 209 per-target, 79 generic) and the same static memory plan.
What does differ:

- the apache-tvm-ffi each release loads with (``pins.py``);
- one pass name: 0.25 and 0.26 record ``tirx.StmtSimplify`` where 0.27 records ``s_tir.StmtSimplify``
  (same place in the trace), so a trace diff across releases must compare ``normalized_trace``;
- 0.25's artifacts are about 10 % larger (182 KB against 169 KB for the same program at opt_level 0).

A release that moves one of the build path's names fails the import check at ``toolchains add``, naming
it, not a build later; a difference the build code must bridge gets its accessor here.

This module runs under a toolchain's interpreter: standard library at the top, TVM inside functions.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

# Modules the build (relax_vm, memory_plan, build_common) and the VM run import.
BUILD_MODULES: tuple[str, ...] = (
    "tvm_ffi",
    "tvm.relax.frontend.onnx",
    "tvm.s_tir.meta_schedule",
    "tvm.s_tir.dlight",
    "tvm.support.cc",
    "tvm.ir.instrument",
    "onnx",
    "numpy",
)
# Attributes they call, as dotted paths from an imported module.
BUILD_SURFACE: tuple[str, ...] = (
    "tvm.relax.frontend.onnx.from_onnx",
    "tvm.transform.PassContext",
    "tvm.instrument.pass_instrument",
    "tvm.target.Target",
    "tvm.relax.get_default_pipeline",
    "tvm.relax.get_pipeline",
    "tvm.relax.build",
    "tvm.compile",
    "tvm.relax.analysis.estimate_memory_usage",
    "tvm.relax.VirtualMachine",
    "tvm.tirx.PrimFunc",
    "tvm_ffi.structural_hash",
    "tvm.support.cc.cross_compiler",
    "tvm.runtime.load_module",
    "tvm.runtime.tensor",
)

# What a tuned build calls besides (workers/tuning: stage, builder, runner, database), checked by a toolchain's
# child before it tunes. Present, with the same signatures, in 0.26.0 and 0.27.0.post1 (tune_tasks,
# extracted_tasks_to_tune_contexts, JSONDatabase, PyRunner/PyBuilder, alloc_argument_common); a tuned
# 0.26.0 build tunes with the project's code unchanged (tests/test_releases_tuning.py).
TUNING_SURFACE: tuple[str, ...] = (
    "tvm.s_tir.meta_schedule.tune_tasks",
    "tvm.s_tir.meta_schedule.relax_integration.extracted_tasks_to_tune_contexts",
    "tvm.s_tir.meta_schedule.relax_integration.extract_tasks",
    "tvm.s_tir.meta_schedule.database.JSONDatabase",
    "tvm.s_tir.meta_schedule.database.database._PyDatabase",
    "tvm.s_tir.meta_schedule.builder.PyBuilder",
    "tvm.s_tir.meta_schedule.runner.PyRunner",
    "tvm.s_tir.meta_schedule.runner.utils.alloc_argument_common",
    "tvm.s_tir.meta_schedule.measure_callback.PyMeasureCallback",
    "tvm.s_tir.meta_schedule.task_scheduler.PyTaskScheduler",  # the auto budget's scheduler (tuning/auto.py)
    "tvm.s_tir.meta_schedule.search_strategy.PySearchStrategy",  # the warm start's and the first round's
    "tvm.s_tir.transform.RemoveWeightLayoutRewriteBlock",
    "tvm.relax.transform.MetaScheduleApplyDatabase",
    "tvm.ir.utils.derived_object",
    "tvm.rpc.connect_tracker",
)

# Pass names that a release renamed, old -> the name 0.27 records: the same pass at the same place.
PASS_RENAMES: dict[str, str] = {"tirx.StmtSimplify": "s_tir.StmtSimplify"}


def normalized_trace(trace: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """A pass trace with renamed passes under one name, so traces of two releases compare pass by pass."""
    return tuple(PASS_RENAMES.get(name, name) for name in trace)


def _resolve(dotted: str) -> Any:
    """The object at a dotted path, importing the longest module prefix first."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no module {parts[0]}")


def missing_surface(*, tuning: bool = False) -> list[str]:
    """The modules and names of the build path (``tuning``: of the tuning stage) this TVM lacks ("name: why"),
    [] when it has them all."""
    missing = []
    for name in TUNING_SURFACE if tuning else (*BUILD_MODULES, *BUILD_SURFACE):
        try:
            if name in BUILD_MODULES:
                importlib.import_module(name)
            else:
                _resolve(name)
        except Exception as exc:
            missing.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip())
    return missing


def loaded_libraries() -> list[str]:
    """TVM's shared libraries this process loaded (their paths; what a broken install loses first)."""
    found: dict[str, None] = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if "/libtvm" in path and path.endswith(".so"):
                    found[path] = None
    except OSError:  # not Linux: the check falls back to the import alone
        pass
    return list(found)


def serialise_smoke() -> None:
    """Save and load one IR node as JSON: the call MetaSchedule makes for every record and workload, and
    the one a mismatched apache-tvm-ffi kills the process in (0.27.0.post1 with ffi 0.1.15.post2)."""
    import tvm

    if int(tvm.ir.load_json(tvm.ir.save_json(tvm.tirx.IntImm("int32", 7)))) != 7:
        raise RuntimeError("tvm.ir.save_json / load_json do not round-trip an integer")


def facts() -> dict[str, Any]:
    """The TVM of this interpreter: versions, what the build path misses, its loaded libraries."""
    import tvm
    import tvm_ffi

    missing = missing_surface()
    if not missing:
        try:
            serialise_smoke()
        except Exception as exc:
            missing.append(f"tvm.ir.save_json: {type(exc).__name__}: {exc}")
    return {
        "tvm_version": tvm.__version__,
        "ffi_version": tvm_ffi.__version__,
        "python": sys.executable,
        "python_version": ".".join(map(str, sys.version_info[:3])),
        "missing": missing,
        "libraries": loaded_libraries(),
    }


def quick_facts() -> dict[str, Any]:
    """The versions alone (``import tvm`` and nothing else): the cheap health check."""
    import tvm
    import tvm_ffi

    return {"tvm_version": tvm.__version__, "ffi_version": tvm_ffi.__version__}


def main(argv: list[str]) -> int:
    """Print this interpreter's TVM facts as one JSON line (``--quick``: versions only)."""
    result = quick_facts() if "--quick" in argv else facts()
    sys.stdout.write("TVMBENCH-FACTS " + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
