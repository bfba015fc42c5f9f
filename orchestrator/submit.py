"""Submit a sweep to a Ray cluster as a Ray job, and follow, read or cancel it from any machine.

The sweep file and the model files it names travel with the job (Ray's ``working_dir``, uploaded
through the dashboard), so the cluster needs no shared filesystem; the entrypoint is
``tvmbench sweep run`` on the head node, writing to the shared database given by ``TVMBENCH_DB``.
The cluster's nodes must have tvmbench installed (the same package and TVM version on every node).

A sweep id maps to its Ray submission ids ``tvmbench-<sweep id>`` (then ``-2``, ``-3``... when the
same sweep is submitted again after it ended); the sweep id is also in the job's metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from db.lookup import pick_prefix
from db.urls import redact, shown_url
from orchestrator.farm import FarmError, wait_until
from orchestrator.spec import SpecError, load_spec, sweep_text
from tvmbench.core import liveness
from tvmbench.core.errors import one_line
from tvmbench.core.records import FINAL_STATUSES, PENDING_STATUSES
from workers.toolchains.spec import parse as parse_toolchain
from workers.toolchains.toolchain import ToolchainError

SUBMISSION_PREFIX = "tvmbench-"
METADATA_KEY = "tvmbench_sweep"
ACTIVE_STATES = ("PENDING", "RUNNING")


class SubmitError(RuntimeError):
    """The sweep cannot be submitted or found; the message is one line saying what to do."""


class NotFound(SubmitError):
    """The sweep or its Ray job does not exist (the CLI exits 2, like every other lookup)."""


@dataclass(frozen=True)
class Submitted:
    sweep_id: str
    submission_id: str
    already_running: bool  # the sweep was running on the cluster already: nothing new was submitted


def stage_sweep(sweep_file: Path, dest: Path) -> str:
    """Copy the sweep file and every model file it names into ``dest``, keeping their relative layout.

    Returns the sweep file's path inside ``dest`` (POSIX). Model paths in the file are relative to the
    sweep file, and may climb out of its folder (``../models/x.onnx``): the staged tree is rooted at the
    common ancestor of the sweep file and its models, so the same relative paths resolve on the cluster.
    """
    sweep_file = sweep_file.resolve()
    data = tomllib.loads(sweep_text(sweep_file))
    base = sweep_file.parent
    _refuse_local_toolchains(data)
    models: list[tuple[Path, Path]] = []  # (where the file is read here, where the cluster looks for it)
    for i, table in enumerate(data.get("models", [])):
        if not isinstance(table, dict):
            continue
        # Bundled models (onnx = "...") come with the onnx package on the cluster; inputs files travel too.
        for key in ("path", "inputs_file"):
            if key not in table:
                continue
            given = str(table[key])
            if Path(given).is_absolute():
                raise SubmitError(
                    f"models[{i}].{key} = {given!r} is absolute: write it relative to the sweep file so the "
                    "file can travel with the job"
                )
            # Staged where the sweep file names it, not where a symlink leads: models/x.onnx -> /data/x.onnx
            # was staged as data/x.onnx, and the job failed on the cluster ("models/x.onnx does not exist").
            # normpath: the staged tree has real folders, so `dir/../x` is `x` there whatever `dir` is here.
            models.append((base / given, Path(os.path.normpath(base / given))))
    root = Path(_common_root([base, *[named.parent for _, named in models]]))
    for read, named in [(sweep_file, sweep_file), *models]:
        target = dest / named.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(read, target)  # follows a symlink: its file travels
    return PurePosixPath(sweep_file.relative_to(root)).as_posix()


def _refuse_local_toolchains(data: dict[str, Any]) -> None:
    """A tvm axis entry that names a file here (a wheel, an interpreter) by a relative path cannot travel:
    on the cluster it would name a path in the job's staging folder, which holds no such file (and the
    sweep id, which carries the absolute path, would differ from the one printed here)."""
    axes = data.get("axes")
    entries = axes.get("tvm") if isinstance(axes, dict) else None
    for entry in entries if isinstance(entries, list) else [entries] if entries is not None else []:
        path = entry.get("python") if isinstance(entry, dict) else entry
        if not isinstance(path, str):
            continue
        try:
            parsed = parse_toolchain(entry)
        except ToolchainError:
            continue  # load_spec says what is wrong with it
        if parsed.kind != "release" and not Path(parsed.value).expanduser().is_absolute():
            what = "interpreter" if parsed.kind == "interpreter" else "wheel"
            raise SubmitError(
                f"axes.tvm: the {what} {parsed.value!r} is a path relative to the sweep file, which a submitted "
                f"sweep cannot take along: add it on the cluster's head (`tvmbench toolchains add` there) and "
                f'write its absolute path there, or name a release ("0.26.0")'
            )


def _common_root(paths: list[Path]) -> str:
    return os.path.commonpath([str(p) for p in paths])


def _client(ray_address: str) -> Any:
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(ray_address)
    except Exception as exc:
        raise SubmitError(
            f"cannot reach the Ray dashboard at {redact(ray_address)} ({redact(one_line(exc))}); give "
            "--ray-address http://HEAD:8265 and, if the cluster uses token auth, its token in ~/.ray/auth_token "
            "or RAY_AUTH_TOKEN"
        ) from None


def _submissions(client: Any, sweep_ref: str) -> list[Any]:
    """Ray jobs of a sweep (id or unique id prefix), oldest first; QueryError when the prefix starts the
    ids of several submitted sweeps (the newest job of any of them is not the one meant)."""
    ours = [j for j in client.list_jobs() if (j.metadata or {}).get(METADATA_KEY)]
    sweep_id = pick_prefix("sweep id", sweep_ref, (j.metadata[METADATA_KEY] for j in ours))
    jobs = [j for j in ours if j.metadata[METADATA_KEY] == sweep_id]
    return sorted(jobs, key=lambda j: j.start_time or 0)


def ray_state(job: Any) -> str:
    """A Ray job's state as a plain string: PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED."""
    return getattr(job.status, "value", str(job.status))


def latest_submission(client: Any, sweep_ref: str) -> Any | None:
    """The newest Ray job of a sweep, or None."""
    jobs = _submissions(client, sweep_ref)
    return jobs[-1] if jobs else None


def entrypoint(
    sweep_path: str, *, tracker: str | None, label: str | None, farm_resource: str | None, boards: int
) -> str:
    """The shell command the Ray job runs on the head node."""
    cmd = ["tvmbench", "sweep", "run", sweep_path, "--ray-address", "auto", "--boards", str(boards)]
    if tracker:
        cmd += ["--tracker", tracker]
    if label is not None:
        cmd += ["--label", label]
    if farm_resource:
        cmd += ["--farm-resource", farm_resource]
    return shlex.join(cmd)


def submit_sweep(
    sweep_file: Path,
    *,
    ray_address: str,
    db_url: str,
    tracker: str | None = None,
    label: str | None = None,
    farm_resource: str | None = None,
    boards: int = 1,
    env: dict[str, str] | None = None,
) -> Submitted:
    """Submit ``sweep_file`` as a Ray job and return at once with the sweep id.

    ``db_url`` must be a database every node reaches (PostgreSQL); ``tracker`` the farm the head node
    reaches (default: an ephemeral local farm on the head node). ``env`` adds environment variables
    for the job. Submitting a sweep that is still running returns its running job.
    """
    if db_url.startswith("sqlite"):
        raise SubmitError(
            "sweep submit needs a database the cluster and you both reach: give --db postgresql+psycopg://HOST/DB "
            "(or TVMBENCH_DB); a SQLite file stays on one machine"
        )
    try:
        spec = load_spec(sweep_file, label=label)
    except SpecError as exc:
        raise SubmitError(str(exc)) from None
    _refuse_local_toolchains(tomllib.loads(sweep_text(sweep_file)))  # before the cluster is asked anything
    client = _client(ray_address)
    previous = _submissions(client, spec.sweep_id)
    running = [j for j in previous if ray_state(j) in ACTIVE_STATES]
    if running:
        return Submitted(spec.sweep_id, running[-1].submission_id, already_running=True)
    submission_id = SUBMISSION_PREFIX + spec.sweep_id + (f"-{len(previous) + 1}" if previous else "")
    with tempfile.TemporaryDirectory(prefix="tvmbench-submit-") as staging:
        sweep_path = stage_sweep(sweep_file, Path(staging))
        command = entrypoint(sweep_path, tracker=tracker, label=label, farm_resource=farm_resource, boards=boards)
        job = {
            "entrypoint": command,
            "submission_id": submission_id,
            # The database URL travels in the environment, not on the command line that `ps` shows.
            "runtime_env": {"working_dir": staging, "env_vars": {"TVMBENCH_DB": db_url, **(env or {})}},
            "metadata": {METADATA_KEY: spec.sweep_id, "name": spec.name, "label": spec.label},
        }
        with _quiet_ray_upload():
            _submit_with_retry(client, job, ray_address)
    return Submitted(spec.sweep_id, submission_id, already_running=False)


def _submit_with_retry(client: Any, job: dict[str, Any], ray_address: str, agent_wait_s: float = 30.0) -> None:
    """submit_job, waiting out a cluster that has just started (its job agent not registered yet)."""
    deadline = time.monotonic() + agent_wait_s
    while True:
        try:
            client.submit_job(**job)
            return
        except Exception as exc:
            # Ray's job server answers 500 "No available agent to submit job" until the head's
            # dashboard agent has registered, a few seconds after `ray start`.
            if "No available agent" in str(exc) and time.monotonic() < deadline:
                time.sleep(1.0)
                continue
            # Ray's error may quote the job, whose environment holds the database URL.
            db_url = job.get("runtime_env", {}).get("env_vars", {}).get("TVMBENCH_DB")
            if _lost_connection(exc):
                # The head went away mid-submit (it was there a moment ago: the client was made): it did
                # not "refuse" anything, and whether the job was recorded is unknown.
                message = (
                    f"the Ray cluster at {ray_address} stopped answering while the job was submitted "
                    f"({one_line(exc)}): check that its head runs (`ray status` there), then submit again "
                    "(a sweep whose job did start is not started twice)"
                )
            else:
                message = f"the Ray cluster at {ray_address} refused the job: {one_line(exc)}"
            raise SubmitError(redact(message, db_url)) from None


def _lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection that failed or broke (requests' and the standard library's)."""
    names = {t.__name__ for t in type(exc).__mro__}
    text = str(exc)
    return bool(
        names & {"ConnectionError", "ConnectionRefusedError", "ConnectionResetError", "ChunkedEncodingError"}
    ) or any(
        hint in text
        for hint in ("Connection refused", "Connection aborted", "Connection reset", "Max retries exceeded")
    )


@contextlib.contextmanager
def _quiet_ray_upload() -> Iterator[None]:
    """Ray's upload log lines ("Uploading package", a large file's advice to pass ``excludes`` to
    ``ray.init``, which a tvmbench user has no call to) are not the submitter's: errors only meanwhile."""
    loggers = [
        logging.getLogger(n) for n in ("ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging")
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def sweep_status(sweep_ref: str, *, store: Any | None, ray_address: str | None) -> dict[str, Any]:
    """Progress of a sweep from the database (job counts) and its Ray job (state, message)."""
    status: dict[str, Any] = {"sweep_id": sweep_ref}
    if store is not None:
        sweep = store.get_sweep(sweep_ref)
        if sweep is not None:
            counts = Counter(store.job_statuses(sweep.id).values())
            final = sum(n for s, n in counts.items() if s in FINAL_STATUSES)
            # "running" with its driver gone (killed, its node lost) is "interrupted": say how to go on.
            state = liveness.shown_status(sweep.status, sweep.driver_host, sweep.driver_pid, sweep.heartbeat_at)
            status.update(
                sweep_id=sweep.id,
                name=sweep.name,
                state=state,
                jobs=sweep.job_count,
                final=final,
                ok=counts.get("ok", 0),
                failed=final - counts.get("ok", 0),
                pending=sum(n for s, n in counts.items() if s in PENDING_STATUSES),
                statuses=dict(counts),
            )
            if state == liveness.INTERRUPTED:
                status["resume"] = liveness.resume_hint(sweep.id)
    if ray_address:
        try:
            job = latest_submission(_client(ray_address), status["sweep_id"])
        except SubmitError as exc:
            if "state" not in status:  # the database knows nothing of it either: the cluster's line it is
                raise
            # The head is gone (it died, or the laptop is off its network): the database still says how
            # far the sweep got, and an orphaned driver shows as interrupted once its heartbeat is stale.
            status.update(ray_status="UNREACHABLE", ray_message=str(exc))
            job = None
        if job is not None:
            status.update(
                sweep_id=(job.metadata or {}).get(METADATA_KEY, status["sweep_id"]),
                submission_id=job.submission_id,
                ray_status=ray_state(job),
                ray_message=job.message,
            )
    if "state" not in status and "ray_status" not in status:
        where = " or ".join(w for w, on in (("the database", store is not None), ("Ray", bool(ray_address))) if on)
        more = "" if ray_address else ", --ray-address finds submitted ones"
        raise NotFound(no_sweep(store, sweep_ref, where, more))
    return status


def no_sweep(store: Any, sweep_ref: str, where: str, more: str = "") -> str:
    """The line for a sweep id found nowhere: a name or label of stored sweeps says their ids (the commands
    that act on a sweep take ids only: a name may stand for several runs)."""
    named = store.sweep_ids_named(sweep_ref) if store is not None else []
    if named:
        return (
            f"no sweep with id {sweep_ref!r} in {where}: that is the name of sweep(s) {', '.join(named)} "
            "(newest first); give an id"
        )
    return f"no sweep {sweep_ref!r} in {where}; `tvmbench results sweeps` lists stored sweeps{more}"


def _submission_or_fail(client: Any, sweep_ref: str) -> Any:
    job = latest_submission(client, sweep_ref)
    if job is None:
        raise NotFound(f"no Ray job for sweep {sweep_ref!r} on this cluster; `tvmbench sweep submit` starts one")
    return job


def sweep_logs(sweep_ref: str, *, ray_address: str, follow: bool = False, write: Callable[[str], None]) -> None:
    """Write the sweep's Ray job log; with ``follow``, keep writing until the job ends."""
    client = _client(ray_address)
    job = _submission_or_fail(client, sweep_ref)
    if not follow:
        write(client.get_job_logs(job.submission_id))
        return

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job.submission_id):
            write(chunk)

    asyncio.run(tail())


def cancel_sweep(
    sweep_ref: str, *, ray_address: str, store: Any | None, stop_timeout_s: float = 60.0
) -> dict[str, Any]:
    """Stop the sweep's Ray job; mark the sweep cancelled in the database (its unfinished jobs stay
    pending, so submitting the same sweep again finishes them)."""
    client = _client(ray_address)
    job = _submission_or_fail(client, sweep_ref)
    stopped = client.stop_job(job.submission_id)  # False when the job had already ended
    sweep_id = (job.metadata or {}).get(METADATA_KEY, sweep_ref)
    if stopped:
        # The driver marks its sweep "incomplete" as it exits: wait for that before saying "cancelled".
        with contextlib.suppress(FarmError):
            wait_until(
                lambda: getattr(client.get_job_status(job.submission_id), "value", "") not in ACTIVE_STATES,
                stop_timeout_s,
                f"Ray job {job.submission_id} to stop",
                interval_s=0.5,
            )
    sweep = store.get_sweep(sweep_id) if store is not None else None
    if stopped and sweep is not None:
        store.finish_sweep(sweep.id, "cancelled")
    return {"sweep_id": sweep_id, "submission_id": job.submission_id, "stopped": bool(stopped)}


CANCEL_REASON = "cancelled by `tvmbench sweep cancel`"


def cancel_local(store: Any, sweep_ref: str, *, wait_s: float = 30.0, poll_s: float = 0.2) -> dict[str, Any]:
    """Cancel a sweep run by a driver of this database (not a Ray job): flag it, let the driver stop.

    A running driver sees the flag within half a second, kills its measurements (freeing the boards) and
    marks every job without a result ``cancelled``; a driver that was killed never answers, so after
    ``wait_s`` the jobs are marked here. Returns {"sweep_id", "before", "cancelled", "kept"}; ``before``
    "complete"/"cancelled" means there was nothing to cancel.
    """
    sweep = store.get_sweep(sweep_ref)
    if sweep is None:
        raise NotFound(no_sweep(store, sweep_ref, shown_url(store.url)))
    before = store.request_cancel(sweep.id)
    # A driver known to be gone (tvmbench/core/liveness.py) never answers the flag: no wait for it.
    gone = liveness.driver_gone(sweep.driver_host, sweep.driver_pid, sweep.heartbeat_at)
    if before not in ("complete", "cancelled"):
        if before in ("running", "cancelling") and not gone:
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and store.sweep_status(sweep.id) == "cancelling":
                time.sleep(poll_s)
        if store.sweep_status(sweep.id) != "cancelled":  # no driver (or a dead one): mark the rest here
            store.cancel_pending_jobs(sweep.id, CANCEL_REASON)
    statuses = store.job_statuses(sweep.id)
    done = sum(1 for s in statuses.values() if s == "cancelled")
    return {"sweep_id": sweep.id, "before": before, "cancelled": done, "kept": len(statuses) - done}
