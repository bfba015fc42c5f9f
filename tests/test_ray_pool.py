"""RayPool against a real local Ray: how many builds it runs at once does not depend on the moment.

Placement over several nodes (SPREAD) is checked on a real two-node cluster in tests/test_multinode.py.
"""

from __future__ import annotations

import ray

from orchestrator.farm import wait_until
from orchestrator.scheduling.ray_pool import RayPool


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
