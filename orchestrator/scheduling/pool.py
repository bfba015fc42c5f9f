"""The task-pool seam: where builds and measurements run, and what they share with the driver.

The scheduler submits batches of ``BuildItem``/``MeasureItem`` (scheduling/tasks.py) and waits for the
next one done. ``RayPool`` (scheduling/ray_pool.py) runs them as Ray tasks over a cluster; ``InlinePool``
runs them in this process, one per ``wait``, in the order submitted, so that unit tests drive every rule of
the scheduler with fake executors and no Ray: a task is "in flight" from its submission until ``wait``
returns it, as with Ray.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.scheduling.tasks import BuildItem, BuildResult, MeasureItem, MeasureResult, build_batch, measure_batch
from workers.program_index import Claims


class TaskLost(Exception):
    """A task that did not fail by itself: its worker or node died (killed, out of memory) and no retry was left.

    Its builds are not failures of the compiler: their jobs stay pending, and a resume builds them again.
    """


class TaskPool(Protocol):
    """Runs the sweep's tasks. ``fence_host``: the host whose fence builds hold (None: no fence)."""

    fence_host: str | None
    tuning_progress_name: str | None

    def cpus(self) -> int:
        """How many builds may run at once."""
        ...

    def put(self, value: Any) -> Any:
        """A reference to ``value`` that tasks take in place of it (put once, passed to many tasks)."""
        ...

    def start_index(self, known: dict[str, str]) -> None:
        """Open the program index of this run (reuse key -> build key) for the builds submitted from now."""
        ...

    def submit_builds(self, items: list[BuildItem]) -> Any:
        """Start one task building ``items`` in turn; returns its handle."""
        ...

    def submit_measures(self, items: list[MeasureItem]) -> Any:
        """Start one task measuring ``items`` in turn (tasks.measure_batch); returns its handle."""
        ...

    def wait(self, handles: list[Any], timeout_s: float) -> list[Any]:
        """The handles done within ``timeout_s`` (at least one unless it ran out), every ready one."""
        ...

    def result(self, handle: Any) -> list[Any]:
        """The task's results (one per item); raises what killed the task, ``TaskLost`` when its worker did."""
        ...

    def tuning_progress(self) -> dict[str, tuple[int, int]] | None:
        """Trials done and budget per tuned build in flight, or None when unknown."""
        ...

    def cancel(self, handles: list[Any]) -> None:
        """Kill the tasks ``handles`` and drop the holds they had on the host fence."""
        ...

    def close(self) -> None:
        """The run is over: let go of what it started (the program index)."""
        ...


@dataclass(eq=False)
class _InlineTask:
    run: Callable[[], list[Any]]
    results: list[Any] | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class InlinePool:
    """Runs each task in this process when ``wait`` gets to it: no Ray, no fence, an in-process program index.

    ``submitted`` lists ("build" | "measure", items, in flight at submission) for tests that check ordering.
    """

    builds_at_once: int = 2
    fence_host: str | None = None
    tuning_progress_name: str | None = None
    claims: Claims | None = None
    pending: list[_InlineTask] = field(default_factory=list)
    submitted: list[tuple[str, list[Any], list[tuple[str, list[Any]]]]] = field(default_factory=list)
    _kinds: dict[int, tuple[str, list[Any]]] = field(default_factory=dict)
    _ids: Any = field(default_factory=itertools.count)

    def cpus(self) -> int:
        return self.builds_at_once

    def put(self, value: Any) -> Any:
        return value

    def start_index(self, known: dict[str, str]) -> None:
        self.claims = Claims(known)

    def _submit(self, kind: str, items: list[Any], run: Callable[[], list[Any]]) -> _InlineTask:
        task = _InlineTask(run)
        in_flight = [self._kinds[id(t)] for t in self.pending]
        self.submitted.append((kind, list(items), in_flight))
        self._kinds[id(task)] = (kind, list(items))
        self.pending.append(task)
        return task

    def submit_builds(self, items: list[BuildItem]) -> _InlineTask:
        claim = self.claims.claim if self.claims is not None else None
        return self._submit("build", items, lambda: build_batch(items, claim))

    def submit_measures(self, items: list[MeasureItem]) -> _InlineTask:
        return self._submit("measure", items, lambda: measure_batch(items))

    def wait(self, handles: list[Any], timeout_s: float) -> list[Any]:
        ready = [h for h in handles if h.done]
        if ready or not handles:
            return ready
        task = next(t for t in self.pending if t in handles)  # the oldest: tasks finish in submission order
        self.pending.remove(task)
        self._kinds.pop(id(task), None)
        try:
            task.results = task.run()
        except Exception as exc:  # a task that raises is a failed task, as in Ray
            task.error = exc
        task.done = True
        return [task]

    def result(self, handle: Any) -> list[Any]:
        if handle.error is not None:
            raise handle.error
        assert handle.results is not None
        return handle.results

    def tuning_progress(self) -> dict[str, tuple[int, int]] | None:
        return None

    def cancel(self, handles: list[Any]) -> None:
        for task in handles:
            if task in self.pending:
                self.pending.remove(task)
                self._kinds.pop(id(task), None)

    def close(self) -> None:
        self.claims = None


__all__ = ["BuildResult", "InlinePool", "MeasureResult", "TaskLost", "TaskPool"]
