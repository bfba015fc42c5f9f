"""The work a task does: the one place the scheduler calls a Builder or a Runner.

A task carries one item, or a batch of cheap ones (Builders and Runners that answer in milliseconds, whose
Ray round trip would cost more than the work). ``build_one`` and ``measure_one`` run one item wherever the
pool runs them; ``build_on_node`` and ``measure_on_node`` are the Ray task bodies (their names are what
`ps` shows as ``ray::build_on_node`` and what Ray's state API lists).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from tvmbench.core.records import Build, Job, Run
from workers.executors.base import Builder, Runner
from workers.executors.requests import BuildRequest, MeasureRequest
from workers.program_index import ClaimFn, remote_claim
from workers.toolchains.toolchain import Toolchain


@dataclass(frozen=True)
class BuildItem:
    """One build to run: the job's Builder, the model bytes (or a pool reference to them), and its context.

    ``reuse``: the build may skip codegen when another build compiles the same program. ``fence_host``:
    the host fence a build on the driver's machine holds (workers/fence.py). ``tuning_env``: what a
    tuned build needs from the driver (workers/tuning/stage.TuningEnv), None when untuned. ``toolchain``:
    the toolchain of another TVM release that builds it in a child process (workers/toolchains/build.py),
    None to build in this interpreter.
    """

    builder: Builder
    job: Job
    model_data: Any
    reuse: bool = True
    fence_host: str | None = None
    tuning_env: Any = None
    toolchain: Toolchain | None = None


@dataclass(frozen=True)
class MeasureItem:
    """One measurement: the job's Runner and its request (artifact, inputs and reference may be pool references)."""

    runner: Runner
    request: MeasureRequest


@dataclass(frozen=True)
class BuildResult:
    build: Build
    data: bytes | None
    seconds: float  # wall time of the Builder call (whether builds of its executor are cheap enough to batch)


@dataclass(frozen=True)
class MeasureResult:
    run: Run
    seconds: float


def build_one(item: BuildItem, claim: ClaimFn | None, hold: Any, resolve: Any = None) -> BuildResult:
    """``builder.build`` of one item; a tuned job's Builder gets the fence ``hold`` to let go of while it tunes."""
    model_data = resolve(item.model_data) if resolve else item.model_data
    started = time.monotonic()
    if item.toolchain is not None:
        # A child process under the toolchain's interpreter: two TVM releases cannot share this worker,
        # and a release whose libraries fail takes the child down, not the worker (DESIGN.md, toolchains).
        # No program reuse across it: its fingerprints are its release's, claimed by none of this one's.
        # A tuned job tunes there too, asking the host fence through this task, which lets go of its own
        # build hold meanwhile (workers/toolchains/tuning.py).
        from workers.toolchains.build import build_in_toolchain

        build, data = build_in_toolchain(item.toolchain, item.job, model_data, tuning_env=item.tuning_env, hold=hold)
        return BuildResult(build, data, time.monotonic() - started)
    request = BuildRequest(item.job, model_data, claim=claim, hold=hold, tuning_env=item.tuning_env)
    build, data = item.builder.build(request)
    return BuildResult(build, data, time.monotonic() - started)


def build_batch(items: list[BuildItem], claim: ClaimFn | None, resolve: Any = None) -> list[BuildResult]:
    """The items built in turn, holding the host fence on the driver's machine (workers/fence.py) meanwhile.

    The items of one task share the fence host (the pool's; None for a golden build).
    """
    from workers.fence import local_fence

    with local_fence(items[0].fence_host).building() as hold:
        return [build_one(item, claim if item.reuse else None, hold, resolve) for item in items]


def measure_one(item: MeasureItem, resolve: Any = None) -> MeasureResult:
    """``runner.run`` of one item (no CPU: the board does the work)."""
    request = item.request
    if resolve is not None:
        bulky = ("artifact", "inputs", "reference")
        request = replace(request, **{name: resolve(getattr(request, name)) for name in bulky})
    started = time.monotonic()
    run = item.runner.run(request)
    return MeasureResult(run, time.monotonic() - started)


# What an attempt that ends so says about its board changes the next request (avoid, prefer_not, how long
# to wait for a board): a batch stops there and the driver submits the rest afresh.
STOPS_A_BATCH = ("infra", "timeout", "pending-device")


def measure_batch(items: list[MeasureItem], resolve: Any = None) -> list[MeasureResult]:
    """The items measured in turn, up to the first whose status is in STOPS_A_BATCH (the rest not run)."""
    results = []
    for item in items:
        results.append(measure_one(item, resolve))
        if results[-1].run.status in STOPS_A_BATCH:
            break
    return results


def _ray_resolve(value: Any) -> Any:
    """An object reference nested in an item (Ray resolves only top-level arguments) -> its value."""
    import ray

    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


def build_on_node(items: list[BuildItem], index: Any = None) -> list[BuildResult]:
    """The Ray build task: ``build_batch``; a build's host becomes "hostname/ray-node-id" to show where it ran.

    ``index``: the sweep's program index actor (identical programs skip codegen), or None.
    """
    import ray

    node = ray.get_runtime_context().get_node_id()
    claim = remote_claim(index) if index is not None else None
    return [
        replace(done, build=replace(done.build, host=f"{done.build.host}/{node}"))
        for done in build_batch(items, claim, _ray_resolve)
    ]


def measure_on_node(items: list[MeasureItem]) -> list[MeasureResult]:
    """The Ray measurement task: ``measure_batch`` (a batch holds one board slot of its key)."""
    return measure_batch(items, _ray_resolve)
