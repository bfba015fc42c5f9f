"""One model's tasks searched by several Ray workers at once (``[tuning] search_workers``).

On a cluster, candidate builds already spread over every node's CPUs (``RayBuilder``) and candidates are
timed on every board of the key at once, but MetaSchedule's search, the evolutionary search and the cost
model (most of a round after the first on a small machine), runs in the build task's one process. Here
the tasks are split into groups, and each group's search runs in a Ray task of its own, spread over the
nodes, with its own cost model, builder and share of the boards. The records meet in the SQL records
store, from which the stage applies them as after one search.

It is not used, and the provenance says why, when: one task is left to tune; the build runs in a
toolchain's child (no Ray there); the boards share this machine's cores (their timings are fenced from
every build and search, so the groups would only wait on each other); the records are not in the SQL
store (a JSON database numbers its workloads per process, so two writers would corrupt it).

The auto budget's rules span the groups through one small actor (``Tally``): before each batch a group
reports its trials and its tasks' estimate and reads the others'. ``until`` and ``max_trials`` compare the
whole model's sum, and a group stopped by one of them or by ``max_minutes`` stops the others at their next
batch. ``plateau`` stays per group (one group's tasks no longer gaining says nothing of the others'), its
gain counted against the whole model's estimate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.placement import NodeSlots, cpu_nodes, on_node
from workers.tuning.stats import TuningStats
from workers.tuning.tasks import TaskInfo

PROGRESS_POLL_S = 1.0
# Rules whose stop ends every group's search; plateau ends only its own group's.
SHARED_STOPS = ("until", "max_trials", "max_minutes")


def why_not_parallel(asked: int, env: Any, tasks: int) -> str | None:
    """Why ``asked`` (> 1) search workers come down to one for this build; None: they do not."""
    if tasks < 2:
        return "one task to tune"
    if env.builder != "ray":
        return "this TVM release's build runs outside Ray"
    if env.fence_host or env.fence_dir:
        return "the boards share this machine's cores: their timings are fenced from every search"
    if env.database.get("kind", "memory") != "sql":
        # A JSON database numbers workloads per process: two writers would give one number two workloads.
        return "the records are not in the SQL store, the one database several processes can write at once"
    return None


def split(infos: list[TaskInfo], cost: dict[str, float], workers: int) -> list[list[TaskInfo]]:
    """``infos`` in at most ``workers`` groups of about equal ``cost`` (the largest first, each to the lightest
    group), every group non-empty, each keeping the tasks' order."""
    groups: list[list[TaskInfo]] = [[] for _ in range(max(1, min(workers, len(infos))))]
    load = [0.0] * len(groups)
    for info in sorted(infos, key=lambda i: (-cost.get(i.name, 0.0), i.index)):
        lightest = min(range(len(groups)), key=lambda g: (load[g], len(groups[g]), g))
        groups[lightest].append(info)
        load[lightest] += cost.get(info.name, 0.0)
    return [sorted(g, key=lambda i: i.index) for g in groups]


class Tally:
    """The groups' running figures, for progress and the auto budget's rules (a plain class; an actor wraps it)."""

    def __init__(self, groups: int) -> None:
        self.trials = [0] * groups
        self.estimate_ms: list[float | None] = [None] * groups
        self.complete = [False] * groups
        self.stop: tuple[int, str, dict[str, Any]] | None = None  # (group, rule, values): the first shared stop

    def add_trials(self, group: int, n: int) -> None:
        self.trials[group] += n

    def exchange(self, group: int, estimate_ms: float | None, complete: bool) -> dict[str, Any]:
        """Report ``group``'s estimate; the others' trials, estimate, completeness, and a shared stop if any."""
        self.estimate_ms[group], self.complete[group] = estimate_ms, complete
        others = [g for g in range(len(self.trials)) if g != group]
        return {
            "trials": sum(self.trials[g] for g in others),
            "estimate_ms": sum(self.estimate_ms[g] or 0.0 for g in others),
            "complete": all(self.complete[g] for g in others),
            "stop": self.stop,
        }

    def stopped(self, group: int, rule: str, values: dict[str, Any]) -> None:
        if self.stop is None and rule in SHARED_STOPS:
            self.stop = (group, rule, values)

    def total_trials(self) -> int:
        return sum(self.trials)

    def shared_stop(self) -> tuple[int, str, dict[str, Any]] | None:
        return self.stop


class SharedRules:
    """A group's side of the tally: what ``workers.tuning.auto.AutoState`` asks before each batch."""

    def __init__(self, tally: Any, group: int) -> None:
        self.tally, self.group = tally, group

    def exchange(self, estimate_ms: float | None, complete: bool) -> dict[str, Any]:
        import ray

        return ray.get(self.tally.exchange.remote(self.group, estimate_ms, complete))

    def stopped(self, rule: str, values: dict[str, Any]) -> None:
        import ray

        ray.get(self.tally.stopped.remote(self.group, rule, values))


@dataclass
class GroupResult:
    """What one group's search sends back; ``trials`` as (seconds since the build's tuning began, task, s)."""

    names: list[str]
    node: str
    tuning_s: float
    measured: dict[str, int]
    stop: dict[str, Any] | None
    warm: dict[str, Any]
    trials: list[tuple[float, str, float | None]]
    times: dict[str, float]
    failed: dict[str, int]
    errors: list[str]
    candidates_built: int = 0


def _search_group(
    job: Any,
    env: Any,
    group: int,
    tasks: list[tuple[TaskInfo, str]],
    target_json: str,
    trials: dict[str, int],
    stored_best: dict[str, float | None],
    boards: int,
    began_at: float,
    tally: Any,
) -> GroupResult:
    """One group's search, in a Ray task: the tasks (their PrimFunc modules as JSON) tuned into the records."""
    import ray
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.target import Target

    from workers.fence import WorkHold, local_fence
    from workers.tuning.search import candidate_fence, open_build_database, search

    started = time.time()
    target = Target(json.loads(target_json))
    extracted = []
    for info, mod_json in tasks:
        mod = tvm.ir.load_json(mod_json)
        extracted.append((info, ms.ExtractedTask(info.name, mod, target, [mod], info.weight)))
    db, _ = open_build_database(env, job, target)
    # On the build's clock (the nodes' clocks taken to agree): the trials' seconds are the build's, and
    # max_minutes counts from the build's start even for a group that waited for a CPU.
    stats = TuningStats()
    stats.started -= time.time() - began_at
    # On the driver's machine this search is a build's work there, as the build task's own is.
    try:
        with WorkHold(local_fence(candidate_fence(env)).building) as hold:
            searched = search(
                job, env, extracted, db=db, trials=trials, stats=stats, stored_best=stored_best, from_records=0,
                on_batch=lambda n: tally.add_trials.remote(group, n), build_hold=hold, boards=boards,
                shared=SharedRules(tally, group) if job.tuning_auto else None,
            )  # fmt: skip
    finally:
        db.close()  # the SQL store's (the only kind a parallel search uses)
    if searched.stop is not None:
        tally.stopped.remote(group, searched.stop["stopped_by"], searched.stop["stop"])
    return GroupResult(
        names=[info.name for info, _ in tasks],
        node=ray.get_runtime_context().get_node_id(),
        tuning_s=time.time() - started,
        measured=searched.measured,
        stop=searched.stop,
        warm=searched.warm,
        trials=stats.trials_so_far(),
        times=dict(stats.times),
        failed=dict(stats.failed),
        errors=list(stats.errors),
        candidates_built=stats.candidates_built,
    )


def search_apart(
    job: Any,
    env: Any,
    groups: list[list[tuple[TaskInfo, Any]]],
    target: Any,
    *,
    trials: dict[str, int],
    stats: TuningStats,
    stored_best: dict[str, float | None],
    on_total: Callable[[int], None],
    build_hold: Any = None,
) -> tuple[Any, dict[str, Any]]:
    """Search ``groups`` of ``(TaskInfo, ms.ExtractedTask)``, each in a Ray task of its own, into the records'
    database: (a ``workers.tuning.search.Searched`` of them all, the provenance's ``search``).

    Their trials, times and failures go into ``stats`` (the trials on its clock); ``on_total(trials)`` hears
    the trials measured so far, about once a second. ``build_hold`` is let go of meanwhile: this thread
    neither searches nor builds while the groups do.
    """
    import contextlib

    import ray
    import tvm

    from tvmbench.core.errors import one_line
    from workers.tuning.search import Searched

    began_at = time.time() - (time.perf_counter() - stats.started)  # the wall time of ``stats``'s zero
    tally = ray.remote(num_cpus=0)(Tally).remote(len(groups))
    remote = ray.remote(num_cpus=1, max_retries=0)(_search_group)
    boards = max(1, env.boards // len(groups))  # each group times on its share of the key's boards
    nodes = NodeSlots(cpu_nodes())

    def placed() -> Any:  # the groups go to the nodes in turn, most CPUs first; they wait for a busy one
        node = nodes.pick()
        nodes.started(node)
        return remote.options(scheduling_strategy=on_node(node, spill=False))

    refs = [
        placed().remote(
            job,
            env,
            g,
            [(info, tvm.ir.save_json(task.dispatched[0])) for info, task in group],
            str(target),  # MetaSchedule's JSON form of the target: the records' scope must be the same
            {info.name: trials.get(info.name, 0) for info, _ in group},
            {info.name: stored_best.get(info.name) for info, _ in group},
            boards,
            began_at,
            tally,
        )
        for g, group in enumerate(groups)
    ]
    results: dict[int, GroupResult | str] = {}
    with build_hold.paused() if build_hold is not None else contextlib.nullcontext():
        pending = list(refs)
        while pending:
            _ready, pending = ray.wait(pending, num_returns=len(pending), timeout=PROGRESS_POLL_S)
            on_total(ray.get(tally.total_trials.remote()))
        for g, ref in enumerate(refs):
            try:
                results[g] = ray.get(ref)
            except Exception as exc:  # a group that crashed: what it stored stays, its tasks may lack records
                results[g] = one_line(exc)
        shared_stop = ray.get(tally.shared_stop.remote())
    ray.kill(tally)

    measured: dict[str, int] = {}
    summary, merged = [], []
    stops: list[tuple[float, dict[str, Any]]] = []  # (the group's seconds, its stop)
    warm: dict[str, Any] | None = None
    for g, group in enumerate(groups):
        result = results[g]
        names = [info.name for info, _ in group]
        if isinstance(result, str):
            stats.fail("search", f"search group {g + 1} ({len(names)} tasks): {result}")
            summary.append({"tasks": names, "error": result})
            continue
        measured.update(result.measured)
        merged.extend(result.trials)
        stats.absorb(result.times, result.failed, result.errors, result.candidates_built)
        if result.stop is not None:
            stops.append((result.tuning_s, result.stop))
        if warm is None:
            warm = dict(result.warm)
        elif result.warm.get("seeded"):
            warm["seeded"] = [*warm.get("seeded", []), *result.warm["seeded"]]
        summary.append(
            {
                "tasks": names,
                "node": result.node,
                "trials": sum(result.measured.values()),
                "tuning_s": round(result.tuning_s, 2),
                **({"stopped_by": result.stop["stopped_by"]} if result.stop else {}),
            }
        )
    stats.add_trials(merged)
    stop = None
    if job.tuning_auto is not None and stops:
        stop = dict(max(stops, key=lambda pair: pair[0])[1])  # the group that ended last ended the search
        if shared_stop is not None:  # the rule that ended every group's search
            group, rule, values = shared_stop
            stop.update(stopped_by=rule, stop={**values, "group": group})
    nodes = {s["node"] for s in summary if "node" in s}
    provenance = {"workers": len(groups), "nodes": len(nodes), "groups": summary}
    if warm is None:  # no group came back
        warm = {"enabled": job.tuning_settings.warm_start, "note": "every search group failed"}
    return Searched(stop=stop, measured=measured, warm=warm), provenance
