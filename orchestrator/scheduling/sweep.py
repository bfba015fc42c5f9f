"""The event loop of one sweep run: start what may start, wait for the next task done, store what it says.

Each pass starts measurements first (a fenced board waits until the builds on this machine drain),
then builds, then waits a bounded time (so that a cancel request is seen while a long measurement
runs) and handles every task done, storing its outcomes in one commit. Cheap work is batched: once
every build (or measurement) by a Builder (Runner) took under CHEAP_S, up to BATCH_MAX of them share a task.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.exc import OperationalError

from db.store import ResultStore
from orchestrator import toolchains
from orchestrator.scheduling.baselines import BaselineWait
from orchestrator.scheduling.builds import BuildQueue
from orchestrator.scheduling.events import Listener
from orchestrator.scheduling.goldens import GoldenKey, Goldens
from orchestrator.scheduling.jobs import Equivalence, JobState
from orchestrator.scheduling.measurements import Boards, MeasureQueue, Quarantine
from orchestrator.scheduling.pool import TaskLost, TaskPool
from orchestrator.scheduling.references import References
from orchestrator.scheduling.tasks import BuildItem, BuildResult, MeasureItem, MeasureResult
from orchestrator.scheduling.tuning_progress import TuningProgress
from orchestrator.scheduling.tuning_turns import TuningTurns
from orchestrator.spec import SweepSpec
from tvmbench.core.errors import one_line
from tvmbench.core.liveness import HEARTBEAT_S
from tvmbench.core.records import PENDING_STATUSES, Build, Job, Run
from workers.artifacts import ArtifactCache
from workers.executors.base import Executor
from workers.executors.requests import MeasureRequest
from workers.toolchains.toolchain import Toolchain

CANCEL_POLL_S = 0.5  # how often a running sweep looks at its cancel flag
CHEAP_S = 0.05  # a build or measurement this quick (on average) costs less than the task that carries it
BATCH_MAX = 32


@dataclass(frozen=True)
class BuildTask:
    build_keys: tuple[str, ...]


@dataclass(frozen=True)
class GoldenTask:
    key: GoldenKey
    golden: Job


@dataclass(frozen=True)
class MeasureTask:
    board_key: str
    items: tuple[tuple[JobState, int], ...]  # (job, attempt)


class Cheapness:
    """The mean seconds of the items seen per Builder or Runner: cheap ones share tasks (BATCH_MAX at most)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[int, float]] = {}  # id(worker) -> (items, seconds)

    def note(self, worker: object, seconds: float) -> None:
        count, total = self._seen.get(id(worker), (0, 0.0))
        self._seen[id(worker)] = (count + 1, total + seconds)

    def cheap(self, worker: object) -> bool:
        """Whether ``worker``'s items took under CHEAP_S on average (unknown until one was seen)."""
        count, total = self._seen.get(id(worker), (0, 0.0))
        return count > 0 and total / count < CHEAP_S


class SweepRun:
    """One run of a sweep in the driver; ``run`` is the event loop. ``cancelled`` once a cancel ended it."""

    def __init__(
        self,
        spec: SweepSpec,
        store: ResultStore,
        tracker: str,
        cache: ArtifactCache,
        pool: TaskPool,
        listener: Listener,
        boards: Boards,
        executors: Mapping[str, Executor],
        tvm_version: str,
        health_checks: bool = True,
        toolchains: Mapping[str, Toolchain] | None = None,
        *,
        model_data: dict[str, bytes],
    ) -> None:
        self.spec, self.store, self.tracker, self.cache = spec, store, tracker, cache
        self.pool, self.listener, self.executors, self.tvm_version = pool, listener, executors, tvm_version
        # The tvm axis: each job's toolchain text -> its toolchain (orchestrator/toolchains.ensure).
        self.toolchains: Mapping[str, Toolchain] = toolchains or {}
        self.sweep_id = spec.sweep_id
        self.model_data = model_data  # sha256 -> bytes, as SweepSpec.read_models checked them
        self.model_refs: dict[str, Any] = {}
        self.references = References(self.model_data, dict(spec.input_files))
        self.goldens = Goldens(health_checks, cache, tvm_version, self._native)
        self.quarantine = Quarantine(store)
        self.measures = MeasureQueue(boards, spec.targets, self.quarantine)
        self.equivalence = Equivalence()
        self.build_speed, self.measure_speed = Cheapness(), Cheapness()
        self.in_flight: dict[Any, BuildTask | GoldenTask | MeasureTask] = {}
        self.builds_in_flight = 0  # build and golden tasks
        self.cancelled = False
        self._cancel_polled = 0.0
        self._beat_at = time.monotonic()  # begin_sweep wrote the first heartbeat
        self.tuning_progress = TuningProgress(listener)
        self._lowerings: dict[str, str | None] = {}  # build key -> Executor.shared_lowering of its job

    def run(self, jobs: list[Job]) -> None:
        by_build: dict[str, list[JobState]] = defaultdict(list)
        attempts = self.store.last_attempts(self.sweep_id)  # job key -> highest attempt stored
        for job in self._referenced(jobs):
            # A job of the tvm axis is built by its release: its build key carries that version, not ours.
            key = job.build_key(toolchains.version_of(job, self.toolchains, self.tvm_version))
            route = toolchains.board_key(job, self.toolchains)
            state = JobState(job, key, attempt=attempts.get(job.key, 0))
            state.route = route if route != job.target.board_key else None
            by_build[key].append(state)
        self.by_build = by_build
        self.queue = BuildQueue(by_build, self.store, self.cache, self.pool.put)
        self.baselines = BaselineWait(by_build)  # auto builds tuning until the baseline start after it
        self.turns = TuningTurns(by_build)  # tuned builds of the same workloads one after another
        self.queue.to_build = deque(self.turns.order(self.baselines.hold(self.queue.to_build)))
        self.listener.on_start(len(self.queue.cached), len(self.queue.to_build), len(jobs))
        if self.queue.to_build:  # identical programs skip codegen: builds claim each program in the index
            self.pool.start_index(self.queue.known)
        for build_key in self.queue.cached:
            self._enqueue(build_key)
        while self.queue.to_build or self.baselines.parked or self.measures or self.in_flight:
            self._start_measurements()
            self._start_builds()
            self._heartbeat()
            if self._cancel_requested():
                self._cancel()
                return
            if not self.in_flight:
                continue
            done = self.pool.wait(list(self.in_flight), CANCEL_POLL_S)
            if not done:
                self.tuning_progress.poll(self.pool)
                continue
            with self.store.batch():  # one commit for everything this pass stores
                for handle in done:
                    self._finished(self.in_flight.pop(handle), handle)
        self.pool.close()

    # --- starting work ----------------------------------------------------------------------------

    def _start_measurements(self) -> None:
        for key in self.measures.in_turn():
            queue = self.measures.waiting[key]
            while queue and self.measures.free_slots(key) > 0:
                state, _ = queue[0]
                golden = self.goldens.needs_build(state.job)
                if golden is not None:  # its boards' golden model: a build like any (the fence applies)
                    # Submitted even while a fenced measurement waits for builds to drain: that
                    # measurement may be the one needing it.
                    if not self.measures.fenced_measuring():
                        self._start_golden(*golden)
                    break
                if not self.goldens.ready(state.job):
                    break
                if key in self.measures.fenced and self.builds_in_flight > 0:
                    break
                # Cheap runs share a task, spread over the key's free slots; a batch would health-check a
                # board twice, so only runs without a golden model share one.
                size = min(BATCH_MAX, math.ceil(len(queue) / self.measures.free_slots(key)))
                batch = [queue.popleft()]
                while (
                    queue
                    and len(batch) < size
                    and self._measures_cheaply(state)
                    and self._measures_cheaply(queue[0][0])
                ):
                    batch.append(queue.popleft())
                handle = self.pool.submit_measures([self._measure_item(s, a) for s, a in batch])
                self.in_flight[handle] = MeasureTask(key, tuple(batch))
                self.measures.started(key)

    def _start_golden(self, key: GoldenKey, golden: Job) -> None:
        item = BuildItem(self._entry(golden).builder, golden, self.goldens.model_ref(self.pool.put), False)
        self.in_flight[self.pool.submit_builds([item])] = GoldenTask(key, golden)
        self.goldens.building.add(key)
        self.builds_in_flight += 1

    def _start_builds(self) -> None:
        queue, measures = self.queue, self.measures
        queue.to_build.extend(self.baselines.released(idle=not (queue.to_build or measures or self.in_flight)))
        while (
            queue.to_build
            and self.builds_in_flight < self.pool.cpus()
            and not measures.fenced_measuring()
            and not measures.fence_waiting()
        ):
            first = self.turns.first_free(queue.to_build)
            if first is None:  # every queued build waits for its group's tuned build to finish
                break
            # Cheap builds share a task, as many as keep every free CPU busy.
            size = min(BATCH_MAX, math.ceil(len(queue.to_build) / (self.pool.cpus() - self.builds_in_flight)))
            keys = [queue.to_build[first]]
            del queue.to_build[first]
            # Builds of one configuration by executors that lower alike run its pipeline once, in one task,
            # unless a CPU would idle for want of other builds.
            if len(queue.to_build) >= self.pool.cpus() - self.builds_in_flight:
                keys += queue.take_sharing(keys[0], self._shared_lowering, BATCH_MAX - 1)
            while queue.to_build and len(keys) < size and self._builds_cheaply(keys[0], queue.to_build[0]):
                keys.append(queue.to_build.popleft())
            handle = self.pool.submit_builds([self._build_item(k) for k in keys])
            self.in_flight[handle] = BuildTask(tuple(keys))
            self.builds_in_flight += 1
            for key in keys:
                self.turns.started(key)

    def _shared_lowering(self, build_key: str) -> str | None:
        if build_key not in self._lowerings:
            job = self.by_build[build_key][0].job
            # Another release builds in a child process per job: nothing to share.
            foreign = toolchains.foreign(job, self.toolchains) is not None
            self._lowerings[build_key] = None if foreign else self._entry(job).shared_lowering(job)
        return self._lowerings[build_key]

    def _builds_cheaply(self, *build_keys: str) -> bool:
        jobs = [self.by_build[k][0].job for k in build_keys]
        return all(not job.tuning and self.build_speed.cheap(self._entry(job).builder) for job in jobs)

    def _measures_cheaply(self, state: JobState) -> bool:
        return self.goldens.model(state.job) is None and self.measure_speed.cheap(self._entry(state.job).runner)

    def _build_item(self, build_key: str) -> BuildItem:
        job = self.by_build[build_key][0].job
        sha = job.model.sha256
        if sha not in self.model_refs:
            self.model_refs[sha] = self.pool.put(self.model_data[sha])
        return BuildItem(
            self._entry(job).builder,
            job,
            self.model_refs[sha],
            reuse=build_key not in self.queue.no_reuse,
            fence_host=self.pool.fence_host,
            tuning_env=self._tuning_env(job, build_key),
            toolchain=toolchains.foreign(job, self.toolchains),
        )

    def _measure_item(self, state: JobState, attempt: int) -> MeasureItem:
        job = state.job
        inputs, reference = self.references.refs(job, self.pool.put)
        request = MeasureRequest(
            # A job of another release asks for boards of its release: the session is requested for the
            # request's target's board key, so the request carries that key (the Run is the job's again
            # in _runs_done).
            job if state.route is None else replace(job, target=replace(job.target, board_key=state.route)),
            self.queue.builds[state.build_key],
            self.queue.artifacts[state.build_key],
            inputs,
            reference,
            self.tracker,
            attempt,
            self.builds_in_flight,
            avoid=self.quarantine.boards(),
            prefer_not=frozenset(state.failed_on),
            # A key already found with no board does not make every later job wait for one.
            registration_wait_s=0.0 if state.board_key in self.measures.unregistered_keys else None,
            golden=self.goldens.model(job),
            checked_boards=frozenset(self.measures.checked_boards),
        )
        return MeasureItem(self._entry(job).runner, request)

    # --- finished work ----------------------------------------------------------------------------

    def _finished(self, task: BuildTask | GoldenTask | MeasureTask, handle: Any) -> None:
        """Store what the finished task produced and queue what follows from it."""
        try:
            results: list[Any] | BaseException = self.pool.result(handle)
        except Exception as exc:  # the task itself died (a worker crash after Ray's retries)
            results = exc
        if isinstance(task, GoldenTask):
            self.builds_in_flight -= 1
            self.goldens.finished(task.key, task.golden, None if isinstance(results, BaseException) else results[0])
        elif isinstance(task, BuildTask):
            self.builds_in_flight -= 1
            self._builds_done(task, results)
        else:
            self.measures.measuring[task.board_key] -= 1
            self._runs_done(task, results)

    def _builds_done(self, task: BuildTask, results: list[BuildResult] | BaseException) -> None:
        if isinstance(results, TaskLost):
            self._builds_lost(task, results)
            return
        done: list[tuple[str, Build]] = []
        for i, build_key in enumerate(task.build_keys):
            self.turns.finished(build_key)
            if isinstance(results, BaseException):
                build, data = Build(build_key, status="build", error=f"build task failed: {one_line(results)}"), None
            else:
                build, data = results[i].build, results[i].data
                self.build_speed.note(self._entry(self.by_build[build_key][0].job).builder, results[i].seconds)
            done += self.queue.finished(build_key, build, data)
        for build_key, build in done:
            self.listener.on_build_done(self.by_build[build_key][0].job, build)
            self.tuning_progress.finished(build_key, build, self.by_build[build_key][0].job.tuning)
            self.turns.tuned(build_key, build)
        for build_key, _ in done:
            self._enqueue(build_key)

    def _builds_lost(self, task: BuildTask, lost: TaskLost) -> None:
        """A build task whose worker died: no Build is stored and its jobs stay pending with the reason, so
        that this run finishes the rest and a resume builds them again (the compiler did not fail them)."""
        error = (
            f"its build lost its Ray worker ({lost}): nothing of it was stored; "
            f"`tvmbench sweep resume {self.sweep_id}` builds it again"
        )
        for build_key in task.build_keys:
            self.turns.finished(build_key)
            self.queue.lose(build_key)
            for state in self.by_build[build_key]:
                state.status = "lost"  # has an outcome for this run (a baseline wait goes on), stored as pending
                self.listener.on_job_ended(state.key, "pending", error)

    def _enqueue(self, build_key: str) -> None:
        """The jobs of a done build: ended (the build failed), queued to measure, or their leader's copy."""
        build = self.queue.builds[build_key]
        for state in self.by_build[build_key]:
            if not build.ok:
                state.status = build.status
                self.listener.on_job_ended(state.key, build.status, build.error)
                continue
            leader = self.equivalence.leader_of(state, build)
            if leader is None:
                self.measures.add(state, state.next_attempt())
            elif leader.run is not None:
                self._equivalent(leader, leader.run, state)

    def _runs_done(self, task: MeasureTask, results: list[MeasureResult] | BaseException) -> None:
        items = task.items
        if not isinstance(results, BaseException):  # a batch that stopped early: the rest go back to the front
            self.measures.put_back(task.board_key, items[len(results) :])
            items = items[: len(results)]
        for i, (state, attempt) in enumerate(items):
            if isinstance(results, BaseException):
                error = f"measurement task failed: {one_line(results)}"
                run = Run(job_key=state.key, attempt=attempt, status="infra", error=error)
            else:
                run = self._routed_back(state, results[i].run)
                self.measure_speed.note(self._entry(state.job).runner, results[i].seconds)
            self.measures.note(state, run)
            if self.measures.retries(run, attempt):
                self.listener.on_retry(run)
                self.measures.add(state, state.next_attempt())
                continue
            state.run, state.status = run, run.status
            self.listener.on_run_done(run, final=run.status not in PENDING_STATUSES, equivalent=False)
            for follower in state.followers:
                self._equivalent(state, run, follower)
            state.followers.clear()

    def _routed_back(self, state: JobState, run: Run) -> Run:
        """The Run of a job measured on boards of its release: its own job key, and a pending-device line
        that names the release whose boards are missing."""
        if state.route is None:
            return run
        error = run.error
        if run.status == "pending-device":
            # Said anew: the board session's advice (`farm add --key ...`) would start a board of the
            # installed release under this key, which could not load the artifact.
            release = self.toolchains[state.job.toolchain or ""].tvm_version
            error = (
                f"no board running TVM {release} is registered under key {state.route!r} with tracker "
                f"{self.tracker} (the artifact loads only in TVM {release}); the build is kept: connect one "
                f"(`tvmbench farm add --key {state.job.target.board_key} --tvm {release}` on a `farm up` farm) "
                "and run `tvmbench sweep resume`"
            )
        return replace(run, job_key=state.key, error=error)

    def _native(self, job: Job) -> bool:
        """Whether the job's boards run this interpreter's TVM (the golden model is built by it)."""
        return toolchains.board_key(job, self.toolchains) == job.target.board_key

    def _equivalent(self, leader: JobState, run: Run, state: JobState) -> None:
        """Give ``state`` the outcome of ``leader``, which ran the identical program."""
        copy = replace(run, job_key=state.key, attempt=state.next_attempt(), equivalent_to=leader.key)
        state.run, state.status = copy, copy.status
        self.listener.on_run_done(copy, final=run.status not in PENDING_STATUSES, equivalent=True)

    def _entry(self, job: Job) -> Executor:
        return self.executors[job.executor]

    # --- before the loop --------------------------------------------------------------------------

    def _referenced(self, jobs: list[Job]) -> list[Job]:
        """The jobs whose reference ONNX Runtime computes; the others end now as one `model` row each."""
        ok = []
        for job in jobs:
            self._heartbeat()  # references of big models take a while before the loop starts
            problem = self.references.problem(job)
            if problem is None:
                ok.append(job)
            else:
                self.listener.on_job_ended(job.key, "model", problem)
        return ok

    def _tuning_env(self, job: Job, build_key: str) -> Any:
        """What a tuned build needs from the driver (None for an untuned one)."""
        if not job.tuning:
            return None
        from orchestrator.tuning import auto_baseline, records_database, untuned_profile
        from workers.tracker_client import key_boards, tracker_summary
        from workers.tuning.stage import TuningEnv

        # The boards that time its candidates: those of its release (the candidates are its artifacts).
        key = toolchains.board_key(job, self.toolchains)
        try:
            boards = len(key_boards(tracker_summary(self.tracker), key))
        except OSError:
            boards = 1
        return TuningEnv(
            tracker=self.tracker,
            database=records_database(self.store, self.cache.root.parent, job, self.tvm_version),
            fence_host=self.pool.fence_host if key in self.measures.fenced else None,
            machine_fence=self.pool.fence_host,
            avoid=self.quarantine.boards(),
            boards=max(1, boards),
            profile=untuned_profile(self.store, job),
            progress=self.pool.tuning_progress_name,
            board_key=key,
            baseline=auto_baseline(self.store, job, self.sweep_id, self.baselines.baseline(job)),
            tuned_by=self.turns.tuned_by(build_key),
        )

    # --- the driver's pulse -----------------------------------------------------------------------

    def _heartbeat(self) -> None:
        """Tell readers this driver is alive (core/liveness.py), at most every HEARTBEAT_S: one UPDATE."""
        now = time.monotonic()
        if now - self._beat_at < HEARTBEAT_S:
            return
        self._beat_at = now
        with contextlib.suppress(OperationalError):  # a missed beat is harmless; the next one is 5 s away
            self.store.heartbeat(self.sweep_id)

    def _cancel_requested(self) -> bool:
        """Poll the sweep's cancel flag (set by `tvmbench sweep cancel`), at most every CANCEL_POLL_S."""
        now = time.monotonic()
        if now - self._cancel_polled < CANCEL_POLL_S:
            return False
        self._cancel_polled = now
        # "cancelled" too: `sweep cancel` marks the jobs itself when the driver does not answer within its
        # wait (stopped by SIGSTOP, Ctrl-Z or a debugger, not gone); a driver woken later must stop as well,
        # not measure jobs already cancelled and then call the sweep complete.
        return self.store.sweep_status(self.sweep_id) in ("cancelling", "cancelled")

    def _cancel(self) -> None:
        """Stop everything in flight and mark what has no final row ``cancelled``."""
        self.pool.cancel(list(self.in_flight))
        self.in_flight.clear()
        before = self.store.job_statuses(self.sweep_id)
        # Jobs of this run without an outcome here, which the cancel command may have marked already.
        open_here = {s.key for states in self.by_build.values() for s in states if s.status == "pending"}
        pending = sum(
            status in PENDING_STATUSES or (status == "cancelled" and key in open_here) for key, status in before.items()
        )
        self.listener.on_cancel(pending)
        self.cancelled = True
