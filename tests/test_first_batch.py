"""The first batch of a task with nothing to go on is drawn from its design spaces, not searched for.

Real MetaSchedule contexts on a small matmul; the evolutionary search behind the drawn batch is a spy that
records what it is asked, so the test says which of the two produced each batch.
"""

from __future__ import annotations

from typing import Any

import tvm

TARGET = {"kind": "llvm", "num-cores": 2}


class SpySearch:
    """Stands in for the evolutionary search: logs its calls; generate says it has nothing (None)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.log.append("init")

    def pre_tuning(self, *args: Any) -> None:
        self.log.append("pre_tuning")

    def post_tuning(self) -> None:
        self.log.append("post_tuning")

    def generate_measure_candidates(self) -> None:
        self.log.append("generate")

    def notify_runner_results(self, candidates: Any, results: Any) -> None:
        self.log.append(f"notify {len(results)}")

    def clone(self) -> SpySearch:
        return self


def _matmul() -> Any:
    from tvm import te

    a, b = te.placeholder((64, 64), name="A"), te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")})


def _context(guides: bool, log: list[str], database: Any = None) -> tuple[Any, Any]:
    """A tuning context of the matmul with the first-batch strategy over the spy; (context, database)."""
    from tvm.s_tir import meta_schedule as ms

    from workers.tuning.first_batch import first_batch_strategy
    from workers.tuning.preload import preload_tensor_intrin

    preload_tensor_intrin()  # the first context imports the tensor intrinsics: slow unless preloaded

    strategy = first_batch_strategy(lambda: guides, inner=SpySearch(log))
    ctx = ms.TuneContext(
        mod=_matmul(),
        target=tvm.target.Target(TARGET),
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name="matmul",
        num_threads=1,
        rand_state=0,
    )
    database = database if database is not None else ms.database.MemoryDatabase()
    ctx.pre_tuning(
        max_trials=32,
        num_trials_per_iter=8,
        design_spaces=ctx.generate_design_space(),
        database=database,
        cost_model=ms.cost_model.RandomModel(),
    )
    return ctx, database


def test_an_unguided_first_batch_is_drawn_distinct_and_the_search_takes_over() -> None:
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    log: list[str] = []
    ctx, _ = _context(guides=False, log=log)
    first = ctx.search_strategy.generate_measure_candidates()
    assert first is not None and 1 <= len(first) <= 8 and log == ["init", "pre_tuning"], log  # not the search's
    assert len({tvm_ffi.structural_hash(c.sch.mod) for c in first}) == len(first)
    # The first candidate is the untuned kernel, so a task whose drawn schedules all lose keeps it: its
    # trace changes nothing, and its record is one MetaSchedule applies (a valid one, unlike an empty trace).
    untuned = first[0]
    assert [i.kind.name for i in untuned.sch.trace.insts] == ["GetSBlock"]
    assert tvm_ffi.structural_equal(untuned.sch.mod, ctx.mod)
    assert all(len(c.sch.trace.insts) > 1 for c in first[1:])
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(ctx.mod)
    database.commit_tuning_record(
        ms.database.TuningRecord(untuned.sch.trace, workload, [1e-6], ctx.target, untuned.args_info)
    )
    assert len(database.get_top_k(workload, 1)) == 1
    applied = database.query_schedule(ctx.mod, ctx.target, workload_name="main")
    assert applied is not None and tvm_ffi.structural_equal(applied.mod, ctx.mod)
    ctx.search_strategy.notify_runner_results(first, [RunnerResult([1e-3], None) for _ in first])
    assert log[-1] == f"notify {len(first)}"  # the search counts its trials by the drawn batch's results
    assert ctx.search_strategy.generate_measure_candidates() is None and log[-1] == "generate"


def test_a_model_that_ranks_or_a_stored_record_leaves_the_first_batch_to_the_search() -> None:
    from tvm.s_tir import meta_schedule as ms

    log: list[str] = []
    ctx, _ = _context(guides=True, log=log)
    assert ctx.search_strategy.generate_measure_candidates() is None and log[-1] == "generate"
    # A task with a record: the drawn batch would ignore it.
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(_matmul())
    trace = (
        ms.TuneContext(
            mod=_matmul(), target=tvm.target.Target(TARGET), space_generator="post-order-apply", task_name="m"
        )
        .generate_design_space()[0]
        .trace
    )
    target = tvm.target.Target(TARGET)
    database.commit_tuning_record(ms.database.TuningRecord(trace, workload, [1e-3], target))
    log.clear()
    ctx, _ = _context(guides=False, log=log, database=database)
    assert ctx.search_strategy.generate_measure_candidates() is None and log[-1] == "generate"


def test_which_cost_models_guide() -> None:
    from tvm.s_tir import meta_schedule as ms

    from workers.tuning.first_batch import guides

    assert not guides("xgb") and not guides("random") and guides("mlp")
    assert not guides(ms.cost_model.RandomModel())
    xgb = ms.cost_model.XGBModel()
    assert not guides(xgb)  # in its warmup: it answers at random
    xgb.num_warmup_samples = 0
    assert not guides(xgb)  # no booster trained yet
