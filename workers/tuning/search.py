"""The search of a tuned build: tasks in, records out. MetaSchedule tunes the given tasks on the farm, a
fixed number of trials each or under the auto budget's rules, into the records' database.

The stage (workers/tuning/stage.py) calls it once for all of a build's tasks in its own process; a parallel
search (workers/tuning/parallel.py) calls it once per group of tasks, each group in a Ray task of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tvmbench.core.records import Job
from workers.tuning.stats import TuningStats
from workers.tuning.tasks import TaskInfo


@dataclass
class Searched:
    """What a search did: the auto budget's stop (its provenance part; None for a fixed budget), the trials
    measured per task, and the warm start's provenance (``warm_provenance``)."""

    stop: dict[str, Any] | None
    measured: dict[str, int]
    warm: dict[str, Any]


@contextlib.contextmanager
def work_dir() -> Iterator[str]:
    """MetaSchedule's work directory for one search, removed after it with the log handlers it left.

    Each ``tune_tasks`` points MetaSchedule's loggers at files in its work directory and leaves them there;
    a handler that logging closes and reopens later (the next run's ``dictConfig``, a test's log capture)
    then fails every log call of the process, the cost model's training included, on a folder that is gone.
    """
    path = tempfile.mkdtemp(prefix="tvmbench-tune-")
    try:
        yield path
    finally:
        _drop_file_handlers(path)
        shutil.rmtree(path, ignore_errors=True)


def _drop_file_handlers(folder: str) -> None:
    """Detach and close every logging FileHandler writing under ``folder``."""
    import logging

    loggers = [
        logging.getLogger(),
        *(x for x in logging.Logger.manager.loggerDict.values() if isinstance(x, logging.Logger)),
    ]
    for logger in loggers:
        for handler in list(logger.handlers):
            if isinstance(handler, logging.FileHandler) and handler.baseFilename.startswith(folder + "/"):
                logger.removeHandler(handler)
                handler.close()


def _progress_callback(on_batch: Callable[[int], None]) -> Any:
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class _Progress(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            on_batch(len(measure_candidates))

    return _Progress()


def _curve_callback(stats: TuningStats, task_name: Callable[[int], str]) -> Any:
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


def search_threads() -> int | str:
    """The search's thread count: MetaSchedule's default ("physical") where psutil is there to count them.

    Its default asks psutil (``ms.utils.cpu_count``), which a toolchain's venv does not have: there, the
    logical CPUs (on a 2-core machine both are the same).
    """
    import importlib.util

    return "physical" if importlib.util.find_spec("psutil") is not None else max(1, os.cpu_count() or 1)


def open_database(
    env: Any,
    module_equality: str,
    target: Any,
    board_key: str,
    *,
    model_name: str | None = None,
    source: str | None = None,
) -> tuple[Any, str]:
    """The records' MetaSchedule database and its kind for the provenance: "sql", "json" or "memory".

    ``env``: the build's ``TuningEnv`` (its ``database``: kind and path or URL).
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


def open_build_database(env: Any, job: Job, target: Any) -> tuple[Any, str]:
    """``open_database`` for a build of ``job``: its scope, and its model and build as the records' labels."""
    import tvm

    source = f"build {job.build_key(tvm.__version__)[:16]}"
    settings = job.tuning_settings
    return open_database(
        env, settings.module_equality, target, job.target.board_key, model_name=job.model.name, source=source
    )


def candidate_fence(env: Any) -> str | None:
    """The fence host candidate builds hold: the driver's machine's whatever the key (a build there slows
    any board on its cores), else the key's own (a ``TuningEnv`` made without ``machine_fence``)."""
    return env.machine_fence or env.fence_host


def search(
    job: Job,
    env: Any,
    tasks: list[tuple[TaskInfo, Any]],
    *,
    db: Any,
    trials: dict[str, int],
    stats: TuningStats,
    stored_best: dict[str, float | None],
    from_records: int,
    on_batch: Callable[[int], None],
    build_hold: Any = None,
    boards: int | None = None,
    shared: Any = None,
) -> Searched:
    """Tune ``tasks`` (``(TaskInfo, ms.ExtractedTask)``) into ``db``; what the search did.

    ``trials``: a fixed budget's trials per task name (ignored by an auto budget, which runs until its rules
    stop it). ``build_hold`` (a ``workers.fence.Hold``) is held while this thread searches and let go of
    while it waits for candidates. ``boards``: candidates timed at once (default: the env's boards, one
    when fenced). ``shared``: the other groups of a parallel search, for the auto budget's rules
    (``workers.tuning.parallel.SharedRules``).
    """
    from tvm.s_tir import meta_schedule as ms

    from tvmbench.core.errors import one_line
    from workers.fence import WorkHold
    from workers.tuning.builder import InProcessBuilder, RayBuilder
    from workers.tuning.first_batch import first_batch_strategy, guides
    from workers.tuning.preload import preload_tensor_intrin
    from workers.tuning.runner import FarmRunner, FarmRunnerConfig
    from workers.tuning.warm_start import begin, warm_provenance

    settings, auto = job.tuning_settings, job.tuning_auto
    target = tasks[0][1].target
    warm = begin(db, settings, target, search_threads())  # trains on the stored records: counts as tuning
    fence = None
    if env.fence_dir:
        from workers.toolchains.tuning import FileFence

        fence = FileFence(env.fence_dir)
    # This thread's hold on the fence: the build task's own, or in a toolchain's child one of its own.
    own_hold = WorkHold(fence.building) if build_hold is None and fence is not None else None
    work_hold = build_hold if build_hold is not None else own_hold
    pause = work_hold.paused if work_hold is not None else None
    common = {"cross_compiler": job.target.cross_compiler, "fence_host": candidate_fence(env), "stats": stats}
    builder = (
        InProcessBuilder(timeout_s=settings.builder_timeout_s, fence=fence, **common)
        if env.builder == "local"
        else RayBuilder(timeout_s=settings.builder_timeout_s, pause=pause, **common)
    )
    fenced = bool(env.fence_host) or fence is not None
    runner = FarmRunner(
        FarmRunnerConfig(
            tracker=env.tracker,
            board_key=env.board_key or job.target.board_key,
            session_timeout_s=settings.runner_timeout_s,
            device_wait_s=settings.device_wait_s,
            fence_host=env.fence_host,
            max_workers=1 if fenced else max(1, boards if boards is not None else env.boards),
        ),
        avoid=env.avoid,
        stats=stats,
        fence=fence,
        pause=pause,
    )
    preload_tensor_intrin()  # the first TuneContext imports it: minutes in a loaded process otherwise
    # A task's first batch is drawn at random while nothing can guide it (workers/tuning/first_batch.py).
    strategy = warm.strategy if warm else None
    if strategy is None:
        strategy = first_batch_strategy(lambda: guides(settings.cost_model), population=settings.population)
    stop: dict[str, Any] | None = None
    measured: dict[str, int] = {}
    done = {"n": 0}

    def counted(n: int) -> None:
        done["n"] += n
        on_batch(n)

    with own_hold or contextlib.nullcontext(), work_dir() as folder:
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            [task for _, task in tasks], folder, strategy=strategy, seed=settings.seed, num_threads=search_threads()
        )
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _progress_callback(counted)]
        current = {"task": ""}
        names = [info.name for info, _ in tasks]
        callbacks.append(_curve_callback(stats, names.__getitem__ if auto else lambda _id: current["task"]))
        database = warm.database if warm else db
        cost_model = warm.cost_model if warm else settings.cost_model
        if auto:
            from workers.tuning.auto import run_auto

            stop, measured = run_auto(
                job, [info for info, _ in tasks], contexts, weights, stats, stored_best, from_records, env.baseline,
                estimate_target_ms=env.estimate_target_ms, work_dir=folder, builder=builder, runner=runner,
                database=database, cost_model=cost_model, measure_callbacks=callbacks,
                module_equality=settings.module_equality, shared=shared,
            )  # fmt: skip
        for (info, _), ctx, weight in [] if auto else zip(tasks, contexts, weights, strict=True):
            before = done["n"]
            current["task"] = info.name
            try:
                ms.tune_tasks(
                    tasks=[ctx],
                    task_weights=[weight],
                    work_dir=folder,
                    max_trials_global=trials[info.name],
                    max_trials_per_task=trials[info.name],
                    num_trials_per_iter=min(settings.num_trials_per_iter, trials[info.name]),
                    builder=builder,
                    runner=runner,
                    database=database,
                    cost_model=cost_model,
                    measure_callbacks=callbacks,
                    task_scheduler="round-robin",
                    module_equality=settings.module_equality,
                )
            except Exception as exc:  # a search that crashes (apache/tvm#18380) is this task's outcome
                stats.fail("search", f"{info.name}: {one_line(exc)}")
            measured[info.name] = done["n"] - before
    runner.shutdown()
    return Searched(stop=stop, measured=measured, warm=warm_provenance(warm, settings))
