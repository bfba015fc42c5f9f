"""RayPool against a real local Ray: how many builds it runs at once does not depend on the moment.

Placement over several nodes (SPREAD) is checked on a real two-node cluster in tests/test_multinode.py.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import pytest
import ray

from orchestrator.farm import wait_until
from orchestrator.scheduling.pool import TaskLost
from orchestrator.scheduling.ray_pool import RayPool
from orchestrator.scheduling.tasks import BuildItem
from tvmbench.core.records import Job, ModelRef, TargetSpec
from workers.fence import Fence, create_fence


@ray.remote(num_cpus=1)
class _Holder:
    """Holds one CPU while it lives, as a job's supervisor or another sweep's last build may."""

    def ready(self) -> bool:
        return True


def test_builds_at_once_are_the_clusters_cpus_not_those_free_at_start(ray_local: None) -> None:
    total = int(ray.cluster_resources()["CPU"])
    holder = _Holder.remote()
    try:
        ray.get(holder.ready.remote(), timeout=120)
        wait_until(lambda: ray.available_resources().get("CPU", 0) < total, 60, "the holder to take its CPU")
        pool = RayPool("ray-pool-test")
        try:
            assert pool.cpus() == total
        finally:
            pool.close()
    finally:
        ray.kill(holder)
    assert RayPool("ray-pool-test", max_builds=1).cpus() == 1


class _DyingBuilder:
    """Kills the Ray worker that runs its build, as the OOM killer or a segfault in LLVM would."""

    def build(self, request: Any) -> Any:
        os._exit(1)


def test_a_build_whose_worker_keeps_dying_is_lost_not_failed(ray_local: None) -> None:
    job = Job(
        model=ModelRef("tiny_mlp", "0" * 64, "tiny_mlp.onnx", (("x", (1, 16), "float32"),)),
        target=TargetSpec("host", tvm_target={"kind": "llvm"}, board_key="k", arch="x86_64"),
        executor="vm-bytecode",
        opt_level=2,
        pipeline="per-target",
    )
    pool = RayPool("ray-pool-lost-test")
    try:
        handle = pool.submit_builds([BuildItem(_DyingBuilder(), job, b"model", reuse=False)])  # type: ignore[arg-type]
        wait_until(lambda: pool.wait([handle], 1.0) == [handle], 300, "Ray to give up on the dying build")
        # After Ray's own retries: TaskLost (the sweep leaves the jobs pending), not the build's own failure.
        with pytest.raises(TaskLost, match=r"^WorkerCrashedError: .*worker died"):
            pool.result(handle)
    finally:
        pool.close()


def test_the_fence_lives_through_every_sweep_of_one_process(ray_local: None) -> None:
    """Each RayPool (one per sweep run) calls create_fence; the second one dropped the handle that kept the
    actor, so every second sweep of a process (the API, a notebook, these tests) ran with no fence at all."""
    for run in range(3):
        RayPool(f"fence-lives-{run}").close()
        gc.collect()  # the dropped handle goes now, not whenever Python gets to it
        assert Fence(create_fence()).state() is not None, f"the fence actor is gone after sweep {run + 1}"


def _pid(busy_s: float = 0.0) -> int:
    import time

    started = time.perf_counter()
    while time.perf_counter() - started < busy_s:  # on its CPU, so that the batch needs both
        pass
    return os.getpid()


def _batches(n: int, pause_s: float) -> tuple[set[int], set[int]]:
    """A build task's batches of one-CPU tasks, each followed by zero-CPU tasks and an idle pause (a tuning
    search's shape: candidates built, measured, the next ones searched for); the workers that ran any of
    them, and those of them still alive at the end."""
    import time

    child = ray.remote(num_cpus=1)(_pid)
    seen: set[int] = set()
    for _ in range(n):
        seen |= set(ray.get([child.remote(0.3) for _ in range(6)]))
        seen |= set(ray.get([ray.remote(num_cpus=0)(_pid).remote() for _ in range(2)]))
        time.sleep(pause_s)  # the workers' idleness is what is under test, not a condition to poll for
    return seen, {pid for pid in seen if Path(f"/proc/{pid}").exists()}


def test_workers_idle_between_candidate_batches_are_kept(ray_local: None) -> None:
    # Ray kills a worker idle for 1 s once there are more workers than CPUs (here: the build task's, the
    # children's); each tuning batch then paid a fresh worker's `import tvm`. The local instance keeps them.
    # Asked of the workers themselves, not of which ran a batch: a busy raylet may start a spare one.
    seen, alive = ray.get(ray.remote(num_cpus=1)(_batches).remote(3, 2.0))
    assert alive == seen, f"workers gone while idle between batches: {sorted(seen - alive)}"
