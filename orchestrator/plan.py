"""Plan: a pure function from a validated sweep spec to its jobs, in a stable order."""

from __future__ import annotations

import itertools

from orchestrator.spec import SweepSpec
from workers.records import AOT_EXECUTOR, Job
from workers.targets import target_kind


def tunable(executor: str, tvm_target: dict) -> bool:
    """Whether a job can be tuned: MetaSchedule over the farm covers the Relax VM on CPU (llvm) targets."""
    return executor.startswith("vm-") and target_kind(tvm_target) == "llvm"


def plan_jobs(spec: SweepSpec) -> list[Job]:
    """Expand the sweep matrix: model x target x executor x opt_level x pipeline (x kernels for aot-c)
    (x tuning budget for tunable jobs).

    Microcontroller targets pair only with the aot-c executor, other targets only with the VM executors.
    The tuning axis applies to tunable jobs only; the others (ONNX Runtime, aot-c, GPU targets) are
    planned once, untuned.
    """
    from workers.aot.boards import is_mcu_target

    jobs = []
    for m, t, e, o, p in itertools.product(spec.models, spec.targets, spec.executors, spec.opt_levels, spec.pipelines):
        if (e == AOT_EXECUTOR) != is_mcu_target(t.tvm_target):
            continue
        budgets = spec.tunings if tunable(e, t.tvm_target) else (0,)
        for k in spec.kernels if e == AOT_EXECUTOR else ("c",):
            for budget in budgets:
                jobs.append(
                    Job(
                        model=m,
                        target=t,
                        executor=e,
                        opt_level=o,
                        pipeline=p,
                        measure=spec.measure,
                        kernels=k,
                        tuning=budget,
                        tuning_settings=spec.tuning,
                    )
                )
    return jobs
