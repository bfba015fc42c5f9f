"""The tuning stage of a build: legalize + fuse, extract tasks, tune on the farm, apply the records, lower.

It runs inside the job's ``PassContext(opt_level=..., instruments=[pass trace])`` (``build_job`` enters
it), so the passes around tuning are traced like any build's, and ``MetaScheduleApplyDatabase`` shows in
the trace. The records are applied to the very module the tasks were extracted from, and the stage
checks that they met: a task with a stored record whose PrimFunc comes out unscheduled is a build
failure (``TuningMiss``), never a silently untuned "tuned" program.

The provenance (``Build.tuning``) has exactly these keys, which the results store and displays read:
``budget``, ``trials_run`` (measured in this build), ``trials_from_records`` (covered by records stored
before it), ``tasks`` (per task: ``name``, ``weight``, ``flops``, ``trials`` = stored + measured trials
the task's best record was chosen from, ``best_us``, ``records_found``), ``failed_trials`` ({kind:
count}), ``errors`` (up to 5 samples), ``tuning_s``, ``build_s``, ``board_wait_s``, ``run_s``, ``candidates_built``,
``candidate_compile_s`` and ``candidate_fence_s`` (summed over the candidates: compiling, fence waits),
``cost_model``, ``seed``, ``database`` ("sql" | "memory" | "json"), ``warm_start`` (the cost model's
training on stored records and the seeds of new workloads: workers/tuning/warm_start.py), and ``curve``:
the tuning curve, ``[[trial, tuning seconds, estimate ms], ...]`` per measured trial (at most 512 points,
thinned evenly), the estimate being the best-so-far sum over tasks of weight x best candidate time (see
``workers.tuning.stats.tuning_curve`` for exactly what it counts). An auto budget (``job.tuning_auto``)
tunes every task in one run that stops by itself (workers/tuning/auto.py) and adds ``auto`` (its rules
and baseline), ``stopped_by`` and ``stop`` (workers/tuning/stopping.py); one stopped by its until rule
adds ``checks``, the check builds that timed the program on a board before the stop was taken
(workers/tuning/check.py). A build asked for more than one search worker (``[tuning] search_workers``)
adds ``search``: ``asked``, ``workers``, and either ``why`` it searched alone or ``nodes`` and its ``groups``
(tasks, node, trials, seconds, stop: workers/tuning/parallel.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from tvmbench.core.records import Job, TuningSettings
from workers.tuning.auto import nothing_tuned
from workers.tuning.check import program_bytes, until_checked
from workers.tuning.stats import MAX_ERRORS, TuningStats
from workers.tuning.tasks import allocate, extract, profile_shares, split_pipeline, tune_order


class TuningMiss(RuntimeError):
    """Records did not meet the PrimFuncs they were tuned on; ``tuning`` is the provenance so far."""

    def __init__(self, message: str, tuning: dict[str, Any]) -> None:
        super().__init__(message)
        self.tuning = tuning


@dataclass(frozen=True)
class TuningEnv:
    """What a tuned build needs from the driver: the farm, the fence, the records, a profile, progress."""

    tracker: str
    database: dict[str, str] = field(default_factory=lambda: {"kind": "memory"})  # kind + path/url
    fence_host: str | None = None  # set when the job's boards share the driver's cores
    # The driver's host, whose fence every build on its machine holds whatever the key: candidate builds
    # (and a parallel search's workers) there keep off the timings of other jobs' host boards.
    machine_fence: str | None = None
    avoid: frozenset[str] = frozenset()  # quarantined boards
    boards: int = 1  # boards of the key: candidates timed at once (1 when fenced)
    profile: dict[str, Any] | None = None  # the untuned build's stored per-kernel profile, if any
    progress: str | None = None  # the sweep's progress actor name
    # The tracker key candidates are timed on, when not the job's own: a job of another TVM release
    # times its candidates (that release's artifacts) on boards of ``release_key(key, release)``.
    board_key: str | None = None
    # "ray": candidates compile as Ray tasks; "local": in this process, one after another (a toolchain's
    # child, which has no Ray: workers/toolchains/tuning.py).
    builder: str = "ray"
    # A file the stage writes trials done / budget to instead of the progress actor (a toolchain's child;
    # its parent passes them on).
    progress_file: str | None = None
    # A folder through which the host fence is asked for (a toolchain's child, whose parent holds the
    # Ray fence for it: workers/toolchains/tuning.FileFence); None: the fence of ``fence_host``.
    fence_dir: str | None = None
    # The auto budget's baseline for ``until = "onnxruntime"``: {"ms", "source"} of the baseline's median
    # on the job's board key, or {"why": ...} / None when there is none (the rule is then inactive).
    baseline: dict[str, Any] | None = None
    # An auto build of the same workloads and rules that this sweep already tuned: {"build_key",
    # "stopped_by", "stop"}. This build applies its records and searches no further
    # (orchestrator/scheduling/tuning_turns.py): the same rules on the same tasks would buy the same again.
    tuned_by: dict[str, Any] | None = None
    # The target the auto budget's estimate must reach, when a check build found the program slower than
    # the estimate and scaled the until target by what it found (workers/tuning/check.py); None: the until
    # target itself.
    estimate_target_ms: float | None = None


def tuning_target(tvm_target: dict[str, Any], settings: TuningSettings) -> Any:
    """The job's target with ``num-cores`` (MetaSchedule refuses an llvm target without it).

    Taken from the target, else ``[tuning] num_cores``, else this machine's cores (right for host and
    emulated boards; a remote board's target should say it).
    """
    from tvm.target import Target

    from workers.build_common import make_target

    target = make_target(tvm_target)
    if target.attrs.get("num-cores") is not None:
        return target
    spec = json.loads(str(target))
    spec["num-cores"] = settings.num_cores or os.cpu_count() or 1
    return Target(spec)


def _best_us(db: Any, mod: Any) -> tuple[float | None, int]:
    """(best mean latency in µs, trials stored) of a task's workload in ``db``: the whole history.

    Every stored trial counts, failed ones too (they were spent: the same sweep again spends nothing):
    the SQL store counts in one query, other databases list the workload's records.
    """
    from workers.tuning.database import stored_means

    if hasattr(db, "trials_covered"):  # SqlTuningDatabase: no record is rebuilt to be counted
        (covered,) = db.trials_covered([mod])
        best = covered["best_s"]
        return (None if best is None else best * 1e6), covered["trials"]
    if not db.has_workload(mod):
        return None, 0
    means = stored_means(db, db.commit_workload(mod))
    times = [t for t in means if t is not None]
    return (min(times) * 1e6 if times else None), len(means)


def _applied_us(db: Any, mod: Any) -> float | None:
    """The mean latency in µs of the record ``db`` applies to a task's workload (its top 1), or None.

    With a ``BudgetView`` that is the best of the records the budget accounts for, not of the history.
    """
    from workers.tuning.database import record_mean_s

    if not db.has_workload(mod):
        return None
    top = db.get_top_k(db.commit_workload(mod), 1)
    mean = record_mean_s(top[0]) if top else None
    return None if mean is None else mean * 1e6


def _stored_stop(job: Job, infos: list[Any], stored_best: dict[str, float | None], baseline: Any) -> bool:
    """Whether the stored records alone meet an auto budget's until rule for the whole model."""
    from workers.tuning import stopping
    from workers.tuning.auto import AutoState

    target_ms, _ = stopping.until_target(job.tuning_auto, baseline)
    weights = {i.name: i.weight for i in infos}
    names = [i.name for i in infos]
    state = AutoState(job.tuning_auto, names, weights, TuningStats(), stored_best, 0, target_ms)
    return state.stored_stop() is not None


def tuned_lowering(
    job: Job, mod: Any, env: TuningEnv, build_hold: Any = None, baseline_model: bytes | None = None
) -> tuple[Any, Any, dict[str, Any]]:
    """Tune ``job`` and lower its module with the records: (lowered module, target, provenance).

    Must run inside the job's PassContext. ``build_hold`` (a ``workers.fence.Hold``) stays held while this
    thread searches and learns, and is let go of while it waits for candidates to build or be timed, so that
    this build neither fences out its own timings nor runs its search during them (workers/tuning/runner.py).
    ``baseline_model``: the ONNX bytes, for the until rule's check builds to time ONNX Runtime beside the
    program (workers/tuning/check.py).
    """
    import tvm
    from tvm import relax

    from workers.tuning.database import BudgetView, workload_hash
    from workers.tuning.parallel import search_apart, split, why_not_parallel
    from workers.tuning.preload import preload_tensor_intrin
    from workers.tuning.progress import FileProgress, ProgressReporter
    from workers.tuning.search import open_build_database, search
    from workers.tuning.warm_start import warm_provenance

    preload_tensor_intrin()  # the first TuneContext imports it; TVMScript's inspect.stack() made that minutes
    settings, auto = job.tuning_settings, job.tuning_auto
    target = tuning_target(job.target.tvm_target, settings)
    front, back = split_pipeline(job.pipeline, target)
    with target:
        fused = front(mod)
    extracted, infos = extract(fused, target, settings.module_equality)
    db, db_kind = open_build_database(env, job, target)
    alloc, _basis = allocate(infos, job.tuning, settings.max_trials_per_task, profile_shares(env.profile))

    covered = {}
    stored_best: dict[str, float | None] = {}  # where the tuning curve starts for tasks with records
    # A fixed budget stands for the first records of each task's workload in store order, as many as it
    # spends (``BudgetView``); the workload hash (as the database computes it) names them.
    hashes = {i.name: workload_hash(extracted[i.index].dispatched[0], settings.module_equality) for i in infos}
    for info in infos:
        mod_i = extracted[info.index].dispatched[0]
        prior_us, stored = _best_us(db, mod_i)
        covered[info.name] = stored if auto else min(stored, alloc[info.name])
        if not auto and covered[info.name] < stored:  # later records are not this budget's to start from
            prior_us = _applied_us(
                BudgetView(db, {hashes[info.name]: covered[info.name]}, settings.module_equality), mod_i
            )
        stored_best[info.name] = None if prior_us is None else prior_us / 1e6
    from_records = sum(covered.values())
    reporter: Any = (
        FileProgress(env.progress_file, job.tuning)
        if env.progress_file
        else ProgressReporter(env.progress, job.build_key(tvm.__version__), job.tuning)
    )
    done = {"n": from_records}
    reporter.report(done["n"])

    def on_batch(n: int) -> None:
        done["n"] += n
        reporter.report(done["n"])

    stats = TuningStats()
    measured: dict[str, int] = {}
    started = time.perf_counter()
    todo = (list(infos) if not env.tuned_by else []) if auto else [i for i in infos if alloc[i.name] > covered[i.name]]
    stop = nothing_tuned(auto, env.baseline, env.tuned_by) if auto else None  # the search's, once tasks are tuned
    warm = warm_provenance(None, settings)
    parallel: dict[str, Any] | None = None
    if todo:
        trials = {info.name: alloc[info.name] - covered[info.name] for info in todo}
        if not auto:
            todo = tune_order(todo, trials)
        asked = settings.search_workers
        why = why_not_parallel(asked, env, len(todo)) if asked > 1 else None
        if asked > 1 and why is None and auto and _stored_stop(job, todo, stored_best, env.baseline):
            why = "the stored records already meet the until rule"
        if asked > 1:
            parallel = {"asked": asked, "workers": 1, "why": why}

        def search_once(env_now: TuningEnv, best_now: dict[str, float | None]) -> Any:
            """One search of ``todo`` (apart in groups when asked and possible) from ``best_now``."""
            nonlocal parallel
            if asked > 1 and why is None:
                # Fixed budgets split by trials; the auto budget's scheduler spends where weight x FLOPs is.
                cost = {i.name: i.weight * i.flops if auto else float(trials[i.name]) for i in todo}
                groups = [[(info, extracted[info.index]) for info in group] for group in split(todo, cost, asked)]
                before = done["n"]

                def on_total(n: int) -> None:
                    done["n"] = before + n
                    reporter.report(done["n"])

                searched, spread = search_apart(
                    job, env_now, groups, target, trials=trials, stats=stats, stored_best=best_now,
                    on_total=on_total, build_hold=build_hold,
                )  # fmt: skip
                parallel = {"asked": asked, **spread}
                done["n"] = before + sum(searched.measured.values())  # the tally's last count may lag
                reporter.report(done["n"])
                return searched
            return search(
                job, env_now, [(info, extracted[info.index]) for info in todo], db=db, trials=trials, stats=stats,
                stored_best=best_now, from_records=from_records, on_batch=on_batch, build_hold=build_hold,
            )  # fmt: skip

        searched = search_once(env, stored_best)
        measured, warm = dict(searched.measured), searched.warm
        if auto and searched.stop is not None:
            stop = searched.stop
            if stop["stopped_by"] == "until":
                stop = until_checked(
                    job, env, stop, stats, stored_best, search_once, measured, build_hold,
                    export=lambda: program_bytes(job, fused, db, target, back), baseline_model=baseline_model,
                )  # fmt: skip
    tuning_s = time.perf_counter() - started

    tasks, misses = [], []
    # An auto budget has no trial count to honour: it applies the best of every record. A fixed budget
    # applies, per task, the best of only the records it accounts for (the first covered + measured in store
    # order: what an N-trial run would have stored), so "tuned 2" is never a larger budget's program taken
    # from a shared database; a task it gave no trial stays untuned.
    spent_of = {i.name: covered[i.name] + measured.get(i.name, 0) for i in infos}
    first_n: dict[str, int] = {}
    for info in infos:  # tasks of one workload (anchor-block equality) share its records: the most any spent
        first_n[hashes[info.name]] = max(first_n.get(hashes[info.name], 0), spent_of[info.name])
    apply_db = db if auto else BudgetView(db, first_n, settings.module_equality)
    with target, apply_db:  # the pass reads both from the context
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
    for info in infos:
        mod_i = extracted[info.index].dispatched[0]
        # The applied record's time: a task limited to no record has none, so it is no TuningMiss.
        best = _best_us(db, mod_i)[0] if auto else _applied_us(apply_db, mod_i)
        func = applied[info.name] if info.name in [gv.name_hint for gv in applied.get_global_vars()] else None
        scheduled = bool(func is not None and func.attrs and func.attrs.get("tirx.is_scheduled", False))
        spent = spent_of[info.name]
        if best is not None and not scheduled:
            misses.append(info.name)
        if spent and best is None:
            stats.fail("no-record", f"{info.name}: {spent} trials, none ran successfully")
        tasks.append(
            {
                "name": info.name,
                "weight": info.weight,
                "flops": info.flops,
                "trials": spent,
                "best_us": best,
                "records_found": scheduled,
            }
        )
    # "no-record" is a consequence of failed trials, not a trial kind of its own.
    failed = {k: v for k, v in stats.failed.items() if k != "no-record"}
    provenance = {
        "budget": job.tuning,
        "trials_run": done["n"] - from_records,
        "trials_from_records": from_records,
        "tasks": tasks,
        "failed_trials": failed,
        "errors": stats.errors[:MAX_ERRORS],
        "tuning_s": tuning_s,
        "build_s": stats.times["build_s"],
        "board_wait_s": stats.times["board_wait_s"],
        "run_s": stats.times["run_s"],
        # Summed over the candidates (on all the CPUs they ran on): what building them cost, and fence waits.
        "candidates_built": stats.candidates_built,
        "candidate_compile_s": stats.times["candidate_compile_s"],
        "candidate_fence_s": stats.times["candidate_fence_s"],
        "cost_model": settings.cost_model,
        "seed": settings.seed,
        "database": db_kind,
        "warm_start": warm,
        "curve": stats.curve({i.name: i.weight for i in infos}, stored_best, from_records),
        **(stop or {}),
        **({"search": parallel} if parallel else {}),
    }
    if misses:
        raise TuningMiss(
            f"tuning records did not meet their PrimFuncs: {', '.join(misses)} have records but stayed "
            "unscheduled (the module they were applied to is not the one they were tuned on)",
            provenance,
        )
    with target:
        lowered = back(applied)
    return lowered, target, provenance
