"""An in-process MetaSchedule Builder and Runner for the records tests (no farm, no Ray).

The stock LocalBuilder/LocalRunner start popen workers that take tens of seconds per batch on a loaded
2-core machine (see the shared TVM notes); these tests are about what the database keeps, so candidates
are built with ``tvm.compile`` and timed with ``time_evaluator`` in this process.
"""

from __future__ import annotations

import os
import tempfile

import tvm
from tvm import te
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerInput, RunnerResult
from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

TARGET = {"kind": "llvm", "num-cores": 1}


def matmul_module(n: int = 64) -> tvm.IRModule:
    """A plain n x n float32 matmul as a one-function IRModule (the workload of the records tests)."""
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")})


@derived_object
class InProcessBuilder(PyBuilder):
    """Builds every candidate with tvm.compile here; each artifact in its own temp directory.

    (MetaSchedule deletes the artifact's parent directory after the run.)
    """

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        results = []
        for inp in build_inputs:
            try:
                lib = tvm.compile(inp.mod, target=inp.target)
                path = os.path.join(tempfile.mkdtemp(prefix="tvmbench-cand-"), "cand.so")
                lib.export_library(path)
                results.append(BuilderResult(path, None))
            except Exception as exc:  # a candidate that fails to build is a failed trial, not a crash
                results.append(BuilderResult(None, f"{type(exc).__name__}: {exc}"))
        return results


@derived_object
class _DoneFuture(ms.runner.PyRunnerFuture):
    def __init__(self, result: RunnerResult) -> None:
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self) -> RunnerResult:
        return self._result


@derived_object
class InProcessRunner(PyRunner):
    """Times every candidate on this machine's CPU with time_evaluator (number=3, repeat=1)."""

    def run(self, runner_inputs: list[RunnerInput]) -> list[RunnerFuture]:
        futures = []
        dev = tvm.cpu()
        for inp in runner_inputs:
            try:
                mod = tvm.runtime.load_module(inp.artifact_path)
                (args,) = default_alloc_argument(dev, [a.as_json() for a in inp.args_info], 1)
                timer = mod.time_evaluator(mod.entry_name, dev, number=3, repeat=1)
                res = RunnerResult([float(x) for x in timer(*args).results], None)
            except Exception as exc:
                res = RunnerResult(None, f"{type(exc).__name__}: {exc}")
            futures.append(_DoneFuture(res))
        return futures
