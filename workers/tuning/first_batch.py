"""A task's first batch drawn at random from its design spaces while nothing can guide the search.

MetaSchedule's evolutionary search builds every batch the same way: a population of 512 schedules
(random samples plus the task's measured bests), four rounds of mutation, each ranked by the cost model,
and the batch taken from the top. Before a task has a record, its population is random samples only, and
a cost model still in its warmup (XGBoost answers at random until it has seen 100 measurements) ranks
them at random: the batch is a random draw that cost 10-16 s of search per light_squeezenet convolution
on 2 cores. MetaSchedule's ``ReplayTrace`` draws the same kind of batch (the design spaces with random
decisions) in 0.1-0.2 s. Across squeezenet's 30 tasks that was most of a 12-minute auto budget's first
round.

So the first batch of a task is drawn that way when the task has no record (its own, or a warm start's
seed) and the cost model cannot rank yet; duplicates are dropped, so a kernel with one schedule costs
one trial. The batch's first candidate is the task's untuned kernel (what the untuned
build compiles), so that a task whose drawn schedules are all slower keeps it: on light_shufflenet 20 of
40 tasks timed faster untuned than the best schedule found in 14 minutes (the largest channel shuffle 5x,
the smallest kernels 10-500x: a parallel loop's thread-pool start costs more than the whole kernel).
Every later batch, and every first batch with something to go on, is the evolutionary search's. The
evolutionary search is told of the drawn batch's results: it counts its trials by them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch, PySearchStrategy

from tvmbench.core.records import DEFAULT_POPULATION


def guides(model: Any) -> bool:
    """Whether the cost model ``model`` (an object, or the name each task makes a fresh one of) ranks
    candidates better than at random now."""
    if isinstance(model, str):
        return model == "mlp"  # fresh: xgb starts in its warmup, random never learns; mlp, to be safe, ranks
    if hasattr(model, "num_warmup_samples"):  # XGBModel
        return model.data_size >= model.num_warmup_samples and getattr(model, "booster", None) is not None
    return type(model).__name__ != "RandomModel"


def has_something_to_go_on(context: Any, database: Any) -> bool:
    """Whether the task has a record, its own or a seed (``SeedingDatabase.get_top_k`` adds those)."""
    try:
        return bool(database.get_top_k(database.commit_workload(context.mod), 1))
    except Exception:  # a database that cannot say: leave the batch to the search
        return True


def untuned_candidate(context: Any) -> Any:
    """The task's kernel as the untuned build compiles it: a schedule whose trace changes nothing."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    sch = Schedule(context.mod)
    # A record without instructions is "never scheduled" to MetaSchedule, which never applies it
    # (TuningRecord.IsValid); getting the root block changes nothing and makes it a record like any other.
    with contextlib.suppress(Exception):  # a kernel without a root block is still measured, never applied
        sch.get_sblock("root", func_name="main")
    return MeasureCandidate(sch, ArgInfo.from_entry_func(context.mod, remove_preproc=True))


def random_batch(context: Any, size: int, design_spaces: Any, database: Any, cost_model: Any) -> list[Any]:
    """Up to ``size`` distinct schedules of the task: its untuned kernel, then its design spaces with random
    decisions."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.search_strategy import ReplayTrace

    replay = ReplayTrace()
    replay._initialize_with_tune_context(context)
    replay.pre_tuning(size, size, design_spaces, database, cost_model)
    try:
        drawn = list(replay.generate_measure_candidates() or [])
    finally:
        replay.post_tuning()
    seen, batch = set(), []
    for candidate in [untuned_candidate(context), *drawn]:
        key = tvm_ffi.structural_hash(candidate.sch.mod)
        if key not in seen:
            seen.add(key)
            batch.append(candidate)
    return batch[:size]


class AroundSearch(PySearchStrategy):
    """A search strategy around ``inner`` (by default MetaSchedule's evolutionary search of ``population``
    schedules): each method a subclass does not override is the inner strategy's. Subclasses are
    ``@derived_object`` and clone."""

    def __init__(self, inner: Any = None, population: int = DEFAULT_POPULATION) -> None:
        self.inner = inner if inner is not None else EvolutionarySearch(population_size=population)
        self.context: Any = None

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.context = context
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self,
        max_trials: int,
        num_trials_per_iter: int,
        design_spaces: Any,
        database: Any = None,
        cost_model: Any = None,
    ) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self) -> Any:
        return self.inner.generate_measure_candidates()

    def notify_runner_results(self, measure_candidates: Any, results: Any) -> None:
        self.inner.notify_runner_results(measure_candidates, results)


@derived_object
class FirstBatchDrawn(AroundSearch):
    """The inner search, whose first batch is drawn at random when the task has no record and
    ``model_guides()`` is false (see the module docstring)."""

    def __init__(
        self, model_guides: Callable[[], bool], inner: Any = None, population: int = DEFAULT_POPULATION
    ) -> None:
        super().__init__(inner, population)
        self.model_guides, self.args, self.first = model_guides, None, True

    def pre_tuning(
        self,
        max_trials: int,
        num_trials_per_iter: int,
        design_spaces: Any,
        database: Any = None,
        cost_model: Any = None,
    ) -> None:
        super().pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.args = (min(max_trials, num_trials_per_iter), design_spaces, database, cost_model)
        self.first = True

    def generate_measure_candidates(self) -> Any:
        if self.first:
            self.first = False
            # Asked now, not in pre_tuning: a warm start's seeds are found after the inner pre_tuning.
            size, spaces, database, cost_model = self.args
            if size > 0 and not self.model_guides() and not has_something_to_go_on(self.context, database):
                batch = random_batch(self.context, size, spaces, database, cost_model)
                if batch:
                    return batch
        return self.inner.generate_measure_candidates()

    def clone(self) -> Any:
        return FirstBatchDrawn(self.model_guides, self.inner.clone())


def first_batch_strategy(
    model_guides: Callable[[], bool], inner: Any = None, population: int = DEFAULT_POPULATION
) -> Any:
    """MetaSchedule's evolutionary search of ``population`` schedules (or ``inner``) whose first batch is
    drawn at random when the task has no record and ``model_guides()`` is false (see the module docstring)."""
    return FirstBatchDrawn(model_guides, inner, population)
