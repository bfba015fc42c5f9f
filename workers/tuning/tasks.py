"""Tuning tasks: where the pipeline splits, which kernels to tune, and how many trials each one gets.

MetaSchedule tunes the PrimFuncs of a legalized and fused module (on the raw import it finds no task),
and a record is found again only by the PrimFunc it was tuned on. So a job's pipeline is split in two
around the tuning stage: ``front`` (library dispatch, legalize, fuse) runs once, the tasks are
extracted from its output, and the records are applied to *that same module* before ``back`` (dataflow
lowering, memory planning, VM lowering) finishes it. Re-running legalize/fuse on an already fused module
renames and reshapes PrimFuncs, which is how records silently miss.

Budgets go where the time is. MetaSchedule's gradient scheduler spreads a small budget by its own
heuristics (at 32 trials it tuned matmul, reshape and mean, and left both convolutions untuned), so the
stage gives every task its own budget, proportional to the task's share of the untuned run time when a
per-kernel profile of the untuned build is stored, else to weight x FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.rewrites import REWRITTEN

MIN_TASK_TRIALS = 4  # fewer than this is not a search: the share goes to the other tasks


@dataclass(frozen=True)
class TaskInfo:
    """One extracted tuning task: its name (the PrimFunc's), call count, FLOPs of one call."""

    name: str
    weight: int
    flops: float
    index: int  # position in the extracted list


def split_pipeline(pipeline: str, target: Any) -> tuple[Any, Any]:
    """(front, back) passes of the job's pipeline for an llvm target, around the tuning stage.

    "per-target" is ``relax.get_default_pipeline(llvm)`` (dispatch, legalize and fuse | lower, finalize);
    "generic" is ``relax.get_pipeline("default")`` (dispatch, legalize | lower, finalize: no fusion);
    the pipelines named after "per-target" are "per-target" here: their graph rewrites run before the
    layout axis (workers/rewrites.py ``rewritten_module``), on the module this front half is given.
    """
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    if target.kind.name != "llvm":
        raise ValueError(f"tuning covers llvm targets; this one is {target.kind.name}")
    if pipeline == "per-target" or pipeline in REWRITTEN:
        # cpu_generic's __init__ does not export dataflow_lower_passes in 0.27: take them from its module.
        front = cpu.library_dispatch_passes(target) + cpu.legalize_passes(target)
        back = cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target)
    else:
        t = relax.transform
        front = [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan(), t.LegalizeOps()]
        back = [
            t.RewriteDataflowReshape(),
            t.ToNonDataflow(),
            t.RemovePurityChecking(),
            t.CallTIRRewrite(),
            t.StaticPlanBlockMemory(),
            t.RewriteCUDAGraph(),
            t.LowerAllocTensor(),
            t.KillAfterLastUse(),
            t.LowerRuntimeBuiltin(),
            t.ComputePrimValue(),
            t.VMShapeLower(),
            t.AttachGlobalSymbol(),
        ]
    return tvm.transform.Sequential(front, name="tvmbench.tuning.front"), tvm.transform.Sequential(
        back, name="tvmbench.tuning.back"
    )


def extract(fused: Any, target: Any, module_equality: str) -> tuple[list[Any], list[TaskInfo]]:
    """MetaSchedule's tasks of a fused module, and what the budget split needs to know of each."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    extracted = list(ms.relax_integration.extract_tasks(fused, target, module_equality=module_equality))
    infos = []
    for i, task in enumerate(extracted):
        try:
            flops = float(estimate_tir_flops(task.dispatched[0]))
        except Exception:  # some kernels (opaque, extern) have no estimate
            flops = 0.0
        infos.append(TaskInfo(name=str(task.task_name), weight=int(task.weight), flops=flops, index=i))
    return extracted, infos


def profile_shares(profile: dict[str, Any] | None) -> dict[str, float] | None:
    """Kernel name -> milliseconds per run, from a stored untuned per-kernel profile (None if unusable)."""
    if not profile or not profile.get("available") or not profile.get("kernels"):
        return None
    shares = {
        str(k["name"]): float(k.get("total_ms", 0.0)) for k in profile["kernels"] if k.get("kind", "kernel") == "kernel"
    }
    return shares if any(v > 0 for v in shares.values()) else None


def allocate(
    tasks: list[TaskInfo],
    budget: int,
    max_per_task: int | None = None,
    profile_ms: dict[str, float] | None = None,
) -> tuple[dict[str, int], str]:
    """Split ``budget`` trials over ``tasks``; returns ({task name: trials}, what the weights were).

    Weights: the task's milliseconds in the untuned profile (when the profile names at least one task),
    else weight x FLOPs. Largest-remainder rounding; a share below MIN_TASK_TRIALS and the excess over
    ``max_per_task`` go back to the others, so the whole budget is spent while a task can still use it.
    """
    basis = "flops"
    if profile_ms and any(profile_ms.get(t.name, 0.0) > 0 for t in tasks):
        weights = {t.name: profile_ms.get(t.name, 0.0) for t in tasks}
        basis = "profile"
    else:
        weights = {t.name: t.weight * t.flops for t in tasks}
    cap = max_per_task or budget
    trials = {t.name: 0 for t in tasks}
    live = [t.name for t in tasks if weights[t.name] > 0]
    remaining = budget
    while remaining > 0 and live:
        total = sum(weights[n] for n in live)
        exact = {n: remaining * weights[n] / total for n in live}
        share = {n: int(exact[n]) for n in live}
        left = remaining - sum(share.values())
        for n in sorted(live, key=lambda n: exact[n] - share[n], reverse=True)[:left]:
            share[n] += 1
        # The smallest share below the minimum drops out (unless it is the last task) and the split reruns.
        small = [n for n in live if trials[n] == 0 and share[n] < MIN_TASK_TRIALS]
        if small and len(live) > 1:
            live.remove(min(small, key=lambda n: weights[n]))
            continue
        spent = 0
        for n in live:
            give = min(share[n], cap - trials[n])
            trials[n] += give
            spent += give
        remaining -= spent
        live = [n for n in live if trials[n] < cap]
        if spent == 0:
            break
    return trials, basis


def tune_order(tasks: list[TaskInfo], trials: dict[str, int]) -> list[TaskInfo]:
    """``tasks`` in the order a fixed budget tunes them: the most trials first, then extraction order.

    A task's trials follow its share of the run time, so this tunes the kernels that hold most of it
    while the search is young: a sweep cancelled mid-tuning keeps the records that matter most, the curve
    falls early, and a warm start's trained model and seeds act first where they gain most (its later
    tasks also learn from these: the model keeps training, and a task's seeds may come from one tuned
    before it). A cold search tunes each task on its own, so there the order changes when the records
    come, not which.
    """
    return sorted(tasks, key=lambda t: (-trials.get(t.name, 0), t.index))
