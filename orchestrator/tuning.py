"""The driver's side of tuning: where records live, which stored profile weights a budget, what a plan tunes.

The tuning itself runs inside build tasks (workers/tuning/stage.py); this module prepares what they
need from the driver (``TuningEnv``) and answers `sweep plan` for tuning jobs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from db import models as m
from db.store import ResultStore
from tvmbench.core.records import Job, canonical_hash


def records_database(store: ResultStore, home: Path, job: Job, tvm_version: str) -> dict[str, str]:
    """Where a job's tuning records go: the results database when the SQL records store is installed
    (workers/tuning/database.py, the records half of issue 13), else a MetaSchedule JSON database per
    target and board key under ``home`` (JSON files are appended record by record, so a cancel keeps
    what was measured)."""
    if importlib.util.find_spec("workers.tuning.database") is not None:
        return {"kind": "sql", "url": store.url}
    where = canonical_hash({"target": job.target.tvm_target, "board_key": job.target.board_key, "tvm": tvm_version})
    return {"kind": "json", "path": str(home / "tuning-records" / where[:16])}


def untuned_profile(store: ResultStore, job: Job) -> dict[str, Any] | None:
    """The newest stored per-kernel profile of this model's untuned build on the same board key, pipeline and layout.

    Kernel names then match the tuning tasks' (both come from the same fused module), so the budget
    can follow the measured time. None when no such profile is stored (`[measure] profile = true` on
    an untuned sweep stores one).
    """
    stmt = (
        select(m.Job.config, m.Run.kernel_profile)
        .join(m.Run, m.Run.id == m.Job.final_run_id)
        .where(
            m.Job.model_sha256 == job.model.sha256,
            m.Job.board_key == job.target.board_key,
            m.Job.pipeline == job.pipeline,
            m.Job.status == "ok",
            m.Run.kernel_profile.is_not(None),
        )
        .order_by(m.Run.finished_at.desc())
    )
    with store._sessions() as s:
        for config, profile in s.execute(stmt):
            # Only executors that show kernel calls (the bytecode VM) store an available profile.
            if (config or {}).get("tuning") or not (profile or {}).get("available"):
                continue
            if (config or {}).get("inputs") != [list(i) for i in job.model.inputs]:
                continue
            # Another layout has other kernels (no axis is the imported layout, NCHW).
            if ((config or {}).get("layout") or "NCHW") != (job.layout or "NCHW"):
                continue
            return profile
    return None


def auto_baseline(
    store: ResultStore, job: Job, sweep_id: str, in_sweep: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The baseline an auto budget's ``until = "onnxruntime"`` compares with (None when it has no such rule).

    ``in_sweep``: this run's own baseline job's median (orchestrator/scheduling/baselines.py), taken first;
    else the newest stored ok result of the model on the job's board key (this sweep's before others');
    else ``{"why": ...}``: the rule is inactive, and the build's provenance says why.
    """
    from orchestrator.scheduling.baselines import tunes_until_baseline

    if not tunes_until_baseline(job):
        return None
    if in_sweep is not None:
        return in_sweep
    from sqlalchemy import case

    from workers.executors.registry import baseline_names

    stmt = (
        select(m.Run.median, m.Job.config, m.Job.job_key, m.Job.executor, m.Job.sweep_id)
        .join(m.Run, m.Run.id == m.Job.final_run_id)
        .where(
            m.Job.model_sha256 == job.model.sha256,
            m.Job.board_key == job.target.board_key,
            m.Job.status == "ok",
            m.Job.executor.in_(baseline_names()),
            m.Run.unit == "ms",
            m.Run.median.is_not(None),
        )
        .order_by(case((m.Job.sweep_id == sweep_id, 0), else_=1), m.Run.finished_at.desc())
    )
    with store._sessions() as s:
        for median, config, key, executor, sid in s.execute(stmt):
            # Compared as canonical JSON: the stored inputs' shapes are lists, the job's tuples.
            if canonical_hash((config or {}).get("inputs")) == canonical_hash([list(i) for i in job.model.inputs]):
                where = "this sweep" if sid == sweep_id else f"sweep {sid[:12]}"
                return {"ms": float(median), "source": f"stored {executor} job {key[:12]} of {where}"}
    return {
        "why": f"no ok {job.tuning_auto.until} result of {job.model.name} on board key {job.target.board_key} in this "
        "sweep or the database"
    }


def plan_baseline(store: ResultStore, jobs: list[Job], job: Job, sweep_id: str) -> dict[str, Any] | None:
    """`sweep plan`'s word on an auto job's until = "onnxruntime" baseline: the sweep's own baseline job
    (measured before the auto build starts), else the stored result ``auto_baseline`` finds, else why not."""
    from orchestrator.scheduling.baselines import pair, tunes_until_baseline
    from workers.executors import registry

    if not tunes_until_baseline(job):
        return None
    own = next((j for j in jobs if registry.get(j.executor).baseline and pair(j) == pair(job)), None)
    if own is not None:
        return {"source": f"{own.executor} job {own.key[:12]} of this sweep (measured before this build starts)"}
    return auto_baseline(store, job, sweep_id)


def stored_records_count(database: dict[str, str], job: Job, mods: list[Any]) -> list[int]:
    """Trials already stored for each task module (0 where nothing is stored yet; the SQL store counts
    failed trials too, other databases their successful records)."""
    from workers.tuning.search import open_database
    from workers.tuning.stage import TuningEnv, tuning_target

    if database.get("kind") == "json" and not Path(database["path"]).is_dir():
        return [0 for _ in mods]  # nothing stored yet; a plan creates no folders
    settings = job.tuning_settings
    target = tuning_target(job.target.tvm_target, settings)
    db, _ = open_database(
        TuningEnv(tracker="", database=database), settings.module_equality, target, job.target.board_key
    )
    if hasattr(db, "trials_covered"):  # SqlTuningDatabase: one query, every stored trial counted
        return [c["trials"] for c in db.trials_covered(mods)]
    counts = []
    for mod in mods:
        counts.append(len(db.get_top_k(db.commit_workload(mod), 1_000_000)) if db.has_workload(mod) else 0)
    return counts


def _tasks_key(job: Job, database: dict[str, str]) -> tuple:
    """What a tuned job's tasks and their stored trials depend on: not its budget, not its VM mode (a sweep of
    many budgets extracts each program's tasks once)."""
    return (
        job.model.sha256, repr(job.model.shape_dict), job.layout, job.pipeline, job.opt_level, job.toolchain,
        repr(job.target.tvm_target), job.target.board_key, repr(job.tuning_settings), repr(sorted(database.items())),
    )  # fmt: skip


def plan_tuning(
    job: Job, model_data: bytes, database: dict[str, str], profile: dict[str, Any] | None, cache: dict | None = None
) -> dict:
    """What `sweep plan` shows for a tuned job: its tasks, their trials, and what records already cover.

    Converts the layout (the layout axis) and runs the job's front pipeline (legalize + fuse) to extract
    the tasks, exactly as the build will. ``cache`` (one per plan): tasks and stored trials of the programs
    planned already, by ``_tasks_key``.
    """
    from workers.tuning.tasks import allocate, profile_shares

    infos, stored = once(cache, _tasks_key(job, database), lambda: _extract_tasks(job, model_data, database))
    alloc, basis = allocate(infos, job.tuning, job.tuning_settings.max_trials_per_task, profile_shares(profile))
    return _tuning_plan(job, infos, alloc, basis, stored, database)


def once(cache: dict | None, key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()``, or what it gave for ``key`` before in ``cache`` (no cache: computed every time)."""
    if cache is None:
        return compute()
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def _extract_tasks(job: Job, model_data: bytes, database: dict[str, str]) -> tuple[list[Any], list[int]]:
    """The job's tasks (front pipeline, then MetaSchedule's extraction) and the trials stored for each."""
    import onnx
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    from workers.rewrites import rewritten_module
    from workers.tuning.stage import tuning_target
    from workers.tuning.tasks import extract, split_pipeline

    settings = job.tuning_settings
    target = tuning_target(job.target.tvm_target, settings)
    mod = from_onnx(onnx.load_from_string(model_data), shape_dict=job.model.shape_dict, keep_params_in_input=False)
    front, _ = split_pipeline(job.pipeline, target)
    with tvm.transform.PassContext(opt_level=job.opt_level), target:
        fused = front(rewritten_module(job, mod)[0])
    extracted, infos = extract(fused, target, settings.module_equality)
    return infos, stored_records_count(database, job, [e.dispatched[0] for e in extracted])


def plan_tuning_in_toolchain(
    toolchain: Any,
    job: Job,
    model_data: bytes,
    database: dict[str, str],
    profile: dict[str, Any] | None,
    cache: dict | None = None,
) -> dict:
    """``plan_tuning`` of a job of another release: its toolchain's child extracts the tasks and hashes them
    (the installed TVM hashes the same PrimFuncs differently: 0.26.0's conv task is 16415173567576005391
    there, 3168296938307167444 here), and the stored records of that release's scope are counted here."""
    from workers.tuning.tasks import allocate, profile_shares

    infos, stored = once(
        cache, _tasks_key(job, database), lambda: _toolchain_tasks(toolchain, job, model_data, database)
    )
    alloc, basis = allocate(infos, job.tuning, job.tuning_settings.max_trials_per_task, profile_shares(profile))
    return _tuning_plan(job, infos, alloc, basis, stored, database)


def _toolchain_tasks(
    toolchain: Any, job: Job, model_data: bytes, database: dict[str, str]
) -> tuple[list[Any], list[int]]:
    """The tasks the toolchain's child extracts and hashes, and the trials stored for each (SQL records only)."""
    from tvmbench.core.records import TuningScope
    from workers.toolchains.build import tasks_in_toolchain
    from workers.tuning.tasks import TaskInfo

    found = tasks_in_toolchain(toolchain, job, model_data)
    infos = [TaskInfo(t["name"], t["weight"], t["flops"], i) for i, t in enumerate(found["tasks"])]
    if database.get("kind") != "sql":
        return infos, [0 for _ in infos]
    store = ResultStore(database["url"], never_write=True)
    try:
        hashes = [t["hash"] for t in found["tasks"]]
        coverage = store.tuning_coverage(TuningScope(**found["scope"]), hashes)
        return infos, [coverage[h]["trials"] for h in hashes]
    finally:
        store.close()


def _tuning_plan(
    job: Job, infos: list[Any], alloc: dict[str, int], basis: str, stored: Any, database: dict[str, str]
) -> dict:
    """What `sweep plan` says of a tuned job: each task's trials and how many stored records cover them."""
    auto = job.tuning_auto
    tasks = [
        {
            "name": i.name,
            "weight": i.weight,
            "flops": i.flops,
            # An auto budget gives no task a share: the search goes where the estimate falls fastest.
            "trials": None if auto else alloc[i.name],
            "covered": stored[i.index] if auto else min(stored[i.index], alloc[i.name]),
        }
        for i in infos
    ]
    covered = sum(t["covered"] for t in tasks)
    if auto is not None:
        from dataclasses import asdict

        return {"budget": "auto", "auto": asdict(auto), "tasks": tasks, "trials_covered": covered,
                "database": database.get("kind")}  # fmt: skip
    return {
        "budget": job.tuning,
        "weights_from": basis,
        "tasks": tasks,
        "trials_covered": covered,
        "trials_to_run": sum(t["trials"] for t in tasks) - covered,
        "database": database.get("kind"),
    }
