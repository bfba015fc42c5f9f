"""Running a sweep: begin it in the store, run what is left on a pool, finish it; the farm and Ray around it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from db.store import ResultStore
from orchestrator import farm
from orchestrator import toolchains as toolchain_axis
from orchestrator.interrupts import keep_handlers
from orchestrator.plan import plan_jobs
from orchestrator.scheduling.events import Listener, Listeners, Progress, ProgressFn, StoreWriter, SweepOutcome
from orchestrator.scheduling.measurements import Boards, TrackerBoards
from orchestrator.scheduling.pool import TaskPool
from orchestrator.scheduling.sweep import SweepRun
from orchestrator.spec import SweepSpec
from tvmbench.core.errors import one_line
from tvmbench.core.records import FINAL_STATUSES, PENDING_STATUSES, Job
from workers.artifacts import ArtifactCache
from workers.build_common import tvm_versions
from workers.executors import registry
from workers.executors.base import Executor
from workers.toolchains.toolchain import Toolchain


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to a Ray cluster, or start tvmbench's local instance (orchestrator/local_ray.py)."""
    if address is None:
        from orchestrator.local_ray import hold_ray_to_loopback

        hold_ray_to_loopback()  # before `import ray`: Ray reads it then
    import ray

    if ray.is_initialized():
        return
    try:
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
    except (ConnectionError, RuntimeError, TimeoutError, OSError, ValueError) as exc:
        # Ray says "Timed out waiting for file ...gcs_server_port" (too few open files), "The current node
        # timed out during startup" (too little memory): a traceback that never names the cause.
        raise RayUnavailable(_ray_failure(address, exc)) from None
    except Exception as exc:
        if type(exc) is not Exception:  # Ray raises bare Exception for a node that never came up
            raise
        raise RayUnavailable(_ray_failure(address, exc)) from None


class RayUnavailable(farm.FarmError):
    """Ray could not be started or reached; the message says what to check."""


def _ray_failure(address: str | None, exc: BaseException) -> str:
    if address:
        return f"could not connect to the Ray cluster at {address} ({one_line(exc)}): check the address and its head"
    return (
        f"Ray did not start on this machine ({one_line(exc)}): check free memory and the open-file limit "
        "(`ulimit -n`, at least 1024), and Ray's logs in /tmp/ray/session_latest/logs"
    )


def check_farm_resource(name: str) -> None:
    """Raise ValueError unless some node of the Ray cluster offers the custom resource ``name``."""
    import ray

    if name not in ray.cluster_resources():
        raise ValueError(
            f"no Ray node offers the resource {name!r}: start the node that reaches the farm with "
            f"ray start ... --resources '{{\"{name}\": 1}}'"
        )


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
    pool: TaskPool | None = None,
    boards: Boards | None = None,
    listeners: tuple[Listener, ...] = (),
    toolchains: Mapping[str, Toolchain] | None = None,
) -> SweepOutcome:
    """Run (or resume) a sweep against the farm at ``tracker``; Ray must be initialised unless ``pool`` is given.

    Jobs that already have a final row are skipped, so running the same sweep again only finishes what
    is missing. Returns the counts; the results are in ``store``. ``farm_resource`` pins the
    measurement tasks to the Ray node(s) offering that custom resource. With ``health_checks`` each board
    runs the golden model before its first job and after a failure (orchestrator/health.py).
    ``reopen_cancelled`` runs the jobs a `sweep cancel` ended again (tuned builds continue from the
    records their cancelled tuning stored).
    ``executors`` replaces the registry's Builders and Runners by executor name (tests, benchmarks);
    ``pool`` where tasks run (default: Ray, scheduling/ray_pool.py); ``boards`` what the farm has (default:
    what the tracker lists); ``listeners`` are told every event after the store and the progress counts.
    ``toolchains``: the tvm axis' toolchains (orchestrator/toolchains.ensure); looked up here when not
    given, before anything is recorded (ToolchainError, one line, when one is missing or unknown).
    """
    if spec.toolchains and toolchains is None:
        with toolchain_axis.ensure(spec.toolchains, provision_missing=False) as held:
            return run_sweep(
                spec,
                store,
                tracker,
                cache,
                progress=progress,
                max_builds=max_builds,
                farm_resource=farm_resource,
                health_checks=health_checks,
                reopen_cancelled=reopen_cancelled,
                executors=executors,
                pool=pool,
                boards=boards,
                listeners=listeners,
                toolchains=held,
            )
    jobs = plan_jobs(spec)
    tvm_version = tvm_versions()[0]
    releases = {text: t.tvm_version for text, t in (toolchains or {}).items()}
    model_data = spec.read_models()  # before anything is recorded: a file changed since it was read is refused
    todo, outcome = _begin(spec, store, jobs, tvm_version, reopen_cancelled, releases)
    if not todo:  # nothing left: no pool, no Ray
        Progress(outcome, progress).on_start(0, 0, 0)
        store.finish_sweep(spec.sweep_id, final_status(outcome))
        return outcome
    if pool is None:
        from orchestrator.scheduling.ray_pool import RayPool

        pool = RayPool(spec.sweep_id, farm_resource, max_builds)
    listener = Listeners(StoreWriter(store, spec.sweep_id), Progress(outcome, progress), *listeners)
    sweep = SweepRun(
        spec,
        store,
        tracker,
        cache,
        pool,
        listener,
        boards or TrackerBoards(tracker),
        executors or registry.REGISTRY,
        tvm_version,
        health_checks,
        toolchains,
        model_data=model_data,
    )
    try:
        sweep.run(todo)
    except BaseException:
        store.finish_sweep(spec.sweep_id, "incomplete")
        raise
    if not sweep.cancelled:
        store.finish_sweep(spec.sweep_id, final_status(outcome))
    return outcome


def final_status(outcome: SweepOutcome) -> str:
    """The sweep's status once a run ends: jobs left pending make it incomplete; jobs a `sweep cancel` ended,
    which only `sweep resume` runs again, keep it cancelled (a `sweep run` of the file after a cancel, which
    skips them, called it complete)."""
    if not outcome.complete:
        return "incomplete"
    return "cancelled" if outcome.statuses.get("cancelled") else "complete"


def _begin(
    spec: SweepSpec,
    store: ResultStore,
    jobs: list[Job],
    tvm_version: str,
    reopen_cancelled: bool,
    releases: dict[str, str] | None = None,
) -> tuple[list[Job], SweepOutcome]:
    """Record the sweep and its jobs (this process becomes its driver); the jobs left to run, and the outcome so far."""
    new = store.begin_sweep(
        spec.sweep_id,
        name=spec.name,
        label=spec.label,
        source=spec.source,
        source_path=spec.source_path,
        jobs=jobs,
        tvm_version=tvm_version,
        model_sizes={sha: p.stat().st_size for sha, p in spec.model_paths.items()},
        releases=releases,
    )
    if reopen_cancelled:  # `sweep resume` after `sweep cancel`: the cancelled jobs run again
        store.reopen_cancelled(spec.sweep_id)
    statuses = store.job_statuses(spec.sweep_id)
    todo = [j for j in jobs if statuses.get(j.key) in PENDING_STATUSES]
    outcome = SweepOutcome(sweep_id=spec.sweep_id, new=new, jobs=len(jobs), already_final=len(jobs) - len(todo))
    for j in jobs:
        if statuses.get(j.key) not in PENDING_STATUSES:
            outcome.statuses[statuses[j.key]] += 1
    return todo, outcome


def nothing_left(spec: SweepSpec, store: ResultStore, reopen_cancelled: bool = False) -> bool:
    """Whether every job of the stored sweep has a final row (read only: no farm or Ray needed to say so)."""
    if store.get_sweep(spec.sweep_id) is None:
        return False
    statuses = store.job_statuses(spec.sweep_id)
    keys = {j.key for j in plan_jobs(spec)}
    if not keys <= statuses.keys():
        return False
    return all(statuses[k] in FINAL_STATUSES and not (reopen_cancelled and statuses[k] == "cancelled") for k in keys)


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
    provision: bool = True,
) -> SweepOutcome:
    """`sweep run` / `sweep resume`: the toolchains, the farm (given, configured or ephemeral), Ray, then ``run_sweep``.

    A sweep with nothing left to do is finished without any. The tvm axis' missing toolchains are
    provisioned first, their progress to ``note`` (with ``provision`` False: ToolchainError naming the
    first missing one). FarmError when the farm cannot be started or ``farm_resource`` is offered by no Ray node.
    """
    cache = ArtifactCache(home / "artifacts")
    with driving(home, spec.sweep_id):
        return _execute(
            spec, store, home, cache, tracker, ray_address, boards, farm_resource, progress, note, reopen_cancelled,
            provision,
        )  # fmt: skip


@contextmanager
def driving(home: Path, sweep_id: str) -> Iterator[None]:
    """This process drives ``sweep_id`` on this machine until the block ends: an flock on
    TVMBENCH_HOME/run/sweep-ID.lock (the kernel lets go when the process dies, kill -9 included).

    The database refuses a second driver once the first has written its claim (begin_sweep), which is after
    the farm and Ray start: two `sweep run` started within the same seconds both started a farm before
    one was refused. The lock refuses the second at once; drivers on other machines meet the database's.
    """
    import fcntl

    from db.writes import SweepBusy

    folder = home / "run"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"sweep-{sweep_id}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepBusy(
                f"sweep {sweep_id} is already being run by another process on this machine: wait for it "
                f"(`tvmbench results sweeps` shows it running), or stop it with `tvmbench sweep cancel {sweep_id}`"
            ) from None
        yield


def _execute(
    spec: SweepSpec,
    store: ResultStore,
    home: Path,
    cache: ArtifactCache,
    tracker: str | None,
    ray_address: str | None,
    boards: int,
    farm_resource: str | None,
    progress: ProgressFn | None,
    note: farm.Note,
    reopen_cancelled: bool,
    provision: bool,
) -> SweepOutcome:
    store.refuse_a_second_driver(spec.sweep_id)  # before the farm and Ray start, not after
    if nothing_left(spec, store, reopen_cancelled):
        return run_sweep(  # no toolchain asked for: nothing is built
            spec, store, tracker or "", cache, progress=progress, reopen_cancelled=reopen_cancelled, toolchains={}
        )
    # Before the farm and Ray: a missing or unknown toolchain is its one line with nothing started or recorded.
    with toolchain_axis.ensure(spec.toolchains, provision_missing=provision, progress=note) as found:
        board_keys = {t.board_key for t in spec.targets}
        # An ephemeral farm starts boards of each release, and of the installed one for a baseline (no release).
        baseline = any(registry.get(e).baseline for e in spec.executors)
        runtimes = toolchain_axis.board_runtimes(found, installed_too=baseline)
        with farm.farm_for_run(home, tracker, boards, board_keys, note, toolchains=runtimes) as address:
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
                toolchains=found,
            )
