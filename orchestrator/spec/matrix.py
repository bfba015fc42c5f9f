"""The sweep's matrix: each job's axis values, in plan order, without making a job (orchestrator/plan.py
makes them); and the cap on its size, checked when the sweep file is read.

``spec`` is a SweepSpec (orchestrator/spec/sweep.py), which imports this module to check the size: typed
``Any`` here, since an import back (even for type checking) would be a circle.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from orchestrator.spec.checks import SpecError
from workers.executors import registry

# A sweep is a unit of work one farm finishes and one table shows; a bigger matrix is almost always an axis
# written by mistake (tuning = [0, 10, ..., 99990]), and would take minutes and gigabytes only to plan.
MAX_JOBS = 10_000


def configurations(spec: Any) -> Iterator[tuple[Any, ...]]:
    """(model, target, executor, opt_level, pipeline, kernels, layout, budget, toolchain) of each job.

    A target pairs only with the executors that accept it; the kernels axis multiplies only the executors
    that take it, the layout axis the Relax VM executors, the tuning axis the tunable jobs (the others are
    planned once, budget 0); with a tvm axis a job per release, adjacent (they build one after another).
    A baseline (ONNX Runtime) builds nothing of TVM's: one job per model and target, at the first opt_level
    and pipeline (the key it always had there), on the installed release's boards.
    """
    first = (spec.opt_levels[0], spec.pipelines[0])
    for m, t, e, o, p in itertools.product(spec.models, spec.targets, spec.executors, spec.opt_levels, spec.pipelines):
        entry = registry.get(e)
        if not entry.accepts(t):
            continue
        if entry.baseline:
            # Before, ORT ran once per opt_level x pipeline x release: identical runs under TVM labels, and on
            # another release's boards, which have no ONNX Runtime (a `build` error read as TVM's regression).
            if (o, p) == first:
                yield m, t, e, o, p, None, None, 0, None
            continue
        budgets = spec.tunings if registry.tunable(e, t.tvm_target) else (0,)
        layouts = (spec.layouts if entry.layouts else ()) or (None,)
        kernels = [k for k in spec.kernels if k in entry.kernel_paths] or [None]
        for k, layout, budget in itertools.product(kernels, layouts, budgets):
            for toolchain in spec.toolchains or (None,):
                yield m, t, e, o, p, k, layout, budget, toolchain


def check_size(spec: Any) -> None:
    """SpecError when the matrix holds more than MAX_JOBS jobs (counted, never listed)."""
    if sum(1 for _ in itertools.islice(configurations(spec), MAX_JOBS + 1)) <= MAX_JOBS:
        return
    axes = {
        "models": len(spec.models),
        "targets": len(spec.targets),
        "executor": len(spec.executors),
        "opt_level": len(spec.opt_levels),
        "pipeline": len(spec.pipelines),
        "kernels": len(spec.kernels),
        "layout": len(spec.layouts),
        "tuning": len(spec.tunings),
        "tvm": len(spec.toolchains),
    }
    sizes = " x ".join(f"{n} {name}" for name, n in axes.items() if n > 1)
    raise SpecError(
        f"[axes]: the sweep makes more than {MAX_JOBS:,} jobs ({sizes}); split it into several sweeps or narrow an axis"
    )
