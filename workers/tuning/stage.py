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
count}), ``errors`` (up to 5 samples), ``tuning_s``, ``build_s``, ``board_wait_s``, ``run_s``,
``cost_model``, ``seed``, ``database`` ("sql" | "memory" | "json"), ``warm_start`` (the cost model's
training on stored records and the seeds of new workloads: workers/tuning/warm_start.py), and ``curve``:
the tuning curve, ``[[trial, tuning seconds, estimate ms], ...]`` per measured trial (at most 512 points,
thinned evenly), the estimate being the best-so-far sum over tasks of weight x best candidate time (see
``workers.tuning.stats.tuning_curve`` for exactly what it counts). An auto budget (``job.tuning_auto``)
tunes every task in one run that stops by itself (workers/tuning/auto.py) and adds ``auto`` (its rules
and baseline), ``stopped_by`` and ``stop`` (workers/tuning/stopping.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tvmbench.core.records import Job, TuningSettings
from workers.tuning.auto import nothing_tuned
from workers.tuning.stats import MAX_ERRORS, TuningStats
from workers.tuning.tasks import allocate, extract, profile_shares, split_pipeline


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


def search_threads() -> int | str:
    """The search's thread count: MetaSchedule's default ("physical") where psutil is there to count them.

    Its default asks psutil (``ms.utils.cpu_count``), which a toolchain's venv does not have: there, the
    logical CPUs (on a 2-core machine both are the same).
    """
    import importlib.util

    return "physical" if importlib.util.find_spec("psutil") is not None else max(1, os.cpu_count() or 1)


def open_database(
    env: TuningEnv,
    module_equality: str,
    target: Any,
    board_key: str,
    *,
    model_name: str | None = None,
    source: str | None = None,
) -> tuple[Any, str]:
    """The records' MetaSchedule database and its kind for the provenance: "sql", "json" or "memory".

    ``model_name`` and ``source`` label what the SQL store keeps (`tuning export --model`, provenance).
    """
    from tvm.s_tir import meta_schedule as ms

    kind = env.database.get("kind", "memory")
    if kind == "sql":
        from workers.tuning.database import SqlTuningDatabase

        db = SqlTuningDatabase(
            env.database["url"],
            target=target,
            board_key=board_key,
            module_equality=module_equality,
            model_name=model_name,
            source=source,
        )
        return db, "sql"
    if kind == "json":
        path = env.database["path"]
        os.makedirs(path, exist_ok=True)
        return ms.database.JSONDatabase(work_dir=path, module_equality=module_equality), "json"
    return ms.database.MemoryDatabase(module_equality=module_equality), "memory"


def _progress_callback(on_batch: Any) -> Any:
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class _Progress(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            on_batch(len(measure_candidates))

    return _Progress()


def _curve_callback(stats: TuningStats, task_name: Any) -> Any:
    """Records every measured candidate for the curve, under ``task_name(task_id)``."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class _Curve(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            run_s: list[float | None] = []
            for result in runner_results:
                secs = [float(x) for x in (result.run_secs or [])] if result.error_msg is None else []
                run_s.append(sum(secs) / len(secs) if secs else None)
            artifacts = [None if b.artifact_path is None else str(b.artifact_path) for b in builder_results]
            stats.record_batch(task_name(task_id), artifacts, run_s)

    return _Curve()


def _best_us(db: Any, mod: Any) -> tuple[float | None, int]:
    """(best mean latency in µs, trials stored) of a task's workload in ``db``.

    The SQL store counts every stored trial, failed ones too (they were spent: the same sweep again
    spends nothing), in one query; other databases count their successful records.
    """
    if hasattr(db, "trials_covered"):  # SqlTuningDatabase: no record is rebuilt to be counted
        (covered,) = db.trials_covered([mod])
        best = covered["best_s"]
        return (None if best is None else best * 1e6), covered["trials"]
    if not db.has_workload(mod):
        return None, 0
    workload = db.commit_workload(mod)
    records = db.get_top_k(workload, 1_000_000)
    if not records:
        return None, 0
    secs = [float(s) for s in records[0].run_secs]
    return (sum(secs) / len(secs) * 1e6 if secs else None), len(records)


@contextlib.contextmanager
def _work_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="tvmbench-tune-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def tuned_lowering(job: Job, mod: Any, env: TuningEnv, build_hold: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """Tune ``job`` and lower its module with the records: (lowered module, target, provenance).

    Must run inside the job's PassContext. ``build_hold`` (a ``workers.fence.Hold``) stays held while this
    thread searches and learns, and is let go of while it waits for candidates to build or be timed, so that
    this build neither fences out its own timings nor runs its search during them (workers/tuning/runner.py).
    """
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from tvmbench.core.errors import one_line
    from workers.fence import WorkHold
    from workers.tuning.builder import InProcessBuilder, RayBuilder
    from workers.tuning.first_batch import first_batch_strategy, guides
    from workers.tuning.preload import preload_tensor_intrin
    from workers.tuning.progress import FileProgress, ProgressReporter
    from workers.tuning.runner import FarmRunner, FarmRunnerConfig
    from workers.tuning.warm_start import begin, warm_provenance

    preload_tensor_intrin()  # the first TuneContext imports it; TVMScript's inspect.stack() made that minutes
    settings, auto = job.tuning_settings, job.tuning_auto
    target = tuning_target(job.target.tvm_target, settings)
    front, back = split_pipeline(job.pipeline, target)
    with target:
        fused = front(mod)
    extracted, infos = extract(fused, target, settings.module_equality)
    db, db_kind = open_database(
        env,
        settings.module_equality,
        target,
        job.target.board_key,
        model_name=job.model.name,
        source=f"build {job.build_key(tvm.__version__)[:16]}",
    )
    alloc, _basis = allocate(infos, job.tuning, settings.max_trials_per_task, profile_shares(env.profile))

    covered = {}
    stored_best: dict[str, float | None] = {}  # where the tuning curve starts for tasks with records
    for info in infos:
        prior_us, stored = _best_us(db, extracted[info.index].dispatched[0])
        covered[info.name] = stored if auto else min(stored, alloc[info.name])
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
    stop = nothing_tuned(auto, env.baseline, env.tuned_by) if auto else None  # run_auto's, once tasks are tuned
    warm = None
    if todo:
        warm = begin(db, settings, target, search_threads())  # trains on the stored records: counts as tuning
        fence = None
        if env.fence_dir:
            from workers.toolchains.tuning import FileFence

            fence = FileFence(env.fence_dir)
        # This thread's hold on the fence: the build task's own, or in a toolchain's child one of its own.
        own_hold = WorkHold(fence.building) if build_hold is None and fence is not None else None
        work_hold = build_hold if build_hold is not None else own_hold
        pause = work_hold.paused if work_hold is not None else None
        common = {"cross_compiler": job.target.cross_compiler, "fence_host": env.fence_host, "stats": stats}
        builder = (
            InProcessBuilder(timeout_s=settings.builder_timeout_s, fence=fence, **common)
            if env.builder == "local"
            else RayBuilder(timeout_s=settings.builder_timeout_s, pause=pause, **common)
        )
        runner = FarmRunner(
            FarmRunnerConfig(
                tracker=env.tracker,
                board_key=env.board_key or job.target.board_key,
                session_timeout_s=settings.runner_timeout_s,
                device_wait_s=settings.device_wait_s,
                fence_host=env.fence_host,
                max_workers=1 if env.fence_host or fence is not None else max(1, env.boards),
            ),
            avoid=env.avoid,
            stats=stats,
            fence=fence,
            pause=pause,
        )
        preload_tensor_intrin()  # the first TuneContext imports it: minutes in a loaded process otherwise
        # A task's first batch is drawn at random while nothing can guide it (workers/tuning/first_batch.py).
        strategy = (
            warm.strategy
            if warm
            else first_batch_strategy(lambda: guides(settings.cost_model), population=settings.population)
        )
        with own_hold or contextlib.nullcontext(), _work_dir() as work_dir:
            contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
                [extracted[i.index] for i in todo],
                work_dir,
                strategy=strategy,
                seed=settings.seed,
                num_threads=search_threads(),
            )
            callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _progress_callback(on_batch)]
            current = {"task": ""}
            names = [i.name for i in todo]
            callbacks.append(_curve_callback(stats, names.__getitem__ if auto else lambda _id: current["task"]))
            if auto:
                from workers.tuning.auto import run_auto

                stop, measured = run_auto(
                    job, todo, contexts, weights, stats, stored_best, from_records, env.baseline,
                    work_dir=work_dir, builder=builder, runner=runner, database=warm.database if warm else db,
                    cost_model=warm.cost_model if warm else settings.cost_model, measure_callbacks=callbacks,
                    module_equality=settings.module_equality,
                )  # fmt: skip
            per_task = [] if auto else list(zip(todo, contexts, weights, strict=True))
            for info, ctx, weight in per_task:
                trials = alloc[info.name] - covered[info.name]
                before = done["n"]
                current["task"] = info.name
                try:
                    ms.tune_tasks(
                        tasks=[ctx],
                        task_weights=[weight],
                        work_dir=work_dir,
                        max_trials_global=trials,
                        max_trials_per_task=trials,
                        num_trials_per_iter=min(settings.num_trials_per_iter, trials),
                        builder=builder,
                        runner=runner,
                        database=warm.database if warm else db,
                        cost_model=warm.cost_model if warm else settings.cost_model,
                        measure_callbacks=callbacks,
                        task_scheduler="round-robin",
                        module_equality=settings.module_equality,
                    )
                except Exception as exc:  # a search that crashes (apache/tvm#18380) is this task's outcome
                    stats.fail("search", f"{info.name}: {one_line(exc)}")
                measured[info.name] = done["n"] - before
        runner.shutdown()
    tuning_s = time.perf_counter() - started

    tasks, misses = [], []
    with target, db:  # the pass reads both from the context
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
    for info in infos:
        best, stored = _best_us(db, extracted[info.index].dispatched[0])
        func = applied[info.name] if info.name in [gv.name_hint for gv in applied.get_global_vars()] else None
        scheduled = bool(func is not None and func.attrs and func.attrs.get("tirx.is_scheduled", False))
        spent = covered[info.name] + measured.get(info.name, 0)
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
        "cost_model": settings.cost_model,
        "seed": settings.seed,
        "database": db_kind,
        "warm_start": warm_provenance(warm, settings),
        "curve": stats.curve({i.name: i.weight for i in infos}, stored_best, from_records),
        **(stop or {}),
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
