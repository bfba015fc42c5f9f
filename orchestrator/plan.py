"""Plan: a pure function from a validated sweep spec to its jobs, in a stable order."""

from __future__ import annotations

from typing import Any

from db.store import ResultStore
from orchestrator import toolchains
from orchestrator.spec import SpecError, SweepSpec
from orchestrator.spec.matrix import configurations
from orchestrator.toolchains import Need
from tvmbench.core.records import Job
from workers.build_common import tvm_versions
from workers.toolchains.boards import release_key


def plan_jobs(spec: SweepSpec) -> list[Job]:
    """Expand the sweep matrix (orchestrator/spec/matrix.configurations says which jobs it holds).

    Model x target x executor x opt_level x pipeline (x kernels where taken) (x layout for executors that
    take it) (x tuning budget for tunable jobs) (x toolchain with a tvm axis). An "auto" budget is a job
    whose ``tuning`` is its trial cap, with its stop rules.
    """
    auto = spec.tuning_auto
    jobs = [
        Job(
            model=m,
            target=t,
            executor=e,
            opt_level=o,
            pipeline=p,
            measure=spec.measure,
            kernels=k,
            tuning=auto.max_trials if budget == "auto" and auto else int(budget),
            tuning_settings=spec.tuning,
            tuning_auto=auto if budget == "auto" else None,
            toolchain=toolchain,
            layout=layout,
        )
        for m, t, e, o, p, k, layout, budget, toolchain in configurations(spec)
    ]
    check_distinct_keys(jobs)
    return jobs


def check_distinct_keys(jobs: list[Job]) -> None:
    """SpecError when two jobs share a job key: they would build once and store one row for two.

    The loader refuses the entries that do this (the same model or target twice); this catches any other
    pair before anything is recorded. The keys are cached on the jobs, which every caller asks for anyway.
    """
    seen: dict[str, Job] = {}
    for job in jobs:
        other = seen.setdefault(job.key, job)
        if other is not job:
            raise SpecError(
                f"two jobs of the sweep have one job key {job.key[:12]} ({_shown(other)}; {_shown(job)}): "
                "remove the entry of the sweep file that repeats the other"
            )


def _shown(job: Job) -> str:
    """A job's axis values, for the line naming two jobs of one key."""
    return " ".join(str(v) for v in (job.model.name, job.target.name, job.executor, job.opt_level, job.pipeline))


def plan_rows(spec: SweepSpec, store: ResultStore, needs: list[Need] | None = None) -> list[dict[str, Any]]:
    """`sweep plan`: one row per job with whether its artifact is built and its stored status ("new" if none).

    Two queries whatever the size of the sweep (job statuses, then the built keys), not one per job.
    ``needs``: the toolchains of the tvm axis (orchestrator/toolchains.needs), asked here when not given
    (ToolchainError for an unknown release, a missing wheel, an interpreter without TVM).
    """
    jobs = plan_jobs(spec)
    version = tvm_versions()[0]
    versions = {n.text: n.tvm_version for n in (needs if needs is not None else toolchains.needs(spec.toolchains))}
    statuses = store.job_statuses(spec.sweep_id)
    keys = [job.build_key(versions[job.toolchain] if job.toolchain else version) for job in jobs]
    built = store.built_keys(set(keys))
    return [
        {
            "job_key": job.key,
            "model": job.model.name,
            "target": job.target.name,
            # A job of another release is measured on boards of its release: the key it asks the tracker for.
            "board_key": release_key(job.target.board_key, versions[job.toolchain])
            if job.toolchain
            else job.target.board_key,
            "executor": job.executor,
            "kernels_path": job.kernels,  # executors with a kernels axis only
            "opt_level": job.opt_level,
            "pipeline": job.pipeline,
            "built": key in built,
            "status": statuses.get(job.key, "new"),
            "tuning": "auto" if job.tuning_auto else job.tuning,
            # Only with a tvm axis (the plan of other sweeps reads as it did).
            **({"toolchain": job.toolchain, "tvm_version": versions[job.toolchain]} if job.toolchain else {}),
            **({"layout": job.layout} if job.layout else {}),  # likewise only with a layout axis
        }
        for job, key in zip(jobs, keys, strict=True)
    ]
