"""The auto budget's search: every task in one MetaSchedule run, under a task scheduler that stops by itself.

MetaSchedule's "gradient" scheduler spends each round on the task whose weighted best time is falling
fastest; ``AutoScheduler`` is that rule, written on the Python side (``PyTaskScheduler``) so that it can also
stop the run. Terminating tasks from a measure callback does not work with the stock one: its
``NextTaskId`` joins the task it picked (which runs the callbacks) and returns it even when the callback
has just terminated it, and the tune loop aborts on a terminated task. Returning -1 from ``next_task_id``
ends the run cleanly: MetaSchedule then joins the batches still on the boards (their records are
stored) and terminates every task itself.

The first round (one batch of every task without a time yet, round robin) always runs: until then the
estimate leaves those tasks out. A task with a stored time, from the records or from this build's search
before a check build (workers/tuning/check.py), starts from it instead. After it, the rules
(workers/tuning/stopping.py) are asked before each new batch. The trial cap is MetaSchedule's own
``max_trials_global`` (it may pass it by less than one batch: it checks before sending a batch, not within it).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from tvmbench.core.records import AutoBudget
from workers.tuning import stopping
from workers.tuning.stats import TuningStats, best_times, curve_point, tuning_curve


class AutoState:
    """What the rules read: the build's measured trials against its tasks, its stored bests and its target."""

    def __init__(
        self,
        rules: AutoBudget,
        names: list[str],
        weights: dict[str, int],
        stats: TuningStats,
        stored_best_s: dict[str, float | None],
        first_trial: int,
        target_ms: float | None,
        shared: Any = None,
    ) -> None:
        self.rules, self.names, self.weights, self.stats = rules, names, weights, stats
        self.stored_best_s, self.first_trial, self.target_ms = stored_best_s, first_trial, target_ms
        # The other groups of a parallel search (workers/tuning/parallel.SharedRules), or None.
        self.shared = shared
        self.stop: stopping.Stop | None = None
        self._points: list[list] = []  # the curve so far, one point per trial recorded
        self._best: dict[str, float] = {}  # each task's best time (s) at the curve's last point

    def curve(self) -> list[list]:
        """This build's unthinned tuning curve (``tuning_curve``), extended by the trials recorded since the
        last call: O(tasks) per new trial, not a recount of the whole run before every batch. Counted whole
        again while no task has a time, and when a task gets its first one (that moves every earlier point)."""
        trials = self.stats.trials_so_far()
        new = trials[len(self._points) :]
        if not self._best or any(s is not None and task not in self._best for _, task, s in new):
            self._points = tuning_curve(trials, self.weights, self.stored_best_s, self.first_trial)
            self._best = best_times(trials, self.stored_best_s)
            return self._points
        for seconds, task, s in new:
            if s is not None and s < self._best[task]:
                self._best[task] = s
            self._points.append(
                curve_point(self.first_trial + len(self._points) + 1, seconds, self._best, self.weights)
            )
        return self._points

    def best_s(self) -> list[float | None]:
        """Each task's best time so far (stored or measured; None while it has none)."""
        self.curve()  # brings the bests up to the last trial recorded
        return [self._best.get(n) for n in self.names]

    def complete(self) -> bool:
        """Whether every task has a time (stored or measured), so the estimate covers them all."""
        return all(b is not None for b in self.best_s())

    def check(self, sent: int) -> stopping.Stop | None:
        """Ask the rules (``sent``: trials measured or on the boards); the first stop sticks.

        In a group of a parallel search the rules read the whole model: the other groups' trials and
        estimate are added, and a stop of theirs that ends every group (``SHARED_STOPS``) ends this one.
        """
        if self.stop is not None:
            return self.stop
        curve, complete = self.curve(), self.complete()
        if self.shared is not None:
            others = self.shared.exchange(float(curve[-1][2]) if curve else None, complete)
            if others["stop"] is not None:
                group, rule, values = others["stop"]
                self.stop = stopping.Stop(rule, {**values, "group": group})
                return self.stop
            curve = [[trial, seconds, ms + others["estimate_ms"]] for trial, seconds, ms in curve]
            sent, complete = sent + others["trials"], complete and others["complete"]
        self.stop = stopping.check(
            self.rules,
            elapsed_s=time.perf_counter() - self.stats.started,
            trials=sent,
            curve=curve,
            complete=complete,
            target_ms=self.target_ms,
        )
        if self.stop is not None and self.shared is not None:
            self.shared.stopped(self.stop.rule, self.stop.values)
        return self.stop

    def time_is_up(self) -> bool:
        """The builders' ``stop`` (asked while a batch compiles): ``stopping.time_is_up`` on this build's clock."""
        return stopping.time_is_up(
            self.rules,
            elapsed_s=time.perf_counter() - self.stats.started,
            complete=self.complete,
        )

    def stored_stop(self) -> stopping.Stop | None:
        """The until rule on the stored records alone: met already, nothing needs to be measured.

        Never in a group of a parallel search: its tasks are part of the model (the stage asked first, for all).
        """
        best = [self.stored_best_s.get(n) for n in self.names]
        if self.shared is not None or self.target_ms is None or any(b is None for b in best):
            return None
        estimate_ms = sum(self.weights.get(n, 1) * b for n, b in zip(self.names, best, strict=True) if b) * 1e3
        if estimate_ms <= self.target_ms:
            return stopping.Stop(stopping.UNTIL, {"estimate_ms": estimate_ms, "until_ms": self.target_ms})
        return None


def auto_scheduler(state: AutoState, seed: int, alpha: float = 0.2, window: int = 3) -> Any:
    """MetaSchedule's gradient task scheduler (same ``alpha`` and ``window`` defaults) that also stops."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

    @derived_object
    class AutoScheduler(PyTaskScheduler):
        def __init__(self) -> None:
            super().__init__()
            self.first: list[int] | None = None  # the first round: the tasks without a time, round robin
            self.sent = 0  # of the first round
            self.history: list[list[float]] = [[] for _ in state.names]  # per task, its best after each batch
            self.rng = random.Random(seed)

        def next_task_id(self) -> int:
            outer = self._outer()
            n = len(outer.tasks_)
            if self.first is None:
                # A task with a stored time (records, or this build's search before a check build) starts
                # from it: a round of it would buy what the records already say.
                best = state.best_s()
                self.first = [i for i in range(n) if best[i] is None]
                for i in range(n):
                    if best[i] is not None:
                        self.history[i].append(best[i])
            if self.sent < len(self.first):
                self.sent += 1
                return self.first[self.sent - 1]
            if self.sent == len(self.first):  # the first round is sent: wait for all of it (every task timed)
                self.sent += 1
                for i in self.first:
                    self._join(outer, i)
            for i in range(n):
                self._join(outer, i, only_if_done=True)
            alive = [i for i in range(n) if not outer.tasks_[i].is_terminated]
            if state.check(len(state.stats.trials_so_far())) is not None or not alive:
                return -1  # MetaSchedule joins what is still on the boards and terminates every task
            grads = [self._gradient(i) for i in alive]
            if max(grads) == min(grads):
                task_id = alive[self.rng.randrange(len(alive))]
            else:
                task_id = alive[grads.index(max(grads))]
            self._join(outer, task_id)
            return task_id

        def _join(self, outer: Any, i: int, only_if_done: bool = False) -> None:
            """Join task ``i``'s batch if it has one out (``only_if_done``: only once all of it is timed)."""
            if outer.tasks_[i].runner_futures is None:
                return
            if only_if_done:
                outer.touch_task(i)
            else:
                self.join_running_task(i)
            if outer.tasks_[i].runner_futures is None:  # joined: the measure callbacks have recorded it
                best = state.best_s()[i]
                if best is not None:
                    self.history[i].append(best)

        def _gradient(self, i: int) -> float:
            """GradientBased's rule: the recent gain per batch mixed with the best time per batch, x weight."""
            history = self.history[i]
            if not history:
                return -1e9  # no time yet (every candidate failed): last
            n, last = len(history), history[-1]
            recent = (history[-1 - window] - last) / window if n >= 1 + window else 0.0
            return (alpha * recent + (1 - alpha) * last / n) * state.weights.get(state.names[i], 1)

    return AutoScheduler()


def tune_auto(
    rules: AutoBudget,
    contexts: list[Any],
    weights: list[float],
    state: AutoState,
    *,
    seed: int,
    max_trials_per_task: int | None,
    num_trials_per_iter: int,
    **tune_options: Any,
) -> stopping.Stop:
    """Tune every task in one MetaSchedule run until a rule stops it; what stopped it.

    ``tune_options``: the rest of ``ms.tune_tasks``'s arguments (work_dir, builder, runner, database,
    cost_model, measure_callbacks, module_equality). A crash of the search is the stop ``error``.
    """
    from tvm.s_tir import meta_schedule as ms

    from tvmbench.core.errors import one_line

    stored = state.stored_stop()
    if stored is not None:
        return stored
    # After a check build the search goes on (workers/tuning/check.py): MetaSchedule counts afresh.
    cap = max(1, rules.max_trials - len(state.stats.trials_so_far()))
    error = None
    try:
        ms.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            max_trials_global=cap,
            max_trials_per_task=min(cap, max_trials_per_task or cap),
            num_trials_per_iter=min(num_trials_per_iter, cap),
            task_scheduler=auto_scheduler(state, seed),
            **tune_options,
        )
    except Exception as exc:  # a search that crashes (apache/tvm#18380) is this build's outcome
        error = one_line(exc)
    return stopping.ended(rules, state.stop, len(state.stats.trials_so_far()), error)


def run_auto(
    job: Any,
    infos: list[Any],
    contexts: list[Any],
    weights: list[float],
    stats: TuningStats,
    stored_best_s: dict[str, float | None],
    first_trial: int,
    baseline: dict[str, Any] | None,
    shared: Any = None,
    estimate_target_ms: float | None = None,
    **tune_options: Any,
) -> tuple[dict[str, Any], dict[str, int]]:
    """The stage's auto path: (the provenance's ``auto``, ``stopped_by`` and ``stop``; trials measured per task).

    ``shared``: the other groups of a parallel search (``AutoState``), or None. ``estimate_target_ms``:
    the until target as a check build recalibrated it (workers/tuning/check.py), None for the target itself."""
    rules, settings = job.tuning_auto, job.tuning_settings
    target_ms, until = stopping.until_target(rules, baseline)
    if target_ms is not None and estimate_target_ms is not None:
        target_ms = estimate_target_ms
    names = [i.name for i in infos]
    weights_by_name = {i.name: i.weight for i in infos}
    state = AutoState(rules, names, weights_by_name, stats, stored_best_s, first_trial, target_ms, shared)
    builder = tune_options.get("builder")
    if builder is not None and hasattr(builder, "stop"):  # a batch of slow compiles ends at max_minutes too
        builder.stop = state.time_is_up
    stop = tune_auto(
        rules,
        contexts,
        weights,
        state,
        seed=settings.seed,
        max_trials_per_task=settings.max_trials_per_task,
        num_trials_per_iter=settings.num_trials_per_iter,
        **tune_options,
    )
    if stop.rule == stopping.ERROR:
        stats.fail("search", str(stop.values.get("error")))
    measured = Counter(task for _, task, _ in stats.trials_so_far())
    provenance = {"auto": stopping.rules_of(rules, until), "stopped_by": stop.rule, "stop": stop.values}
    return provenance, {n: measured.get(n, 0) for n in names}


def nothing_tuned(
    rules: AutoBudget, baseline: dict[str, Any] | None, tuned_by: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The provenance's auto part of a build that tuned nothing: it had no task, or ``tuned_by`` (an earlier
    build of the same workloads and rules, ``TuningEnv.tuned_by``) tuned them, and its stop is this one's."""
    _, until = stopping.until_target(rules, baseline)
    if tuned_by is not None:
        stop_values = {**tuned_by["stop"], "tuned_by": tuned_by["build_key"]}
        return {"auto": stopping.rules_of(rules, until), "stopped_by": tuned_by["stopped_by"], "stop": stop_values}
    stop = stopping.ended(rules, None, 0)
    return {"auto": stopping.rules_of(rules, until), "stopped_by": stop.rule, "stop": stop.values}
