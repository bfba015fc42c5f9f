"""Auto builds that tune until the baseline wait for it.

An auto budget with ``until = "onnxruntime"`` stops once its estimate is at or below the median of the
sweep's onnxruntime job of the same model (content and input shapes) and board key. Its build is parked
until that job has an outcome (ok, failed, or waiting for a device): then it starts, with the median
when the run was ok. Without such a job in this run (none planned, or final in an earlier run of the
sweep), nothing waits: the driver takes the newest stored result (orchestrator/tuning.auto_baseline).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from orchestrator.scheduling.jobs import JobState
from tvmbench.core.records import Job
from workers.executors import registry


def tunes_until_baseline(job: Job) -> bool:
    """Whether ``job`` is an auto budget whose until rule is the baseline's median."""
    return job.tuning_auto is not None and isinstance(job.tuning_auto.until, str)


def pair(job: Job) -> tuple[Any, ...]:
    """Same model (content and input shapes) on the same board key: where a baseline stands for a job."""
    return job.model.sha256, job.model.inputs, job.target.board_key


class BaselineWait:
    """The auto builds of one run parked on the baseline jobs of their model and board key."""

    def __init__(self, by_build: dict[str, list[JobState]]) -> None:
        self.baselines: dict[tuple[Any, ...], list[JobState]] = defaultdict(list)
        for states in by_build.values():
            for state in states:
                if registry.get(state.job.executor).baseline:
                    self.baselines[pair(state.job)].append(state)
        self.parked: dict[str, list[JobState]] = {}  # build key -> the baseline jobs it waits for
        for build_key, states in by_build.items():
            job = states[0].job
            if tunes_until_baseline(job) and self.baselines.get(pair(job)):
                self.parked[build_key] = self.baselines[pair(job)]

    def hold(self, to_build: Iterable[str]) -> list[str]:
        """``to_build`` without the parked builds (a parked build that is cached already waits for nothing)."""
        queued = list(to_build)
        self.parked = {k: v for k, v in self.parked.items() if k in queued}
        return [k for k in queued if k not in self.parked]

    def released(self, idle: bool = False) -> list[str]:
        """The parked builds whose baseline jobs all have an outcome now, in the order they were planned.

        ``idle``: nothing else is queued or running, so no outcome can come: every parked build goes
        (a safety net; the rule above releases them first).
        """
        done = [k for k, on in self.parked.items() if idle or all(s.status != "pending" for s in on)]
        for key in done:
            del self.parked[key]
        return done

    def baseline(self, job: Job) -> dict[str, Any] | None:
        """The sweep's own baseline median for ``job`` (the fastest ok run of its pair), None without one."""
        runs = [
            (s.run.median_ms, s.key, s.job.executor)
            for s in self.baselines.get(pair(job), [])
            if s.run is not None and s.run.ok and s.run.unit == "ms" and s.run.median_ms is not None
        ]
        if not runs:
            return None
        ms, key, executor = min(runs)
        return {"ms": ms, "source": f"{executor} job {key[:12]} of this sweep"}
