"""A board session for one attempt: acquire a board, check it, hand it to a runner, close it.

What every Runner shares (workers/executors/): the fields each Run of an attempt carries, the artifact's
integrity check, the wait for a board with one deadline, the golden-model health check of a board not
yet checked, output checks against the reference and the successful Run with its statistics. Remote
steps are plain functions with cleanup in ``finally``; every failure comes back as a ``Run`` with an
error kind (MetaSchedule's RPCRunner does the same), never as an exception.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from tvmbench.core.errors import one_line
from tvmbench.core.health import GoldenModel
from tvmbench.core.records import Build, Job, Run
from workers import tracker_client
from workers.artifacts import arch_compatible
from workers.executors.requests import MeasureRequest
from workers.reference import compare
from workers.targets import presets_for
from workers.toolchains.boards import installed_version, split_release_key
from workers.tracker_client import (
    BoardNotAnswering,
    DeviceUnavailable,
    NoBoardRegistered,
    Session,
    SessionWatchdog,
    TrackerUnreachable,
    registered_keys,
    request_session,
    tracker_summary,
)

# A runner's step on the board: (session, base fields of every Run of the attempt) -> the Run.
OnBoard = Callable[[Session, dict[str, Any]], Run]
# A runner's golden-model check: (remote, golden, job) -> None when the outputs match, else the problem.
GoldenCheck = Callable[[Any, GoldenModel, Job], str | None]


def run_base(job: Job, attempt: int, **extra: Any) -> dict[str, Any]:
    """The fields every Run of this attempt carries (the runner may add some: unit, emulated)."""
    return {"job_key": job.key, "attempt": attempt, "emulated": job.target.emulated, "started_at": time.time(), **extra}


def board_facts(remote: Any) -> dict[str, Any] | None:
    """Facts reported by the board agent, or None for a stock TVM rpc_server."""
    try:
        return json.loads(remote.get_function("tvmbench.board_facts")())
    except Exception:
        return None


def board_runtime(remote: Any) -> dict[str, Any] | None:
    """``{"tvm_version", "ffi_version"}`` of the runtime a board serves, as its agent reports it; None for a
    stock ``rpc_server`` (it cannot say). An agent older than ``tvmbench.board_runtime`` says it in its facts."""
    for name in ("tvmbench.board_runtime", "tvmbench.board_facts"):
        try:
            reported = json.loads(remote.get_function(name)())
        except Exception:  # no such function on this server: try the next, then give up
            continue
        if reported.get("tvm_version"):
            return {"tvm_version": reported["tvm_version"], "ffi_version": reported.get("ffi_version")}
    return None


def key_release(board_id: str) -> str:
    """The TVM release a board's tracker key declares (``host-tvm0.26.0@...``); a plain key, the installed one."""
    key = board_id.rpartition("@")[0] or board_id
    return split_release_key(key)[1] or installed_version()


def runtime_mismatch(session: Session, base: dict[str, Any]) -> Run | None:
    """The ``infra`` Run when the board's runtime is not its key's release, else None (checked before any upload).

    An artifact loads only in the runtime that built it, and the key is how a job of a release finds its
    boards, so a board registered under the wrong key must not get the artifact. ``infra``, naming the board
    and both versions, counts against the board: the retry moves to another, and a board that keeps
    lying about its release is quarantined like any other faulty one. A stock server is taken at its key's word.
    """
    runtime = board_runtime(session.remote)
    declared = key_release(session.board_id)
    if runtime is None or runtime["tvm_version"] == declared:
        return None
    ffi = f" (tvm-ffi {runtime['ffi_version']})" if runtime.get("ffi_version") else ""
    return Run(
        status="infra",
        board_id=session.board_id,
        finished_at=time.time(),
        error=f"board {session.board_id} runs TVM {runtime['tvm_version']}{ffi} but its key is for TVM {declared}: "
        f"not uploaded (an artifact loads only in its own release); restart that board under the right key",
        **{k: v for k, v in base.items() if k != "board_id"},
    )


def check_outputs(
    outputs: list[np.ndarray], reference: list[np.ndarray], settings: Any, base: dict[str, Any]
) -> tuple[float, float, Run | None]:
    """(max abs error, max relative error, the ``wrong-result`` Run when outside tolerance, else None)."""
    max_abs, max_rel, problem = compare(outputs, reference, settings.atol, settings.rtol)
    if problem is None:
        return max_abs, max_rel, None
    wrong = Run(
        status="wrong-result", error=problem, max_abs_err=max_abs, max_rel_err=max_rel, finished_at=time.time(), **base
    )
    return max_abs, max_rel, wrong


def ok_run(samples: Any, **fields: Any) -> Run:
    """A successful Run with every sample kept and its statistics derived from them."""
    arr = np.asarray(samples, dtype=np.float64)
    return Run(
        status="ok",
        samples_ms=tuple(float(x) for x in arr),
        median_ms=float(np.median(arr)),
        mean_ms=float(arr.mean()),
        std_ms=float(arr.std()),
        min_ms=float(arr.min()),
        max_ms=float(arr.max()),
        finished_at=time.time(),
        **fields,
    )


def classify(exc: BaseException, past_deadline: bool = False) -> str:
    """The error kind of an exception raised during a session: the session's deadline, a bad artifact, else infra.

    ``past_deadline``: the error came when the session had run its ``session_timeout_s`` or longer. The
    board's server ends such a session by killing it, and what the client then sees depends on what it
    was doing (TVM's timeout error while a function runs; a closed connection mid-upload on a loaded
    machine): it is the deadline either way.
    """
    text = str(exc)
    if past_deadline or "RPCSessionTimeoutError" in text or "session has expired" in text:
        return "timeout"
    if "cannot open shared object" in text or "wrong ELF class" in text:
        return "build"
    return "infra"


def session_error(board_id: str, kind: str, exc: BaseException, job: Job) -> str:
    """The error line of a failed attempt. A timeout names our key: TVM's own message says to raise
    "session_timeout", which is no key of a sweep file."""
    if kind != "timeout":
        return f"{board_id}: {one_line(exc)}"
    limit = job.measure.session_timeout_s
    return (
        f"{board_id}: the board session ran past session_timeout_s = {limit:g} s (upload, load, warmup and "
        "samples all count): raise [measure] session_timeout_s, or lower warmup, repeat or number"
    )


def stopped_answering(board_id: str, job: Job) -> str:
    """The error line of a session the client ended (SessionWatchdog): the board did not end it at its deadline."""
    limit = job.measure.session_timeout_s
    return (
        f"{board_id} stopped answering: its session ran {tracker_client.SESSION_GRACE_S:g} s past session_timeout_s"
        f" = {limit:g} s and the board did not end it (stopped, hung or cut off), so the connection was closed "
        "here; `tvmbench farm status` shows a local board's process: wake it (`kill -CONT PID`) or restart it"
    )


def verify_artifact(build: Build, artifact: bytes, base: dict[str, Any]) -> Run | None:
    """The ``infra`` Run when the bytes about to run are not the bytes the build recorded, else None.

    The artifact crossed Ray's object store (and maybe the disk cache) since it was built.
    """
    actual = hashlib.sha256(artifact).hexdigest()
    if actual == build.artifact_sha256:
        return None
    return Run(
        status="infra",
        finished_at=time.time(),
        error=f"artifact sha256 {actual[:16]} does not match the build's {str(build.artifact_sha256)[:16]}: "
        "corrupted between build and upload; not uploaded (resume rebuilds it)",
        **base,
    )


def arch_mismatch(session: Session, job: Job, build: Build, base: dict[str, Any]) -> Run | None:
    """Read the board's facts into ``base``; the ``build`` Run when the artifact cannot run on it, else None."""
    facts = board_facts(session.remote)
    base["board_facts"] = facts
    if facts and facts.get("emulated"):
        base["emulated"] = True
    board_arch = facts.get("arch") if facts else None
    if arch_compatible(build.artifact_arch, board_arch):
        return None
    presets = presets_for(board_arch, job.target.board_key)
    advice = f"preset = {presets[0]!r}" if presets else f"a target with mtriple for {board_arch}"
    return Run(
        status="build",
        finished_at=time.time(),
        error=f"target {job.target.name!r} built a {build.artifact_arch} artifact but board "
        f"{session.board_id} is {board_arch}: use {advice} for it (tvmbench targets list)",
        **base,
    )


def acquire_board(job: Job, tracker: str, base: dict[str, Any], deadline_s: float, **request: Any) -> Session | Run:
    """A session on a board of the job's key, or the Run that says why there is none.

    ``request`` goes to ``request_session`` (avoid, prefer_not, registration_wait_s); ``base`` holds the
    fields every Run of this attempt carries.
    """
    key, settings = job.target.board_key, job.measure
    try:
        return request_session(tracker, key, deadline_s, settings.session_timeout_s, **request)
    except TrackerUnreachable as exc:  # stopped or killed mid-sweep: not "no board", which sends them to `farm add`
        return Run(
            status="pending-device",
            finished_at=time.time(),
            error=f"{exc}; the build is kept: `tvmbench sweep resume` runs the job once it answers",
            **base,
        )
    except NoBoardRegistered:
        try:
            keys: Any = registered_keys(tracker_summary(tracker))
        except OSError:
            keys = {}
        return Run(
            status="pending-device",
            finished_at=time.time(),
            error=f"no board with key {key!r} is registered with tracker {tracker} "
            f"(farm list shows {keys or 'no boards'}); the build is kept: connect one "
            f"(`tvmbench farm add --key {key}` for a local one) and run `tvmbench sweep resume`",
            **base,
        )
    except BoardNotAnswering as exc:  # counted against that board, like one that died mid-run: retried elsewhere
        return Run(
            status="infra",
            board_id=exc.board_id,
            finished_at=time.time(),
            error=f"{exc}; `tvmbench farm list` shows it, `tvmbench farm status` shows a local board's process: "
            "restart that board agent, or stop it so that it leaves the tracker",
            **{k: v for k, v in base.items() if k != "board_id"},
        )
    except DeviceUnavailable as exc:
        try:
            keys = registered_keys(tracker_summary(tracker))
        except OSError:
            keys = "no answer from the tracker"
        why = f" ({exc})" if str(exc) != key else ""
        return Run(
            status="device-unavailable",
            finished_at=time.time(),
            error=f"no board with key {key!r} became free within "
            f"{settings.device_wait_s:g}s at tracker {tracker}{why} (farm list shows {keys})",
            **base,
        )
    except Exception as exc:
        return Run(status="infra", error=f"tracker {tracker}: {one_line(exc)}", finished_at=time.time(), **base)


def golden_release(golden: GoldenModel) -> str:
    """The TVM release that built the golden model (the installed one unless it says)."""
    return getattr(golden, "tvm_version", None) or installed_version()


def checked_session(
    job: Job,
    tracker: str,
    base: dict[str, Any],
    *,
    golden: GoldenModel | None,
    golden_check: GoldenCheck | None,
    checked_boards: frozenset[str],
    artifact_arch: str | None = None,
    **request: Any,
) -> Session | Run:
    """A session on a board that passed its health check, or the Run that says why there is none.

    A board not in ``checked_boards`` first runs the golden model, in a session of its own (a session
    that loaded one program failed loading a second here: kShutdown), then the job asks again. A failed
    check ends the attempt as ``infra`` with ``health="failed"`` on that board. A board the job's own
    artifact (``artifact_arch``) cannot run on is not checked: the golden model was built for the same
    target and would fail there too, blaming the board for the job's ``build`` error. All waits share
    one deadline, ``device_wait_s``. Before anything is uploaded, a board whose runtime is not its key's
    release ends the attempt as ``infra`` (``runtime_mismatch``).
    """
    checked = set(checked_boards)
    wait_until = time.monotonic() + job.measure.device_wait_s
    while True:
        session = acquire_board(job, tracker, base, max(0.1, wait_until - time.monotonic()), **request)
        if isinstance(session, Run):
            return session
        wrong_runtime = runtime_mismatch(session, base)
        if wrong_runtime is not None:  # before the golden model too: it is an artifact as well
            return wrong_runtime
        if golden is None or golden_check is None or session.board_id in checked:
            return session
        if golden_release(golden) != key_release(session.board_id):
            # The golden model was built by another release than this board runs: it would not load there
            # and would blame the board. Boards of other releases go unchecked until it is built per release.
            return session
        board_id, facts = session.board_id, board_facts(session.remote)
        if not arch_compatible(artifact_arch, (facts or {}).get("arch")):
            return session  # the job ends as a `build` error on it, which is not the board's fault
        with SessionWatchdog(board_id, job.measure.session_timeout_s + tracker_client.SESSION_GRACE_S) as dog:
            problem = golden_check(session.remote, golden, job)
        if dog.fired:
            problem = stopped_answering(board_id, job)
        del session  # closes the golden model's session
        gc.collect()
        base["health"] = "failed" if problem else "ok"
        if problem:
            return Run(
                status="infra",
                board_id=board_id,
                board_facts=facts,
                finished_at=time.time(),
                error=f"{board_id} failed its health check (golden model {golden.name}): {problem}",
                **base,
            )
        checked.add(board_id)


def run_attempt(
    request: MeasureRequest, base: dict[str, Any], on_board: OnBoard, golden_check: GoldenCheck | None
) -> Run:
    """One attempt: check the artifact, get a checked board, run ``on_board`` on it, close the session.

    The request's board options go to ``request_session``; its golden model is run only with a
    ``golden_check``. An exception in ``on_board`` becomes a Run of the kind ``classify`` says.
    """
    job, build = request.job, request.build
    corrupted = verify_artifact(build, request.artifact, base)
    if corrupted is not None:
        return corrupted
    session = checked_session(
        job,
        request.tracker,
        base,
        golden=request.golden if golden_check is not None else None,
        golden_check=golden_check,
        checked_boards=request.checked_boards,
        artifact_arch=build.artifact_arch,
        avoid=request.avoid,
        prefer_not=request.prefer_not,
        registration_wait_s=request.registration_wait_s,
    )
    if isinstance(session, Run):
        return session
    base["board_id"] = board_id = session.board_id
    dog = SessionWatchdog(board_id, job.measure.session_timeout_s + tracker_client.SESSION_GRACE_S)
    try:
        with dog:
            return on_board(session, base)
    except Exception as exc:
        if dog.fired:  # the board let its own deadline pass: it is stopped or hung, which is the board's fault
            return Run(status="infra", error=stopped_answering(board_id, job), finished_at=time.time(), **base)
        past_deadline = time.monotonic() - session.opened_at >= job.measure.session_timeout_s
        kind = classify(exc, past_deadline=past_deadline)
        return Run(status=kind, error=session_error(board_id, kind, exc, job), finished_at=time.time(), **base)
    finally:
        # The RPC session closes when its last remote handle is freed; handles can sit in reference cycles,
        # and a board stays busy until its session closes, so collect now rather than whenever.
        del session
        gc.collect()


class SessionRunner:
    """A Runner (workers/executors/base.py) made of one board session: subclasses say what runs on it.

    ``on_board`` runs the request's job on a checked board; ``run_fields`` are the fields every Run of
    the executor carries (unit, emulated); a runner with a ``golden_check`` health-checks boards first.
    """

    run_fields: ClassVar[dict[str, Any]] = {}
    # Whether the board's architecture is checked against the artifact's first (``arch_mismatch``).
    checks_arch: ClassVar[bool] = True
    golden_check: ClassVar[GoldenCheck | None] = None  # set with staticmethod(...)

    def on_board(self, session: Session, request: MeasureRequest, base: dict[str, Any]) -> Run:
        """Run the request's job on the session's board; ``base`` holds the fields of every Run of the attempt."""
        raise NotImplementedError

    def run(self, request: MeasureRequest) -> Run:
        """Check the job's outputs against the reference on a board of its key, then time it."""

        def on_board(session: Session, base: dict[str, Any]) -> Run:
            if self.checks_arch:
                wrong_arch = arch_mismatch(session, request.job, request.build, base)
                if wrong_arch is not None:
                    return wrong_arch
            return self.on_board(session, request, base)

        base = run_base(request.job, request.attempt, **self.run_fields)
        return run_attempt(request, base, on_board, self.golden_check)
