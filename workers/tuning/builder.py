"""MetaSchedule's Builder as Ray tasks: a batch of candidates compiles across the cluster's CPUs.

The stock ``LocalBuilder`` forks a fresh Python per batch through its popen pool; on a loaded 2-core
machine that took ~45 s for one trivial candidate and timed every candidate out at 30 s. Ray workers
stay warm (``import tvm`` is paid once per worker), so a candidate costs what ``tvm.compile`` costs.

Each candidate comes back as the bytes of a shared library (``.so``; for a cross target linked by the
target's cross compiler, since a board has no compiler to link the default ``.tar``), written into its
own ``tempfile.mkdtemp()``: after running a candidate, MetaSchedule deletes the *parent directory* of its
artifact (``remove_build_dir``), so an artifact written straight into the system temp directory would
take that whole directory with it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder

from workers.fence import Fence
from workers.tuning.stats import TuningStats

ARTIFACT_NAME = "candidate.so"


@dataclass(frozen=True)
class BuiltCandidate:
    """A built candidate's shared library, and where its build's seconds went."""

    data: bytes
    fence_wait_s: float  # waiting for the host fence (a board on this machine was timing)
    compile_s: float  # lowering, LLVM and linking: the candidate's own cost


def compile_candidate(
    mod_json: str, target_str: str, cross_compiler: str | None, fence_host: str | None, holder: str | None = None
) -> bytes:
    """Build one scheduled candidate: TIR module JSON -> shared-library bytes (``build_candidate``'s data)."""
    return build_candidate(mod_json, target_str, cross_compiler, fence_host, holder).data


def build_candidate(
    mod_json: str, target_str: str, cross_compiler: str | None, fence_host: str | None, holder: str | None = None
) -> BuiltCandidate:
    """Build one scheduled candidate (a Ray task body), timing the compile apart from the fence wait.

    Raises on a compiler error; the builder turns that into the candidate's error message. ``holder``: the
    name of its fence hold, which the builder lets go of itself when it cancels the build.
    """
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.target import Target

    from workers.fence import local_fence
    from workers.tuning.preload import preload_tensor_intrin

    preload_tensor_intrin()  # registers the intrinsics tensorised schedules use (slow import, made fast)
    with local_fence(fence_host).building(holder=holder) as hold:
        started = time.perf_counter()
        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(tvm.ir.load_json(mod_json))
        lib = tvm.compile(mod, target=Target(target_str))
        folder = tempfile.mkdtemp(prefix="tvmbench-cand-build-")
        try:
            path = os.path.join(folder, ARTIFACT_NAME)
            if cross_compiler:
                from tvm.support import cc

                lib.export_library(path, fcompile=cc.cross_compiler(cross_compiler))
            else:
                lib.export_library(path)
            with open(path, "rb") as f:
                data = f.read()
        finally:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
        return BuiltCandidate(data, hold.waited_s, time.perf_counter() - started)


def _artifact(data: bytes) -> BuilderResult:
    """A built candidate, in a folder of its own (see the module docstring)."""
    folder = tempfile.mkdtemp(prefix="tvmbench-cand-")
    path = os.path.join(folder, ARTIFACT_NAME)
    with open(path, "wb") as f:
        f.write(data)
    return BuilderResult(path, None)


def _built(stats: TuningStats, built: BuiltCandidate) -> BuilderResult:
    """A built candidate's artifact, its compile and fence seconds counted in the tuning stats."""
    stats.built(built.compile_s, built.fence_wait_s)
    return _artifact(built.data)


def _failed(stats: TuningStats, kind: str, message: str) -> BuilderResult:
    """A failed candidate build, counted by kind in the tuning stats."""
    stats.fail(kind, message)
    return BuilderResult(None, f"{kind}: {message}")


def warm_worker(fence_host: str | None = None) -> float:
    """Import what a candidate build needs (a Ray task body); returns the seconds it took.

    ``import tvm`` alone took 17 s in a fresh Ray worker on a loaded 2-core machine: paid once per worker
    before the first batch, it does not eat into every candidate's build timeout. It is a build's work on
    this machine's cores, so it holds the fence like one (``fence_host``, as ``build_candidate``).
    """
    from workers.fence import local_fence

    with local_fence(fence_host).building():
        started = time.perf_counter()
        import tvm  # noqa: F401

        from workers.tuning.preload import preload_tensor_intrin

        preload_tensor_intrin()  # without it TVMScript's inspect.stack() made this minutes in a Ray worker
        return time.perf_counter() - started


@derived_object
class RayBuilder(PyBuilder):
    """Builds each batch of MetaSchedule candidates as one Ray task per candidate.

    ``timeout_s`` bounds each candidate: the batch may take a CPU's worth of candidates at a time until
    its last ones are all running (no more than the cluster's CPUs left), and those get ``timeout_s``
    from then. A candidate past it is cancelled and becomes a build error, and its hold on the host fence
    is let go of here (a force-cancelled task never reaches its own release: one such hold kept every
    timing on the host waiting for the hold's 30-minute TTL, after one NHWC light_squeezenet candidate
    compiled for 16 minutes).
    ``stop()`` (checked while waiting) ends a batch early: unfinished candidates become build errors.
    ``pause()`` lets go of the tuning thread's fence hold while it waits for the batch (workers/tuning/runner.py
    says why the thread holds one).
    """

    def __init__(
        self,
        *,
        cross_compiler: str | None = None,
        fence_host: str | None = None,
        timeout_s: float = 120.0,
        stats: TuningStats | None = None,
        stop: Any = None,
        pause: Any = None,
    ) -> None:
        import ray

        super().__init__()
        self.cross_compiler = cross_compiler
        self.fence_host = fence_host
        self.timeout_s = timeout_s
        self.stats = stats or TuningStats()
        self.stop = stop
        self.pause = pause
        # Candidates are pure functions of their input: a worker that dies is simply re-run.
        self._remote = ray.remote(num_cpus=1, max_retries=1)(build_candidate)
        self._cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._warm = False

    def _warm_up(self) -> None:
        import ray

        warm = ray.remote(num_cpus=1)(warm_worker)
        refs = [warm.remote(self.fence_host) for _ in range(min(self._cpus, 8))]
        ray.wait(refs, num_returns=len(refs), timeout=600)
        self._warm = True

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        import ray
        import tvm

        if not self._warm:  # the warm-up holds the fence: this thread's hold must not fence it out
            with self.pause() if self.pause is not None else contextlib.nullcontext():
                self._warm_up()
        started = time.perf_counter()
        holders = [uuid.uuid4().hex for _ in build_inputs]
        refs = [
            self._remote.remote(tvm.ir.save_json(bi.mod), str(bi.target), self.cross_compiler, self.fence_host, h)
            for bi, h in zip(build_inputs, holders, strict=True)
        ]
        pending = set(refs)
        # The timeout is per candidate; a batch runs a CPU's worth of candidates at a time.
        rounds = -(-len(refs) // self._cpus)
        deadline = time.monotonic() + self.timeout_s * max(1, rounds)
        last_running = False  # no more candidates left than CPUs: each of them has had its CPU since
        with self.pause() if self.pause is not None else contextlib.nullcontext():
            while pending and time.monotonic() < deadline:
                if self.stop is not None and self.stop():
                    break
                _, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=0.25)
                pending = set(not_ready)
                if not last_running and len(pending) <= self._cpus:
                    last_running = True
                    deadline = min(deadline, time.monotonic() + self.timeout_s)
        results = []
        for ref, holder in zip(refs, holders, strict=True):
            if ref in pending:
                ray.cancel(ref, force=True)
                Fence(self.fence_host).release(holder)
                if self.stop is not None and self.stop():  # not the candidate's fault: the search's time is up
                    results.append(self._failed("build-stopped", "candidate build stopped"))
                else:
                    results.append(
                        self._failed("build-timeout", f"candidate build timed out after {self.timeout_s:g}s")
                    )
                continue
            try:
                built = ray.get(ref)
            except Exception as exc:  # the compiler refused the schedule: a failed trial, not a failed job
                from tvmbench.core.errors import one_line

                results.append(self._failed("build", one_line(exc)))
                continue
            results.append(_built(self.stats, built))
        self.stats.add_time("build_s", time.perf_counter() - started)
        return results

    def _failed(self, kind: str, message: str) -> BuilderResult:
        return _failed(self.stats, kind, message)


@derived_object
class InProcessBuilder(PyBuilder):
    """Builds each batch of candidates in this process, one after another: a toolchain's child has no Ray.

    The same ``build_candidate`` as the Ray tasks, so a candidate is the same ``.so`` either way. Nothing
    bounds one compile here (``timeout_s`` is kept for the signature); the child's parent bounds the whole
    build. ``stop()`` true turns the rest of a batch into build errors.
    """

    def __init__(
        self,
        *,
        cross_compiler: str | None = None,
        fence_host: str | None = None,
        timeout_s: float = 120.0,
        stats: TuningStats | None = None,
        stop: Any = None,
        fence: Any = None,
    ) -> None:
        super().__init__()
        self.cross_compiler = cross_compiler
        self.fence_host = fence_host
        self.timeout_s = timeout_s
        self.stats = stats or TuningStats()
        self.stop = stop
        self.fence = fence  # held (``building()``) around each compile, else the host's fence is

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        import tvm

        from tvmbench.core.errors import one_line

        started = time.perf_counter()
        results = []
        for bi in build_inputs:
            if self.stop is not None and self.stop():
                results.append(self._failed("build-stopped", "candidate build stopped"))
                continue
            hold = self.fence.building() if self.fence is not None else contextlib.nullcontext()
            fence_host = None if self.fence is not None else self.fence_host
            try:
                with hold:
                    built = build_candidate(tvm.ir.save_json(bi.mod), str(bi.target), self.cross_compiler, fence_host)
            except Exception as exc:  # the compiler refused the schedule: a failed trial, not a failed job
                results.append(self._failed("build", one_line(exc)))
                continue
            results.append(_built(self.stats, built))
        self.stats.add_time("build_s", time.perf_counter() - started)
        return results

    def _failed(self, kind: str, message: str) -> BuilderResult:
        return _failed(self.stats, kind, message)
