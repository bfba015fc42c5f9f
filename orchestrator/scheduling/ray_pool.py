"""The production pool: builds and measurements as Ray tasks, with the sweep's actors.

Builds take one CPU each and go to the node with the most CPUs free of this sweep's builds
(workers/placement.py), so a cluster's nodes take turns whatever the moment: Ray's default packs tasks
onto the driver's node, and even SPREAD let one node's worker take every build of a short sweep while
the other node's worker started. A worker that dies mid-build is re-run by Ray (a build is a pure
function of its inputs); after the last retry the task is ``TaskLost``, which leaves its jobs pending.
Measurements take no CPU (the board does the work) and are not retried by Ray: the scheduler decides
(MAX_ATTEMPTS). A sliver of a custom resource (``farm_resource``) pins measurements to the node(s) that
reach the farm. The actors: the host fence (workers/fence.py), the tuning progress table
(workers/tuning/progress.py) and the program index of a run (workers/program_index.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

from orchestrator.scheduling.pool import TaskLost
from orchestrator.scheduling.tasks import BuildItem, MeasureItem, build_on_node, measure_on_node
from tvmbench.core.errors import one_line
from workers.placement import NodeSlots, cpu_nodes, on_node

SMALL_BYTES = 64 * 1024  # values smaller than this travel inline with the task (no object store round trip)


class RayPool:
    """Ray tasks and actors for one sweep run (``ray`` must be initialised)."""

    def __init__(self, sweep_id: str, farm_resource: str | None = None, max_builds: int | None = None) -> None:
        import ray

        from workers.fence import create_fence
        from workers.tuning.progress import create_progress, progress_name

        self.ray = ray
        self._build = ray.remote(num_cpus=1, max_retries=2)(build_on_node)
        self._nodes = NodeSlots()
        self._build_node: dict[Any, str | None] = {}  # build handle -> the node it was sent to
        measure = ray.remote(num_cpus=0, max_retries=0)(measure_on_node)
        self._measure = measure.options(resources={farm_resource: 0.001}) if farm_resource else measure
        # The cluster's CPUs, not those free at this instant: a task or actor that happens to hold one as
        # the sweep starts (a job's supervisor, another sweep's last build) would halve the builds at once.
        self._cpus = max_builds or max(1, int(ray.cluster_resources().get("CPU", 1)))
        # Tuned builds time candidates from inside their build task: the fence they and every other build
        # share is an actor; their trials reach the progress bar through another.
        self.fence_host: str | None = create_fence()
        self._progress = create_progress(sweep_id)
        self.tuning_progress_name: str | None = progress_name(sweep_id)
        self._index: Any = None

    def cpus(self) -> int:
        return self._cpus

    def put(self, value: Any) -> Any:
        if isinstance(value, bytes) and len(value) < SMALL_BYTES:
            return value
        return self.ray.put(value)

    def start_index(self, known: dict[str, str]) -> None:
        from workers.program_index import start_index

        self._index = start_index(known)

    def submit_builds(self, items: list[BuildItem]) -> Any:
        self._nodes.refresh(cpu_nodes())  # nodes join and leave a cluster during a sweep
        node = self._nodes.pick()
        build = self._build.options(scheduling_strategy=on_node(node))
        handle = build.remote(items, self._index if any(i.reuse for i in items) else None)
        self._nodes.started(node)
        self._build_node[handle] = node
        return handle

    def submit_measures(self, items: list[MeasureItem]) -> Any:
        return self._measure.remote(items)

    def wait(self, handles: list[Any], timeout_s: float) -> list[Any]:
        done, rest = self.ray.wait(handles, num_returns=1, timeout=timeout_s)
        if done and rest:
            done += self.ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        return done

    def result(self, handle: Any) -> list[Any]:
        self._nodes.finished(self._build_node.pop(handle, None))
        try:
            return self.ray.get(handle)
        except self._lost_errors() as exc:
            raise TaskLost(one_line(exc)) from exc

    def _lost_errors(self) -> tuple[type[BaseException], ...]:
        """Ray's errors for a task whose worker, node or objects were lost (not an exception the task raised)."""
        e = self.ray.exceptions
        return (
            e.WorkerCrashedError,
            e.LocalRayletDiedError,
            e.NodeDiedError,
            e.OutOfMemoryError,
            e.ObjectLostError,
            e.ObjectStoreFullError,
            e.OutOfDiskError,
            e.TaskUnschedulableError,
            e.RaySystemError,
        )

    def tuning_progress(self) -> dict[str, tuple[int, int]] | None:
        try:
            return self.ray.get(self._progress.snapshot.remote(), timeout=5)
        except Exception:  # the table is busy or gone: no figure this time
            return None

    def cancel(self, handles: list[Any]) -> None:
        """Killing a measurement's Ray worker closes its RPC session, which frees the board."""
        from workers.fence import reset_fence

        for handle in handles:
            self.ray.cancel(handle, force=True)
        if self.fence_host is not None:
            reset_fence(self.fence_host)  # the killed builds and tunings hold it and will never let go
        self.close()

    def close(self) -> None:
        if self._index is not None:
            with contextlib.suppress(Exception):
                self.ray.kill(self._index)
            self._index = None
