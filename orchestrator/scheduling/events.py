"""What a sweep run tells its listeners: builds done, runs done, retries, the cancel.

The store writes (``StoreWriter``) and the counts behind the progress callback and ``SweepOutcome``
(``Progress``) are listeners; they are called in the order given, the store first. The progress
callback gets the events and counts the CLI progress bar and `tvmbench.run` show: "start", "built",
"measured", "retry", "tuning", "cancelled".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from db.store import ResultStore
from tvmbench.core.records import PENDING_STATUSES, Build, Job, Run

ProgressFn = Callable[[str, dict[str, int]], None]


@dataclass
class SweepOutcome:
    sweep_id: str
    new: bool
    jobs: int
    already_final: int = 0
    built: int = 0
    cached: int = 0
    measured: int = 0
    equivalent: int = 0
    codegen_skipped: int = 0  # builds whose program another build compiled (same fingerprint)
    statuses: Counter = field(default_factory=Counter)

    @property
    def complete(self) -> bool:
        return not any(s in PENDING_STATUSES for s in self.statuses)

    def summary(self) -> dict[str, Any]:
        """The counts as plain JSON (`sweep run --json`)."""
        return {
            "jobs": self.jobs,
            "built": self.built,
            "cached": self.cached,
            "measured": self.measured,
            "equivalent": self.equivalent,
            "codegen_skipped": self.codegen_skipped,
            "already_final": self.already_final,
            "statuses": dict(self.statuses),
        }


class Listener:
    """The events of a sweep run; every method does nothing unless overridden."""

    def on_start(self, cached: int, to_build: int, jobs: int) -> None: ...

    def on_build_done(self, job: Job, build: Build) -> None:
        """A build is done (compiled, or reused another build's program); ``job`` is its first job."""

    def on_job_ended(self, job_key: str, status: str, error: str | None) -> None:
        """A job ended without a run (its build failed, or its model cannot be referenced), or its build was
        lost with its worker (status pending: a resume builds it again)."""

    def on_run_done(self, run: Run, *, final: bool, equivalent: bool) -> None:
        """A job's outcome: its own measurement, or (``equivalent``) a copy of its leader's."""

    def on_retry(self, run: Run) -> None:
        """An attempt failed on its board (`infra`) and runs again."""

    def on_tuning(self, done: int, budget: int) -> None: ...

    def on_cancel(self, pending: int) -> None:
        """A cancel request ended the run; ``pending`` jobs had no final row."""


class StoreWriter(Listener):
    """Every outcome into the store, as it arrives."""

    def __init__(self, store: ResultStore, sweep_id: str) -> None:
        self.store, self.sweep_id = store, sweep_id

    def on_build_done(self, job: Job, build: Build) -> None:
        self.store.save_build(job, build)

    def on_job_ended(self, job_key: str, status: str, error: str | None) -> None:
        self.store.finish_job(self.sweep_id, job_key, status, error)

    def on_run_done(self, run: Run, *, final: bool, equivalent: bool) -> None:
        self.store.record_run(self.sweep_id, run, final=final)

    def on_retry(self, run: Run) -> None:
        self.store.record_run(self.sweep_id, run, final=False)

    def on_cancel(self, pending: int) -> None:
        self.store.cancel_pending_jobs(self.sweep_id, "cancelled by `tvmbench sweep cancel`")


class Progress(Listener):
    """The counts of the outcome and of the progress callback, which it calls after each event.

    Tuning counts (``on_tuning`` and the tuned builds' provenance): ``trials_done`` is the trials measured
    in this run, ``trials_reused`` the trials finished builds took from stored records instead (never
    counted as run), ``trials_budget`` the budgets of the tuned builds seen so far (an auto budget counts
    its ``max_trials`` cap: a ceiling, not a plan, so the CLI does not show it as a total).
    """

    def __init__(self, outcome: SweepOutcome, progress: ProgressFn | None) -> None:
        self.outcome = outcome
        self.progress = progress or (lambda _event, _counts: None)
        self.counts: Counter = Counter()
        # Of the tuned builds that finished: what the sweep's trial sum counts for them (trials run plus
        # trials from records: orchestrator/scheduling/tuning_progress.py), and of that the run part.
        self._finished_counted = 0
        self._finished_run = 0

    def _count(self, status: str) -> None:
        self.outcome.statuses[status] += 1
        self.counts["ok" if status == "ok" else ("waiting" if status in PENDING_STATUSES else "failed")] += 1
        self.progress("measured", dict(self.counts))

    def on_start(self, cached: int, to_build: int, jobs: int) -> None:
        self.outcome.cached += cached
        self.counts.update(cached=cached, to_build=to_build, jobs=jobs)
        self.progress("start", dict(self.counts))

    def on_build_done(self, job: Job, build: Build) -> None:
        self.outcome.built += 1
        self.outcome.codegen_skipped += bool(build.reused_from)
        self.counts["built"] += 1
        # Builds parked at the start (an auto budget waiting for its until baseline) are not in the start's
        # count: each joins the total when it is built, so "built" never runs past it.
        self.counts["to_build"] = max(self.counts["to_build"], self.counts["built"])
        tuning = build.tuning or {}
        if job.tuning and "trials_run" in tuning:  # the builds whose final trials the sweep reports
            run, reused = int(tuning["trials_run"]), int(tuning.get("trials_from_records") or 0)
            self._finished_counted += run + reused
            self._finished_run += run
            self.counts["trials_reused"] += reused
        self.progress("built", dict(self.counts))

    def on_job_ended(self, job_key: str, status: str, error: str | None) -> None:
        self._count(status)

    def on_run_done(self, run: Run, *, final: bool, equivalent: bool) -> None:
        if equivalent:
            self.outcome.equivalent += 1
        else:
            self.outcome.measured += 1
        self._count(run.status)

    def on_retry(self, run: Run) -> None:
        self.progress("retry", dict(self.counts))

    def on_tuning(self, done: int, budget: int) -> None:
        # ``done`` sums the builds in flight (trials measured: workers/tuning/progress.py) and the finished
        # ones as their provenance says, records included: those are taken out again, their run part kept.
        self.counts["trials_done"] = self._finished_run + max(0, done - self._finished_counted)
        self.counts["trials_budget"] = budget
        self.progress("tuning", dict(self.counts))

    def on_cancel(self, pending: int) -> None:
        for _ in range(pending):
            self._count("cancelled")
        self.progress("cancelled", dict(self.counts))


class Listeners(Listener):
    """Several listeners as one, called in the order given."""

    def __init__(self, *listeners: Listener) -> None:
        self.listeners = listeners

    def on_start(self, cached: int, to_build: int, jobs: int) -> None:
        for listener in self.listeners:
            listener.on_start(cached, to_build, jobs)

    def on_build_done(self, job: Job, build: Build) -> None:
        for listener in self.listeners:
            listener.on_build_done(job, build)

    def on_job_ended(self, job_key: str, status: str, error: str | None) -> None:
        for listener in self.listeners:
            listener.on_job_ended(job_key, status, error)

    def on_run_done(self, run: Run, *, final: bool, equivalent: bool) -> None:
        for listener in self.listeners:
            listener.on_run_done(run, final=final, equivalent=equivalent)

    def on_retry(self, run: Run) -> None:
        for listener in self.listeners:
            listener.on_retry(run)

    def on_tuning(self, done: int, budget: int) -> None:
        for listener in self.listeners:
            listener.on_tuning(done, budget)

    def on_cancel(self, pending: int) -> None:
        for listener in self.listeners:
            listener.on_cancel(pending)
