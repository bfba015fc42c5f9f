"""What a tuning run spent and what went wrong, shared by the builder, the runner and the stage.

Runner threads update it concurrently, hence the lock. It becomes part of the build's ``tuning``
provenance (see ``workers.tuning.stage``), the tuning curve included (``tuning_curve``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

MAX_ERRORS = 5  # sample messages kept; the counts by kind are complete
MAX_CURVE_POINTS = 512  # a 10,000-trial build keeps an evenly thinned curve, not a point per trial


class TuningStats:
    """Seconds spent building candidates, waiting for boards and measuring; failed trials by kind.

    ``build_s`` is the tuning thread's wait for each batch; ``candidate_compile_s`` and ``candidate_fence_s`` are summed
    over the candidates built (compiling, waiting for the host fence), on however many CPUs they ran.
    """

    def __init__(self, on_trial: Callable[[int], None] | None = None) -> None:
        self._lock = threading.Lock()
        self.times: dict[str, float] = {
            "build_s": 0.0, "board_wait_s": 0.0, "run_s": 0.0, "candidate_compile_s": 0.0, "candidate_fence_s": 0.0
        }  # fmt: skip
        self.candidates_built = 0
        self.failed: Counter = Counter()
        self.errors: list[str] = []
        self.measured = 0  # candidates the runner finished (timed or failed)
        self._on_trial = on_trial
        self.started = time.perf_counter()  # tuning seconds on the curve count from here
        self._timed: dict[str, float] = {}  # candidate artifact path -> when the runner finished with it
        self.trials: list[tuple[float, str, float | None]] = []  # (seconds, task, mean run seconds or None)

    def add_time(self, what: str, seconds: float) -> None:
        with self._lock:
            self.times[what] = self.times.get(what, 0.0) + seconds

    def built(self, compile_s: float, fence_wait_s: float) -> None:
        """One candidate built: its compile seconds and the seconds it waited for the host fence."""
        with self._lock:
            self.times["candidate_compile_s"] += compile_s
            self.times["candidate_fence_s"] += fence_wait_s
            self.candidates_built += 1

    def fail(self, kind: str, message: str) -> None:
        """Count one failed trial of ``kind`` (build, build-timeout, build-stopped, infra, timeout,
        device-unavailable...)."""
        with self._lock:
            self.failed[kind] += 1
            line = f"{kind}: {message}"
            if len(self.errors) < MAX_ERRORS and line not in self.errors:
                self.errors.append(line[:400])

    def trial_done(self) -> None:
        with self._lock:
            self.measured += 1
            done = self.measured
        if self._on_trial is not None:
            self._on_trial(done)

    def timed(self, artifact_path: str) -> None:
        """The runner is done with the candidate built at ``artifact_path`` (timed or failed): now."""
        with self._lock:
            self._timed[artifact_path] = time.perf_counter()

    def record_batch(self, task: str, artifacts: list[str | None], run_s: list[float | None]) -> None:
        """One measured batch of ``task``: per candidate its artifact path (None when its build failed) and
        its mean run seconds (None when it failed), as MetaSchedule hands the batch to measure callbacks.

        A candidate's time is when the runner finished with it; a candidate that never reached the runner
        (a failed build) gets the batch's end. Within a batch the trials go in the order they finished.
        """
        now = time.perf_counter()
        with self._lock:
            batch = [
                ((self._timed.pop(a, now) if a else now) - self.started, task, s)
                for a, s in zip(artifacts, run_s, strict=True)
            ]
        batch.sort(key=lambda trial: trial[0])  # stable: ties keep MetaSchedule's order
        with self._lock:
            self.trials.extend(batch)

    def absorb(self, times: dict[str, float], failed: dict[str, int], errors: list[str], built: int = 0) -> None:
        """Add another search's seconds, failed trials, sample errors and candidates built (a group of a
        parallel search)."""
        with self._lock:
            self.candidates_built += built
            for what, seconds in times.items():
                self.times[what] = self.times.get(what, 0.0) + seconds
            self.failed.update(failed)
            for line in errors:
                if len(self.errors) < MAX_ERRORS and line not in self.errors:
                    self.errors.append(line)

    def add_trials(self, trials: list[tuple[float, str, float | None]]) -> None:
        """Add trials recorded elsewhere, on this run's clock, in the order they finished."""
        with self._lock:
            self.trials.extend(sorted(trials, key=lambda trial: trial[0]))

    def trials_so_far(self) -> list[tuple[float, str, float | None]]:
        """A copy of the trials recorded so far (seconds, task, mean run seconds or None)."""
        with self._lock:
            return list(self.trials)

    def curve(self, weights: dict[str, int], stored_best_s: dict[str, float | None], first_trial: int) -> list[list]:
        """The tuning curve of the trials recorded so far, thinned to ``MAX_CURVE_POINTS``."""
        return thin(tuning_curve(self.trials_so_far(), weights, stored_best_s, first_trial))


def tuning_curve(
    trials: list[tuple[float, str, float | None]],
    weights: dict[str, int],
    stored_best_s: dict[str, float | None],
    first_trial: int = 0,
) -> list[list]:
    """Best-so-far model-level estimate per measured trial: ``[[trial, seconds, estimate_ms], ...]``.

    ``trials`` are (tuning seconds when the trial finished, task, the candidate's mean run seconds or None
    when it failed), in the order they finished. ``trial`` numbers count on from ``first_trial`` (the
    trials stored records already covered), so the last one is the trials this build's records stand for.

    The estimate is what MetaSchedule's measurements say the tuned kernels cost per inference: the sum
    over tasks of weight (calls per inference) x the task's best candidate time so far. It is not a
    measurement of the model: MetaSchedule times one task's kernel at a time, never the whole program.
    A task not yet reached counts at its stored record's best (records from earlier builds) or else at
    its first successful measured time in this build, so every point sums the same tasks. Tasks with no
    successful measurement at all (no trials given, or every trial failed) are left out, as is everything
    outside the kernels (the VM, memory planning, copies): the build's measured median is the real figure.
    Empty when no task has a time.
    """
    start = {t: s for t, s in stored_best_s.items() if s is not None}
    for _, task, s in trials:
        if s is not None and task not in start:
            start[task] = s
    if not start:
        return []
    best = dict(start)
    out: list[list] = []
    for k, (seconds, task, s) in enumerate(trials, start=1):
        if s is not None and s < best[task]:
            best[task] = s
        out.append(curve_point(first_trial + k, seconds, best, weights))
    return out


def best_times(
    trials: list[tuple[float, str, float | None]], stored_best_s: dict[str, float | None]
) -> dict[str, float]:
    """Each task's best time (s): its stored records' or its trials', whichever is less (none: left out)."""
    best = {t: s for t, s in stored_best_s.items() if s is not None}
    for _, task, s in trials:
        if s is not None:
            best[task] = min(s, best.get(task, s))
    return best


def curve_point(trial: int, seconds: float, best: dict[str, float], weights: dict[str, int]) -> list:
    """One point of the curve: ``[trial, seconds, estimate_ms]`` with the tasks' ``best`` times (s) so far."""
    # Summed afresh at every point: a running total would drift by float rounding.
    estimate_ms = sum(weights.get(t, 1) * b for t, b in best.items()) * 1e3
    # Rounding is monotone, so a best-so-far curve stays non-increasing once rounded.
    return [trial, round(seconds, 2), float(f"{estimate_ms:.6g}")]


def thin(points: list[list], cap: int = MAX_CURVE_POINTS) -> list[list]:
    """At most ``cap`` of ``points``, evenly spaced by index, the first and the last always among them."""
    n = len(points)
    if n <= cap:
        return points
    if cap < 2:
        return points[-1:]
    # (n - 1) / (cap - 1) > 1 here, so the rounded indices are distinct: exactly ``cap`` points.
    return [points[round(i * (n - 1) / (cap - 1))] for i in range(cap)]
