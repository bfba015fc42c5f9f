"""Run a sweep: builds as Ray tasks, measurements as builds finish, every outcome stored as it arrives.

The loop keeps two kinds of Ray tasks in flight: builds (one CPU each) and measurements (no CPU: the
board does the work). Timing is only as good as the quiet around it, so a board that shares this
machine's cores is fenced: it is timed only while no build runs here, and no build starts while it is
being timed. Each run records the load it ran under.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.exc import OperationalError

from db.store import ResultStore
from orchestrator import farm, health
from orchestrator.interrupts import keep_handlers
from orchestrator.plan import plan_jobs
from orchestrator.spec import SweepSpec
from tvmbench.core.errors import one_line
from tvmbench.core.health import GoldenModel
from tvmbench.core.liveness import HEARTBEAT_S
from tvmbench.core.records import PENDING_STATUSES, Build, Job, Run, canonical_hash
from workers.aot.boards import is_mcu_target
from workers.artifacts import ArtifactCache
from workers.build_common import tvm_versions
from workers.executors import registry
from workers.executors.base import Builder, Executor, Runner
from workers.executors.requests import BuildRequest, MeasureRequest
from workers.onnx_model import load_inputs_file, seeded_inputs
from workers.program_index import remote_claim, reuse_key, start_index
from workers.reference import reference_outputs, reference_problem
from workers.tracker_client import registered_keys, tracker_summary

CANCEL_POLL_S = 0.5  # how often a running sweep looks at its cancel flag
BOARD_RECOUNT_S = 10.0  # how often the boards per key are counted again (measurements in flight per key)
MAX_ATTEMPTS = 2  # an `infra` failure (board died) is retried once, on another board if the key has one
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to a Ray cluster, or start tvmbench's local instance (orchestrator/local_ray.py)."""
    if address is None:
        from orchestrator.local_ray import hold_ray_to_loopback

        hold_ray_to_loopback()  # before `import ray`: Ray reads it then
    import ray

    if ray.is_initialized():
        return
    with keep_handlers():  # ray.init installs SIGTERM handlers that crash-dump or exit 1: keep ours
        if address is None:
            from orchestrator.local_ray import start_local_ray

            start_local_ray(num_cpus)
            return
        ray.init(
            address=address,
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="WARNING",
            configure_logging=True,
        )


def build_on_node(
    builder: Builder,
    job: Job,
    model_data: bytes,
    index: Any = None,
    fence_host: str | None = None,
    tuning_env: Any = None,
) -> tuple[Build, bytes | None]:
    """``builder.build`` in a Ray task; the build's host becomes "hostname/ray-node-id" to show where it ran.

    ``index``: the sweep's program index actor (identical programs skip codegen), or None. On the
    driver's machine the build holds the host fence (workers/fence.py) so that no tuning candidate is
    timed on a host board meanwhile; a tuned job's builder gets the hold (let go of while it tunes) and
    ``tuning_env``, what it needs from the driver.
    """
    import ray

    from workers.fence import local_fence

    claim = remote_claim(index) if index is not None else None
    with local_fence(fence_host).building() as hold:
        # A tuned job tunes inside its build (the plan budgets only executors whose entry tunes the target).
        build, data = builder.build(BuildRequest(job, model_data, claim=claim, hold=hold, tuning_env=tuning_env))
    node = ray.get_runtime_context().get_node_id()
    return replace(build, host=f"{build.host}/{node}"), data


def measure_on_node(runner: Runner, request: MeasureRequest) -> Run:
    """``runner.run`` in a Ray task (no CPU: the board does the work).

    The request's artifact, inputs and reference may be object refs (put once, shared by many requests):
    Ray resolves only a task's top-level arguments, so they are fetched here.
    """
    import ray

    bulky = {f: getattr(request, f) for f in ("artifact", "inputs", "reference")}
    refs = {f: v for f, v in bulky.items() if isinstance(v, ray.ObjectRef)}
    if refs:
        request = replace(request, **dict(zip(refs, ray.get(list(refs.values())), strict=True)))
    return runner.run(request)


def check_farm_resource(name: str) -> None:
    """Raise ValueError unless some node of the Ray cluster offers the custom resource ``name``."""
    import ray

    if name not in ray.cluster_resources():
        raise ValueError(
            f"no Ray node offers the resource {name!r}: start the node that reaches the farm with "
            f"ray start ... --resources '{{\"{name}\": 1}}'"
        )


def _remote_functions(farm_resource: str | None = None) -> tuple[Any, Any]:
    import ray

    # A worker that dies mid-build is re-run by Ray (the build is a pure function of its inputs).
    # Builds take one CPU each, so Ray spreads them over every node of a cluster.
    build = ray.remote(num_cpus=1, max_retries=2)(build_on_node)
    measure = ray.remote(num_cpus=0, max_retries=0)(measure_on_node)
    if farm_resource:
        # A sliver of a custom resource pins measurements to the node(s) that can reach the farm
        # (e.g. the one on the lab network) without limiting how many run there at once.
        measure = measure.options(resources={farm_resource: 0.001})
    return build, measure


def _counts_instructions(target: Any) -> bool:
    """Targets measured in emulated instructions (aot-c on an emulated microcontroller), not in time."""
    return bool(target.emulated) and is_mcu_target(target.tvm_target)


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


ProgressFn = Callable[[str, dict[str, int]], None]


def host_sharing_keys(tracker: str) -> set[str]:
    """Board keys with a board on this machine (timing them needs the build fence)."""
    own = LOCAL_HOSTS | {socket.gethostname()}
    with contextlib.suppress(OSError):
        own |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    keys = set()
    for server in tracker_summary(tracker).get("server_info", []):
        host = (server.get("addr") or [""])[0]
        if host in own:
            keys.add(str(server.get("key", "")).removeprefix("server:"))
    return keys


class _Sweep:
    """State of one sweep run in the driver; ``run`` is the event loop."""

    def __init__(
        self,
        spec: SweepSpec,
        store: ResultStore,
        tracker: str,
        cache: ArtifactCache,
        progress: ProgressFn | None,
        max_builds: int | None,
        farm_resource: str | None = None,
        health_checks: bool = True,
        executors: Mapping[str, Executor] | None = None,
    ) -> None:
        import ray

        self.ray = ray
        self.spec, self.store, self.tracker, self.cache = spec, store, tracker, cache
        self.progress = progress or (lambda _event, _counts: None)
        self.tvm_version = tvm_versions()[0]
        self.sweep_id = spec.sweep_id
        self.build_fn, self.measure_fn = _remote_functions(farm_resource)
        self.max_builds = max_builds or max(1, int(ray.available_resources().get("CPU", 1)))
        # Instruction counts under qemu -icount do not depend on the load: MCU boards need no fence.
        self.fenced = host_sharing_keys(tracker) - {t.board_key for t in spec.targets if _counts_instructions(t)}
        self._boards_per_key: dict[str, int] = {}
        self._boards_counted = -BOARD_RECOUNT_S
        self.model_data = {sha: path.read_bytes() for sha, path in spec.model_paths.items()}
        self.model_refs = {sha: ray.put(data) for sha, data in self.model_data.items()}
        self.references: dict[tuple[str, int], tuple[dict[str, np.ndarray], list[np.ndarray]]] = {}
        self.counts: Counter = Counter()
        # Board health (orchestrator/health.py): boards that ran the golden model (or a job) correctly in
        # this sweep, boards each job failed on (its retry prefers another), keys found with no board.
        self.checked_boards: set[str] = set()
        self.failed_on: dict[str, set[str]] = defaultdict(set)
        self.unregistered_keys: set[str] = set()
        # Golden model per (target name, executor): the model, None (no health check possible), or absent
        # while its build task runs (a measurement that needs it waits).
        self.goldens: dict[tuple[str, str], GoldenModel | None] = {}
        self.golden_model_ref: Any = None
        self.golden_jobs: dict[tuple[str, str], tuple[tuple[str, str], Job] | None] = {}
        self.goldens_building: set[tuple[str, str]] = set()
        self.health_checks = health_checks
        self.cancelled = False
        self._cancel_polled = 0.0
        self._beat_at = time.monotonic()  # begin_sweep wrote the first heartbeat
        # Tuned builds time candidates from inside their build task: the fence they and every other build
        # share is an actor (workers/fence.py); their trials reach the progress bar through another.
        from workers.fence import create_fence
        from workers.tuning.progress import create_progress, progress_name

        self.fence_host = create_fence()
        self.progress_actor = create_progress(self.sweep_id)
        self.progress_name = progress_name(self.sweep_id)
        self._tuning_seen: dict[str, tuple[int, int]] = {}
        self._tuning_polled = 0.0
        # The Builder and Runner of each executor (the registry's unless a test or benchmark injects its own).
        self.executors: Mapping[str, Executor] = executors or registry.REGISTRY
        self.reference_refs: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._quarantined: frozenset[str] | None = None  # board states, read again after a board fault

    # --- queues -------------------------------------------------------------------------------

    def run(self, jobs: list[Job], outcome: SweepOutcome) -> None:
        ray = self.ray
        by_build: dict[str, list[Job]] = defaultdict(list)
        for job in self._with_reference(jobs, outcome):
            by_build[job.build_key(self.tvm_version)].append(job)
        self.by_build = by_build
        self.attempts = self.store.last_attempts(self.sweep_id)  # job key -> highest attempt stored
        to_build: deque[str] = deque()
        self.builds: dict[str, Build] = {}
        self.artifacts: dict[str, Any] = {}  # build key -> object ref of the artifact bytes
        ready: list[str] = []
        known: dict[str, str] = {}  # reuse key -> build key, for the program index
        for build_key in by_build:
            cached = self.store.get_build(build_key)
            data = self.cache.get(cached.artifact_sha256) if cached and cached.ok and cached.artifact_sha256 else None
            if data is not None:
                self.builds[build_key] = cached
                self.artifacts[build_key] = ray.put(data)
                ready.append(build_key)
                outcome.cached += 1
                if cached.fingerprint:
                    known.setdefault(reuse_key(cached.fingerprint, by_build[build_key][0]), build_key)
            else:
                to_build.append(build_key)
        self.counts.update(cached=outcome.cached, to_build=len(to_build), jobs=len(jobs))
        self.progress("start", dict(self.counts))
        # Identical programs skip codegen: the build tasks claim each program in one small actor.
        self.index = start_index(known) if to_build else None
        self.parked: dict[str, list[tuple[str, Build]]] = defaultdict(list)  # leader build key -> waiting builds
        self.no_reuse: set[str] = set()  # builds to compile themselves (the build they reused failed)

        # Measurements wait per board key (as many in flight as the key has boards; one on this machine's
        # cores); counters instead of scans of in_flight.
        waiting: dict[str, deque[tuple[Job, int]]] = defaultdict(deque)  # board key -> (leader job, attempt)
        measuring: Counter = Counter()  # board key -> measurements in flight
        self.builds_in_flight = 0  # build and golden tasks
        leaders: dict[str, Job] = {}  # equivalence key -> leader job
        followers: dict[str, list[Job]] = defaultdict(list)  # leader job key -> jobs with the same program
        leader_runs: dict[str, Run] = {}  # leader job key -> its final run, for followers built later
        # object ref -> ("build", build_key) | ("golden", (golden key, golden job)) | ("measure", (job, n))
        in_flight: dict[Any, tuple[str, Any]] = {}

        def enqueue(build_key: str) -> None:
            build = self.builds[build_key]
            for job in by_build[build_key]:
                if not build.ok:
                    self.store.finish_job(self.sweep_id, job.key, build.status, build.error)
                    self._count(outcome, build.status)
                    continue
                same = canonical_hash([build.fingerprint, job.target.board_key, asdict(job.measure)])
                if same in leaders:
                    leader = leaders[same]
                    if leader.key in leader_runs:
                        self._store_equivalent(leader, leader_runs[leader.key], job, outcome)
                    else:
                        followers[leader.key].append(job)
                else:
                    leaders[same] = job
                    waiting[job.target.board_key].append((job, self._next_attempt(job.key)))

        for build_key in ready:
            enqueue(build_key)

        def fenced_measuring() -> bool:
            return any(measuring[k] for k in self.fenced)

        while to_build or any(waiting.values()) or in_flight:
            # Measurements first: a fenced board waits until the builds on this machine drain.
            for key, queue in waiting.items():
                while queue and measuring[key] < self._measure_slots(key):
                    job, attempt = queue[0]
                    if not self._golden_ready(job, in_flight, fenced_measuring()):
                        break  # its boards' golden model is being built (a Ray task like any build)
                    if key in self.fenced and self.builds_in_flight > 0:
                        break
                    queue.popleft()
                    ref = self._submit_measure(job, attempt, self.builds_in_flight)
                    in_flight[ref] = ("measure", (job, attempt))
                    measuring[key] += 1
            fence_waiting = any(waiting[k] for k in self.fenced if k in waiting)
            while to_build and self.builds_in_flight < self.max_builds and not fenced_measuring() and not fence_waiting:
                build_key = to_build.popleft()
                job = by_build[build_key][0]
                index = None if build_key in self.no_reuse else self.index
                ref = self.build_fn.remote(
                    self._entry(job).builder,
                    job,
                    self.model_refs[job.model.sha256],
                    index,
                    self.fence_host,
                    self._tuning_env(job),
                )
                in_flight[ref] = ("build", build_key)
                self.builds_in_flight += 1
            self._heartbeat()
            if self._cancel_requested():
                self._cancel(in_flight, outcome)
                return
            if not in_flight:
                continue
            # A bounded wait, so that a cancel request is seen while a long measurement runs; then every
            # other result that is ready too, handled in the same pass.
            refs = list(in_flight)
            done, rest = ray.wait(refs, num_returns=1, timeout=CANCEL_POLL_S)
            if not done:
                self._poll_tuning()
                continue
            if rest:
                done += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            with self.store.batch():  # one commit for everything this pass stores
                self._handle(done, in_flight, waiting, measuring, to_build, enqueue, followers, leader_runs, outcome)
        if self.index is not None:
            ray.kill(self.index)

    def _handle(
        self,
        done: list[Any],
        in_flight: dict[Any, tuple[str, Any]],
        waiting: dict[str, deque[tuple[Job, int]]],
        measuring: Counter,
        to_build: deque[str],
        enqueue: Callable[[str], None],
        followers: dict[str, list[Job]],
        leader_runs: dict[str, Run],
        outcome: SweepOutcome,
    ) -> None:
        """Store what the finished tasks ``done`` produced and queue what follows from it."""
        by_build = self.by_build
        for ref in done:
            kind, item = in_flight.pop(ref)
            if kind == "golden":
                self.builds_in_flight -= 1
                self._finish_golden(*item, ref)
            elif kind == "build":
                self.builds_in_flight -= 1
                for finished in self._finish_build(item, by_build[item][0], ref, outcome, to_build):
                    enqueue(finished)
            else:
                job, attempt = item
                measuring[job.target.board_key] -= 1
                run = self._finish_measure(job, attempt, ref)
                self._note_board(job, run)
                if run.status == "infra" and attempt < MAX_ATTEMPTS:
                    self.store.record_run(self.sweep_id, run, final=False)
                    waiting[job.target.board_key].append((job, self._next_attempt(job.key)))
                    self.progress("retry", dict(self.counts))
                    continue
                self._store_outcome(job, run, outcome)
                leader_runs[job.key] = run
                for other in followers.pop(job.key, []):
                    self._store_equivalent(job, run, other, outcome)

    # --- tuning -------------------------------------------------------------------------------

    def _tuning_env(self, job: Job) -> Any:
        """What a tuned build needs from the driver (None for an untuned one)."""
        if not job.tuning:
            return None
        from orchestrator.tuning import records_database, untuned_profile
        from workers.tracker_client import key_boards
        from workers.tuning.stage import TuningEnv

        key = job.target.board_key
        try:
            boards = len(key_boards(tracker_summary(self.tracker), key))
        except OSError:
            boards = 1
        home = self.cache.root.parent
        return TuningEnv(
            tracker=self.tracker,
            database=records_database(self.store, home, job, self.tvm_version),
            fence_host=self.fence_host if key in self.fenced else None,
            avoid=frozenset(b for b, state in self.store.board_states().items() if state == "quarantined"),
            boards=max(1, boards),
            profile=untuned_profile(self.store, job),
            progress=self.progress_name,
        )

    def _poll_tuning(self) -> None:
        """Trials done / budget of the tuned builds in flight, to the progress callback (about once a second)."""
        now = time.monotonic()
        if now - self._tuning_polled < 1.0:
            return
        self._tuning_polled = now
        try:
            table = self.ray.get(self.progress_actor.snapshot.remote(), timeout=5)
        except Exception:
            return
        if table == self._tuning_seen:
            return
        self._tuning_seen = table
        self.counts["trials_done"] = sum(d for d, _ in table.values())
        self.counts["trials_budget"] = sum(b for _, b in table.values())
        self.progress("tuning", dict(self.counts))

    def _measure_slots(self, key: str) -> int:
        """How many measurements of board key ``key`` may run at once: one per registered board.

        A key whose boards share this machine's cores (fenced) gets one: two timings on the same cores
        would disturb each other. Board counts are read from the tracker again every BOARD_RECOUNT_S
        (boards join and leave a farm during a long sweep); a key with none still gets one slot, whose
        measurement then reports it (pending-device).
        """
        if key in self.fenced:
            return 1
        now = time.monotonic()
        if now - self._boards_counted >= BOARD_RECOUNT_S:
            self._boards_counted = now
            with contextlib.suppress(OSError):  # the tracker is restarting: keep the last counts
                self._boards_per_key = registered_keys(tracker_summary(self.tracker))
        return max(1, self._boards_per_key.get(key, 1))

    def _next_attempt(self, job_key: str) -> int:
        """The next attempt number of a job (counted here from what the store had when the run began)."""
        self.attempts[job_key] = self.attempts.get(job_key, 0) + 1
        return self.attempts[job_key]

    def _entry(self, job: Job) -> Executor:
        return self.executors[job.executor]

    # --- faults -------------------------------------------------------------------------------

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
        return self.store.sweep_status(self.sweep_id) == "cancelling"

    def _cancel(self, in_flight: dict[Any, tuple[str, Any]], outcome: SweepOutcome) -> None:
        """Stop everything in flight and mark what has no final row ``cancelled``.

        Killing a measurement's Ray worker closes its RPC session, which frees the board.
        """
        for ref in in_flight:
            self.ray.cancel(ref, force=True)
        in_flight.clear()
        from workers.fence import reset_fence

        reset_fence(self.fence_host)  # the killed builds and tunings hold it and will never let go
        if self.index is not None:
            self.ray.kill(self.index)
        before = self.store.job_statuses(self.sweep_id)
        self.store.cancel_pending_jobs(self.sweep_id, "cancelled by `tvmbench sweep cancel`")
        for status in before.values():
            if status in PENDING_STATUSES:
                self._count(outcome, "cancelled")
        self.cancelled = True
        self.progress("cancelled", dict(self.counts))

    def _note_board(self, job: Job, run: Run) -> None:
        """What a finished attempt says about its board and key (see orchestrator/health.py)."""
        if run.status == "pending-device":
            self.unregistered_keys.add(job.target.board_key)
        if not run.board_id:
            return
        if run.status in ("ok", "wrong-result") or (run.health == "ok" and run.status not in ("infra", "timeout")):
            self.checked_boards.add(run.board_id)
        if run.status in ("infra", "timeout"):
            self.checked_boards.discard(run.board_id)
            self.failed_on[job.key].add(run.board_id)
            self._quarantined = None  # the store may quarantine the board when it records this attempt

    def _golden_key(self, job: Job) -> tuple[tuple[str, str], Job] | None:
        """(goldens key, golden job) of the job's boards, or None when they get no health check."""
        if not self.health_checks:
            return None
        key = (job.target.name, job.executor)
        if key not in self.golden_jobs:
            golden = health.golden_job(job)
            self.golden_jobs[key] = None if golden is None else ((job.target.name, golden.executor), golden)
        return self.golden_jobs[key]

    def _golden_ready(self, job: Job, in_flight: dict[Any, tuple[str, Any]], fenced_measuring: bool) -> bool:
        """Whether the job's golden model is known (built, cached, or impossible); else start its build.

        The build is a Ray task counted with the builds (the fence applies), submitted even while a
        fenced measurement waits for builds to drain: that measurement may be the one needing it.
        """
        found = self._golden_key(job)
        if found is None or found[0] in self.goldens:
            return True
        key, golden = found
        if key in self.goldens_building:
            return False
        cached = health.cached_golden(golden, self.cache, self.tvm_version)
        if cached is not None:
            self.goldens[key] = cached
            return True
        if fenced_measuring:
            return False  # no build starts while a board on this machine is timed
        if self.golden_model_ref is None:
            self.golden_model_ref = self.ray.put(health.golden_model_data())
        builder = self._entry(golden).builder
        in_flight[self.build_fn.remote(builder, golden, self.golden_model_ref, None)] = ("golden", (key, golden))
        self.goldens_building.add(key)
        self.builds_in_flight += 1
        return False

    def _finish_golden(self, key: tuple[str, str], golden: Job, ref: Any) -> None:
        """A golden build ended: keep its artifact, or record that the target gets no health checks."""
        self.goldens_building.discard(key)
        try:
            build, data = self.ray.get(ref)
        except Exception:
            build, data = None, None
        if build is None or not build.ok or data is None:
            # A target the golden model cannot be built for gets no health checks rather than no measurements.
            self.goldens[key] = None
            return
        self.goldens[key] = health.remember_golden(golden, self.cache, self.tvm_version, data)

    def _golden(self, job: Job) -> GoldenModel | None:
        found = self._golden_key(job)
        return None if found is None else self.goldens.get(found[0])

    # --- steps --------------------------------------------------------------------------------

    def _finish_build(
        self, build_key: str, job: Job, ref: Any, outcome: SweepOutcome, to_build: deque[str]
    ) -> list[str]:
        """Store a finished build; returns the build keys now ready to measure (it, and builds parked on it).

        A build that skipped codegen (``reused_from``) takes the artifact of the build that compiled its
        program: now if that one is done, when it finishes otherwise. If that one failed, the builds
        parked on it are compiled again by themselves.
        """
        try:
            build, data = self.ray.get(ref)
        except Exception as exc:  # the task itself died (worker crash after retries): a build failure
            build, data = Build(build_key=build_key, status="build", error=f"build task failed: {one_line(exc)}"), None
        if build.ok and build.reused_from:
            leader = self.builds.get(build.reused_from)
            if leader is None:  # still compiling: wait for it
                self.parked[build.reused_from].append((build_key, build))
                return []
            if not leader.ok or build.reused_from not in self.artifacts:
                self._rebuild(build_key, to_build)
                return []
            build = self._adopt(build, leader)
        elif data is not None:
            self.cache.put(data)
            self.artifacts[build_key] = self.ray.put(data)
        self._save_build(build_key, job, build, outcome)
        ready = [build_key]
        for parked_key, parked in self.parked.pop(build_key, []):
            if build.ok and build_key in self.artifacts:
                self._save_build(parked_key, self.by_build[parked_key][0], self._adopt(parked, build), outcome)
                ready.append(parked_key)
            else:
                self._rebuild(parked_key, to_build)
        return ready

    def _adopt(self, build: Build, leader: Build) -> Build:
        """``build`` with the artifact of ``leader`` (the identical program), and the codegen passes that made it."""
        assert build.reused_from is not None
        self.artifacts[build.build_key] = self.artifacts[build.reused_from]
        codegen = leader.pass_trace[leader.pipeline_passes :] if leader.pipeline_passes is not None else ()
        return replace(
            build,
            artifact_sha256=leader.artifact_sha256,
            artifact_size=leader.artifact_size,
            artifact_arch=leader.artifact_arch,
            pass_trace=(*build.pass_trace, *codegen),
        )

    def _rebuild(self, build_key: str, to_build: deque[str]) -> None:
        """Compile ``build_key`` by itself (the build whose artifact it was to share failed)."""
        self.no_reuse.add(build_key)
        to_build.appendleft(build_key)

    def _save_build(self, build_key: str, job: Job, build: Build, outcome: SweepOutcome) -> None:
        self.store.save_build(job, build)
        self.builds[build_key] = build
        outcome.built += 1
        outcome.codegen_skipped += bool(build.reused_from)
        self.counts["built"] += 1
        self.progress("built", dict(self.counts))

    def _inputs(self, job: Job) -> dict[str, np.ndarray]:
        """The job's input arrays: its model's .npz inputs file, or drawn from the seed (and value ranges)."""
        model = job.model
        if model.inputs_file_sha256:
            return load_inputs_file(self.spec.input_files[model.inputs_file_sha256], model.inputs)
        return seeded_inputs(model.inputs, job.measure.seed, {n: (lo, hi) for n, lo, hi in model.value_ranges})

    @staticmethod
    def _reference_key(job: Job) -> tuple[Any, ...]:
        model = job.model
        return (model.sha256, model.value_ranges, model.inputs_file_sha256, job.measure.seed)

    def _reference(self, job: Job) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """The job's inputs and ONNX Runtime's outputs for them (computed once per model, inputs and seed)."""
        key = self._reference_key(job)
        if key not in self.references:
            inputs = self._inputs(job)
            self.references[key] = (inputs, reference_outputs(self.model_data[job.model.sha256], inputs))
        return self.references[key]

    def _reference_refs(self, job: Job) -> tuple[Any, Any]:
        """Object refs of the job's inputs and reference outputs, put once per reference."""
        key = self._reference_key(job)
        if key not in self.reference_refs:
            inputs, reference = self._reference(job)
            self.reference_refs[key] = (self.ray.put(inputs), self.ray.put(reference))
        return self.reference_refs[key]

    def _quarantined_boards(self) -> frozenset[str]:
        """Quarantined board ids, read from the store again only after a board fault was recorded."""
        if self._quarantined is None:
            self._quarantined = frozenset(b for b, state in self.store.board_states().items() if state == "quarantined")
        return self._quarantined

    def _with_reference(self, jobs: list[Job], outcome: SweepOutcome) -> list[Job]:
        """The jobs whose reference outputs ONNX Runtime computes; the others end now as one `model` row.

        A reference that raises (an index out of range, an input ONNX Runtime refuses) is the model's
        or the inputs' fault, not the sweep's: the other models go on, and a resume does not retry it.
        """
        ok, failed = [], {}
        for job in jobs:
            self._heartbeat()  # references of big models take a while before the loop starts
            key = self._reference_key(job)
            if key not in failed:
                try:
                    self._reference(job)
                except Exception as exc:  # ONNX Runtime's errors have no common base class
                    try:
                        inputs = self._inputs(job)
                    except Exception:  # the inputs themselves failed: the message names what it can
                        inputs = {}
                    source = "given" if job.model.inputs_file_sha256 else "seeded"
                    failed[key] = reference_problem(job.model.name, inputs, exc, source)
            if key in failed:
                self.store.finish_job(self.sweep_id, job.key, "model", failed[key])
                self._count(outcome, "model")
            else:
                ok.append(job)
        return ok

    def _submit_measure(self, job: Job, attempt: int, builds_running: int) -> Any:
        inputs, reference = self._reference_refs(job)
        build_key = job.build_key(self.tvm_version)
        request = MeasureRequest(
            job,
            self.builds[build_key],
            self.artifacts[build_key],
            inputs,
            reference,
            self.tracker,
            attempt,
            builds_running,
            avoid=self._quarantined_boards(),
            prefer_not=frozenset(self.failed_on.get(job.key, ())),
            # A key already found with no board does not make every later job wait for one.
            registration_wait_s=0.0 if job.target.board_key in self.unregistered_keys else None,
            golden=self._golden(job),
            checked_boards=frozenset(self.checked_boards),
        )
        return self.measure_fn.remote(self._entry(job).runner, request)

    def _finish_measure(self, job: Job, attempt: int, ref: Any) -> Run:
        try:
            return self.ray.get(ref)
        except Exception as exc:
            return Run(
                job_key=job.key, attempt=attempt, status="infra", error=f"measurement task failed: {one_line(exc)}"
            )

    def _store_outcome(self, job: Job, run: Run, outcome: SweepOutcome) -> None:
        self.store.record_run(self.sweep_id, run, final=run.status not in PENDING_STATUSES)
        outcome.measured += 1
        self._count(outcome, run.status)

    def _store_equivalent(self, leader: Job, run: Run, job: Job, outcome: SweepOutcome) -> None:
        """Give ``job`` the outcome of ``leader``, which ran the identical program."""
        copy = replace(run, job_key=job.key, attempt=self._next_attempt(job.key), equivalent_to=leader.key)
        self.store.record_run(self.sweep_id, copy, final=run.status not in PENDING_STATUSES)
        outcome.equivalent += 1
        self._count(outcome, run.status)

    def _count(self, outcome: SweepOutcome, status: str) -> None:
        outcome.statuses[status] += 1
        self.counts["ok" if status == "ok" else ("waiting" if status in PENDING_STATUSES else "failed")] += 1
        self.progress("measured", dict(self.counts))


def run_sweep(
    spec: SweepSpec,
    store: ResultStore,
    tracker: str,
    cache: ArtifactCache,
    *,
    progress: ProgressFn | None = None,
    max_builds: int | None = None,
    farm_resource: str | None = None,
    health_checks: bool = True,
    reopen_cancelled: bool = False,
    executors: Mapping[str, Executor] | None = None,
) -> SweepOutcome:
    """Run (or resume) a sweep against the farm at ``tracker``; Ray must be initialised.

    Jobs that already have a final row are skipped, so running the same sweep again only finishes what
    is missing. Returns the counts; the results are in ``store``. ``farm_resource`` pins the
    measurement tasks to the Ray node(s) offering that custom resource. With ``health_checks`` each board
    runs the golden model before its first job and after a failure (orchestrator/health.py).
    ``reopen_cancelled`` runs the jobs a `sweep cancel` ended again (tuned builds continue from the
    records their cancelled tuning stored).
    ``executors`` replaces the registry's Builders and Runners by executor name (tests, benchmarks).
    """
    jobs = plan_jobs(spec)
    tvm_version = tvm_versions()[0]
    new = store.begin_sweep(
        spec.sweep_id,
        name=spec.name,
        label=spec.label,
        source=spec.source,
        source_path=spec.source_path,
        jobs=jobs,
        tvm_version=tvm_version,
        model_sizes={sha: p.stat().st_size for sha, p in spec.model_paths.items()},
    )
    if reopen_cancelled:  # `sweep resume` after `sweep cancel`: the cancelled jobs run again
        store.reopen_cancelled(spec.sweep_id)
    statuses = store.job_statuses(spec.sweep_id)
    todo = [j for j in jobs if statuses.get(j.key) in PENDING_STATUSES]
    outcome = SweepOutcome(sweep_id=spec.sweep_id, new=new, jobs=len(jobs), already_final=len(jobs) - len(todo))
    for j in jobs:
        if j not in todo:
            outcome.statuses[statuses[j.key]] += 1
    sweep = _Sweep(spec, store, tracker, cache, progress, max_builds, farm_resource, health_checks, executors)
    try:
        sweep.run(todo, outcome)
    except BaseException:
        store.finish_sweep(spec.sweep_id, "incomplete")
        raise
    if not sweep.cancelled:
        store.finish_sweep(spec.sweep_id, "complete" if outcome.complete else "incomplete")
    return outcome


def execute_sweep(
    spec: SweepSpec,
    store: ResultStore,
    home: Path,
    *,
    tracker: str | None = None,
    ray_address: str | None = None,
    boards: int = 1,
    farm_resource: str | None = None,
    progress: ProgressFn | None = None,
    note: farm.Note = lambda _msg: None,
    reopen_cancelled: bool = False,
) -> SweepOutcome:
    """`sweep run` / `sweep resume`: the farm (given, configured or ephemeral), Ray, then ``run_sweep``.

    FarmError when the farm cannot be started or ``farm_resource`` is offered by no Ray node.
    """
    cache = ArtifactCache(home / "artifacts")
    with farm.farm_for_run(home, tracker, boards, {t.board_key for t in spec.targets}, note) as address:
        ensure_ray(ray_address)
        if farm_resource:
            try:
                check_farm_resource(farm_resource)
            except ValueError as exc:
                raise farm.FarmError(str(exc)) from None
        return run_sweep(
            spec,
            store,
            address,
            cache,
            progress=progress,
            farm_resource=farm_resource,
            reopen_cancelled=reopen_cancelled,
        )
