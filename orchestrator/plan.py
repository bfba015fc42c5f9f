"""Plan: a pure function from a validated sweep spec to its jobs, in a stable order."""

from __future__ import annotations

import itertools

from orchestrator.spec import SweepSpec
from workers.records import AOT_EXECUTOR, Job


def plan_jobs(spec: SweepSpec) -> list[Job]:
    """Expand the sweep matrix: model x target x executor x opt_level x pipeline (x kernels for aot-c).

    Microcontroller targets pair only with the aot-c executor, other targets only with the VM executors.
    """
    from workers.aot.boards import is_mcu_target

    jobs = []
    for m, t, e, o, p in itertools.product(spec.models, spec.targets, spec.executors, spec.opt_levels, spec.pipelines):
        if (e == AOT_EXECUTOR) != is_mcu_target(t.tvm_target):
            continue
        for k in spec.kernels if e == AOT_EXECUTOR else ("c",):
            jobs.append(Job(model=m, target=t, executor=e, opt_level=o, pipeline=p, measure=spec.measure, kernels=k))
    return jobs
