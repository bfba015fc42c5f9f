"""Tuned builds of the same workloads take turns, so that the later ones reuse the earlier ones' records.

Two tuned builds of one model on one target and board key (in one release and pipeline) tune the
same tasks whatever their executor or opt_level (or layout, for a model without convolutions:
``workload_group``). Side by side, each pays for its own search and neither sees the other's trials, and
on a board key with one board their candidates queue for it anyway. One after the other, the second
finds the first's records, which the tuning stage counts against its budget (workers/tuning/stage.py):
a vm-bytecode job beside its vm-compiled twin spends no trials, and
``tuning = [64, 512]`` runs 64 trials and then 448 more. Smaller budgets go first, so that the program a
job gets is what its own budget bought (an auto budget counts as its cap).

An auto budget has a clock, which records do not carry: a twin of an auto build would search for its own
``max_minutes`` again. So once an auto build has stopped by one of its rules, a later auto build of the
same group and the same rules and settings is handed that build's stop (``TuningEnv.tuned_by``): it
applies the records and searches no further. A build that failed or crashed its search hands nothing on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from orchestrator.scheduling.jobs import JobState
from tvmbench.core.records import Build, Job, canonical_json


def workload_group(job: Job) -> tuple[Any, ...] | None:
    """What decides a tuned job's tasks and the scope of their records; None for an untuned job.

    Not the layout: it converts convolutions only, so a model without them has the same tasks in every
    layout (before, NCHW and NHWC tuned one conv1d net side by side, 8 trials each of one workload); with
    them, the layouts' builds share the key's boards, whose candidates would queue for them anyway.
    """
    if not job.tuning:
        return None
    return (
        job.model.sha256,
        job.model.inputs,
        canonical_json(job.target.tvm_target),
        job.target.board_key,
        job.toolchain,
        job.pipeline,
        job.tuning_settings.module_equality,
    )


def auto_rules(job: Job) -> tuple[Any, ...] | None:
    """An auto job's workload group with its rules and search settings; None for any other job."""
    group = workload_group(job)
    if group is None or job.tuning_auto is None:
        return None
    # The layout too: an NHWC build's workloads are not its NCHW twin's, so a stop is not handed across.
    rules = canonical_json(asdict(job.tuning_auto))
    return (group, job.layout, rules, canonical_json(asdict(job.tuning_settings)))


class TuningTurns:
    """Which queued builds may start now: at most one tuned build of each workload group at a time."""

    def __init__(self, by_build: dict[str, list[JobState]]) -> None:
        self.group = {key: workload_group(states[0].job) for key, states in by_build.items()}
        self.budget = {key: states[0].job.tuning for key, states in by_build.items()}
        self.rules = {key: auto_rules(states[0].job) for key, states in by_build.items()}
        self.busy: set[tuple[Any, ...]] = set()
        self.stops: dict[tuple[Any, ...], dict[str, Any]] = {}  # auto rules -> the stop of the build that tuned

    def order(self, to_build: Iterable[str]) -> list[str]:
        """``to_build`` with each group's builds in ascending budget, in the places the group's builds held."""
        queued = list(to_build)
        slots: dict[tuple[Any, ...], list[int]] = {}
        for i, key in enumerate(queued):
            if (group := self.group.get(key)) is not None:
                slots.setdefault(group, []).append(i)
        for places in slots.values():
            keys = sorted((queued[i] for i in places), key=lambda k: self.budget[k])  # stable: plan order on ties
            for i, key in zip(places, keys, strict=True):
                queued[i] = key
        return queued

    def first_free(self, to_build: Sequence[str]) -> int | None:
        """The index of the first queued build that may start (untuned, or its group not tuning), else None."""
        for i, key in enumerate(to_build):
            group = self.group.get(key)
            if group is None or group not in self.busy:
                return i
        return None

    def started(self, key: str) -> None:
        if (group := self.group.get(key)) is not None:
            self.busy.add(group)

    def finished(self, key: str) -> None:
        if (group := self.group.get(key)) is not None:
            self.busy.discard(group)

    def tuned(self, key: str, build: Build) -> None:
        """A finished build: an auto build that stopped by a rule hands its stop on to its group's later ones."""
        rules, tuning = self.rules.get(key), build.tuning or {}
        if rules is None or not build.ok or tuning.get("stopped_by") in (None, "error") or rules in self.stops:
            return
        stop = {k: v for k, v in (tuning.get("stop") or {}).items() if k != "tuned_by"}
        self.stops[rules] = {"build_key": key, "stopped_by": tuning["stopped_by"], "stop": stop}

    def tuned_by(self, key: str) -> dict[str, Any] | None:
        """The stop an auto build takes from one of its group that already tuned under its rules, if any."""
        rules = self.rules.get(key)
        return self.stops.get(rules) if rules is not None else None
