"""Measure: get a board from the tracker with a deadline, upload, check outputs, time, clean up.

Remote steps are plain functions with cleanup in ``finally``; every failure comes back as a ``Run``
with an error kind (MetaSchedule's RPCRunner does the same), never as an exception.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from workers.artifacts import arch_compatible
from workers.compile import one_line
from workers.phases import PhaseLog
from workers.records import BASELINE_EXECUTOR, Build, Job, Run
from workers.reference import compare
from workers.sampling import SamplingPlan, sample, time_evaluator_timer
from workers.targets import presets_for, target_kind


class DeviceUnavailable(RuntimeError):
    """No board of the key became free before the deadline."""


class NoBoardRegistered(RuntimeError):
    """The tracker knows no board of the key at all."""


@dataclass(frozen=True)
class Session:
    remote: Any  # tvm.rpc.RPCSession
    board_id: str


def parse_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"tracker address {addr!r} is not HOST:PORT")
    return host, int(port)


def tracker_summary(tracker: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The tracker's summary: {"queue_info": {key: {free, pending}}, "server_info": [...]}."""
    from tvm.rpc import base

    sock = _tracker_socket(tracker, timeout_s)
    try:
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        value = base.recvjson(sock)
    finally:
        sock.close()
    if value[0] != base.TrackerCode.SUCCESS:
        raise RuntimeError(f"tracker {tracker} answered {value!r} to a summary request")
    return value[1]


def registered_keys(summary: dict[str, Any]) -> dict[str, int]:
    """Board count per key, from a tracker summary."""
    counts: dict[str, int] = {}
    for server in summary.get("server_info", []):
        key = str(server.get("key", "")).removeprefix("server:")
        counts[key] = counts.get(key, 0) + 1
    return counts


def _tracker_socket(tracker: str, timeout_s: float) -> socket.socket:
    from tvm.rpc import base

    host, port = parse_addr(tracker)
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
    magic = struct.unpack("<i", base.recvall(sock, 4))[0]
    if magic != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise RuntimeError(f"{tracker} is not a TVM RPC tracker")
    return sock


def _request_once(tracker: str, key: str, wait_s: float, session_timeout_s: float) -> Session:
    """One REQUEST to the tracker, bounded by ``wait_s`` (TimeoutError -> DeviceUnavailable)."""
    from tvm import rpc
    from tvm.rpc import base

    sock = _tracker_socket(tracker, timeout_s=min(10.0, wait_s))
    try:
        sock.settimeout(wait_s)
        base.sendjson(sock, [base.TrackerCode.REQUEST, key, "", 1])
        try:
            value = base.recvjson(sock)
        except TimeoutError:
            raise DeviceUnavailable(key) from None
    finally:
        # Closing does not withdraw a pending request from the tracker; a board offered to it later
        # regenerates its match key after a few seconds and is free again.
        sock.close()
    if value[0] != base.TrackerCode.SUCCESS:
        raise RuntimeError(f"tracker {tracker} answered {value!r} to a request for {key}")
    url, port, matchkey = value[1]
    remote = rpc.connect(url, port, matchkey, session_timeout_s)
    return Session(remote=remote, board_id=f"{key}@{url}:{port}")


def key_boards(summary: dict[str, Any], key: str) -> set[str]:
    """Board ids (key@host:port) of ``key`` in a tracker summary."""
    ids = set()
    for server in summary.get("server_info", []):
        if str(server.get("key", "")).removeprefix("server:") == key:
            host, port = (server.get("addr") or ["?", "?"])[:2]
            ids.add(f"{key}@{host}:{port}")
    return ids


def request_session(
    tracker: str,
    key: str,
    deadline_s: float,
    session_timeout_s: float,
    *,
    avoid: frozenset[str] = frozenset(),
    prefer_not: frozenset[str] = frozenset(),
    registration_wait_s: float | None = None,
) -> Session:
    """Ask the tracker for a board of ``key``, giving up after ``deadline_s``.

    The tracker picks the board, and its own request blocks forever when none is free, so:
    - every wait is bounded here by socket timeouts against one deadline;
    - a tracker that drops the connection (restarted) is asked again until the deadline, and a key
      with no board registered is polled for ``registration_wait_s`` (boards re-register a few
      seconds after a tracker restart) before NoBoardRegistered;
    - boards in ``avoid`` (quarantined) are never used and boards in ``prefer_not`` (the board an
      attempt just failed on) only when no other board of the key is free at the deadline. A session
      on such a board is *held* while asking again, so that the tracker must offer a different board
      (a released board would go straight back into its queue); held sessions are closed before
      returning. When every registered board of the key is avoided, DeviceUnavailable says so.
    """
    start = time.monotonic()
    deadline = start + deadline_s
    wait_registration = deadline_s if registration_wait_s is None else min(registration_wait_s, deadline_s)
    held: list[Session] = []
    seen_board = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            fallback = next((h for h in held if h.board_id not in avoid), None)
            if remaining <= 0:
                if fallback is not None:
                    held.remove(fallback)
                    return fallback
                raise DeviceUnavailable(key) if seen_board else NoBoardRegistered(key)
            try:
                boards = key_boards(tracker_summary(tracker, timeout_s=min(10.0, remaining)), key)
            except OSError:  # the tracker is restarting: ask again until the deadline
                time.sleep(min(0.5, max(remaining, 0)))
                continue
            if not boards:
                if time.monotonic() - start >= wait_registration:
                    raise NoBoardRegistered(key)
                time.sleep(min(0.5, max(remaining, 0)))
                continue
            seen_board = True
            usable = boards - avoid - {h.board_id for h in held}
            if not usable:
                if fallback is not None:
                    held.remove(fallback)
                    return fallback
                if boards <= avoid:
                    raise DeviceUnavailable(f"every board of {key!r} is quarantined: {sorted(boards)}")
                time.sleep(min(0.5, max(remaining, 0)))
                continue
            try:
                session = _request_once(tracker, key, remaining, session_timeout_s)
            except DeviceUnavailable:
                continue  # the deadline has passed: the top of the loop decides
            except Exception:
                # Tracker dropped the request (restart) or matched a board that just died.
                time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
                continue
            if session.board_id in avoid or session.board_id in prefer_not:
                held.append(session)
                continue
            return session
    finally:
        held.clear()  # dropping the last reference closes a held session and frees its board


def board_facts(remote: Any) -> dict[str, Any] | None:
    """Facts reported by the board agent, or None for a stock TVM rpc_server."""
    try:
        return json.loads(remote.get_function("tvmbench.board_facts")())
    except Exception:
        return None


def kernel_profile(remote: Any, file_name: str, args: list[Any], repeat: int) -> dict[str, Any]:
    """Per-kernel times of an uploaded module, taken on the board by the agent's ``tvmbench.profile``.

    A board without the agent (a stock ``tvm.exec.rpc_server``) or a profile that fails leaves the run
    as it is: the profile is then recorded as unavailable, with the reason.
    """
    try:
        profile_fn = remote.get_function("tvmbench.profile")
    except Exception:
        return {
            "available": False,
            "reason": "the board runs a stock TVM RPC server; per-kernel profiles need workers/board_agent.py",
        }
    try:
        return json.loads(profile_fn(file_name, repeat, *args))
    except Exception as exc:
        return {"available": False, "reason": f"profiling failed on the board: {one_line(exc)}"}


def _measure_onnxruntime(
    remote: Any,
    job: Job,
    build: Build,
    model: bytes,
    inputs: dict[str, np.ndarray],
    reference: list[np.ndarray],
    base: dict[str, Any],
    builds_in_flight: int | None,
) -> Run:
    """The baseline: the ONNX model under the board's own ONNX Runtime, checked and timed like a TVM run."""
    import base64
    import io

    import tvm

    settings = job.measure
    try:
        run_fn = remote.get_function("tvmbench.onnxruntime")
    except Exception:
        run_fn = None
    if run_fn is None:
        return Run(
            status="build",
            error=f"{base['board_id']} runs a stock TVM RPC server: the onnxruntime executor needs "
            "workers/board_agent.py on the board",
            finished_at=time.time(),
            **base,
        )
    name = f"tvmbench-{build.artifact_sha256[:16]}.onnx"
    log = PhaseLog()
    log.read_memory(remote, "before_load")
    log.upload(remote, model, name)
    log.notes["load"] = log.notes["first_inference"] = {
        "available": False,
        "reason": "ONNX Runtime loads and runs inside the agent's tvmbench.onnxruntime call (not timed apart)",
    }
    names = [n for n, _, _ in job.model.inputs]
    dev = remote.cpu(0)
    args = [tvm.runtime.tensor(inputs[n], dev) for n in names]
    load = os.getloadavg()[0]
    answer = json.loads(run_fn(name, settings.number, 1, json.dumps(names), *args))
    if not answer.get("available"):
        return Run(status="build", error=f"{base['board_id']}: {answer.get('reason')}", finished_at=time.time(), **base)
    outputs = [np.load(io.BytesIO(base64.b64decode(o)), allow_pickle=False) for o in answer["outputs"]]
    max_abs, max_rel, wrong = check_outputs(outputs, reference, settings, base)
    if wrong is not None:
        return wrong

    def timer(k: int) -> list[float]:  # each ask opens a fresh InferenceSession on the board, untimed
        return json.loads(run_fn(name, settings.number, k, json.dumps(names), *args))["samples_ms"]

    log.read_state(remote, "before")
    sampled = sample(timer, SamplingPlan.from_settings(settings))
    log.read_state(remote, "after")
    log.read_memory(remote, "after_runs")
    if settings.profile:
        base["kernel_profile"] = {"available": False, "reason": "the onnxruntime executor has no per-kernel view"}
    return ok_run(
        sampled.samples_ms,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        load_avg_1m=load,
        builds_in_flight=builds_in_flight,
        **log.fields(sampled),
        **base,
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


def _outputs_to_numpy(out: Any) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    flat: list[np.ndarray] = []
    for item in out:
        flat.extend(_outputs_to_numpy(item))
    return flat


def _run_outputs(vm: Any, args: list[Any]) -> list[np.ndarray]:
    """Run "main" once and fetch its outputs as numpy arrays.

    Over RPC a tuple result comes back as an opaque RPCObjectRef (calling ``vm["main"]`` directly made
    every multi-output model fail); the stateful interface hands the outputs back one by one.
    """
    vm.set_input("main", *args)
    vm.invoke_stateful("main")
    return _outputs_to_numpy(vm.get_outputs("main"))


def _classify(exc: BaseException) -> str:
    text = str(exc)
    if "RPCSessionTimeoutError" in text or "session has expired" in text:
        return "timeout"
    if "cannot open shared object" in text or "wrong ELF class" in text:
        return "build"
    return "infra"


def _device(remote: Any, job: Job) -> Any:
    kind = target_kind(job.target.tvm_target)
    if kind in ("cuda", "rocm", "vulkan", "metal", "opencl"):
        return getattr(remote, kind)(0)
    return remote.cpu(0)


def artifact_name(sha256: str) -> str:
    """The file name an artifact is uploaded under on a board."""
    return f"tvmbench-{sha256[:16]}.so"


def _load_vm(remote: Any, artifact: bytes, sha256: str, dev: Any) -> Any:
    """Upload an artifact under its hash and open a Relax VM on it."""
    from tvm import relax

    name = artifact_name(sha256)
    remote.upload(bytearray(artifact), name)
    return relax.VirtualMachine(remote.load_module(name), dev)


def run_golden(remote: Any, golden: Any, job: Job) -> str | None:
    """Run the golden model on the session's board; None when its outputs match, else the problem."""
    import tvm

    try:
        dev = _device(remote, job)
        vm = _load_vm(remote, golden.artifact, golden.sha256, dev)
        args = [tvm.runtime.tensor(golden.inputs[n], dev) for n in golden.input_names]
        outputs = _run_outputs(vm, args)
    except Exception as exc:
        return one_line(exc)
    _, _, problem = compare(outputs, list(golden.expected), golden.atol, golden.rtol)
    return problem


def acquire_board(job: Job, tracker: str, base: dict[str, Any], deadline_s: float, **request: Any) -> Session | Run:
    """A session on a board of the job's key, or the Run that says why there is none.

    ``request`` goes to ``request_session`` (avoid, prefer_not, registration_wait_s); ``base`` holds the
    fields every Run of this attempt carries.
    """
    key, settings = job.target.board_key, job.measure
    try:
        return request_session(tracker, key, deadline_s, settings.session_timeout_s, **request)
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


def measure_job(
    job: Job,
    build: Build,
    artifact: bytes,
    inputs: dict[str, np.ndarray],
    reference: list[np.ndarray],
    tracker: str,
    attempt: int = 1,
    builds_in_flight: int | None = None,
    *,
    avoid: frozenset[str] = frozenset(),
    prefer_not: frozenset[str] = frozenset(),
    registration_wait_s: float | None = None,
    golden: Any = None,
    checked_boards: frozenset[str] = frozenset(),
) -> Run:
    """Run one built job on a board of its key: check against the reference, then time it.

    ``avoid``/``prefer_not``/``registration_wait_s`` go to ``request_session``. With ``golden`` (an
    orchestrator.health.GoldenModel), a board not in ``checked_boards`` first runs the golden model;
    if that fails the job is not run and the attempt is an ``infra`` failure with ``health="failed"``
    on that board. All board waits share one deadline, ``device_wait_s``.
    """
    if job.executor == "aot-c":  # firmware on a microcontroller agent, counted in instructions
        from workers.aot.job import measure_aot_job

        return measure_aot_job(job, build, artifact, inputs, reference, tracker, attempt, builds_in_flight)
    started = time.time()
    base: dict[str, Any] = {
        "job_key": job.key,
        "attempt": attempt,
        "emulated": job.target.emulated,
        "started_at": started,
    }
    settings = job.measure
    # The artifact crossed Ray's object store (and maybe the disk cache) since it was built: check that
    # the bytes about to run are the bytes the build recorded before anything reaches a board.
    actual = hashlib.sha256(artifact).hexdigest()
    if actual != build.artifact_sha256:
        return Run(
            status="infra",
            finished_at=time.time(),
            error=f"artifact sha256 {actual[:16]} does not match the build's {str(build.artifact_sha256)[:16]}: "
            "corrupted between build and upload; not uploaded (resume rebuilds it)",
            **base,
        )
    # A board not yet checked runs the golden model first, in a session of its own (a session that
    # loaded one program failed loading a second here: kShutdown), then the job asks again.
    checked = set(checked_boards)
    wait_until = time.monotonic() + settings.device_wait_s
    while True:
        session = acquire_board(
            job,
            tracker,
            base,
            max(0.1, wait_until - time.monotonic()),
            avoid=avoid,
            prefer_not=prefer_not,
            registration_wait_s=registration_wait_s,
        )
        if isinstance(session, Run):
            return session
        if golden is None or session.board_id in checked:
            break
        board_id, facts = session.board_id, board_facts(session.remote)
        if not arch_compatible(build.artifact_arch, (facts or {}).get("arch")):
            break  # the job's own artifact cannot run here either: it ends as a `build` error, not the board's fault
        problem = run_golden(session.remote, golden, job)
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

    base["board_id"] = session.board_id
    try:
        return _run_on_board(session, job, build, artifact, inputs, reference, builds_in_flight, base)
    except Exception as exc:
        return Run(status=_classify(exc), error=f"{session.board_id}: {one_line(exc)}", finished_at=time.time(), **base)
    finally:
        # The RPC session closes when its last remote handle is freed; handles can sit in reference cycles,
        # and a board stays busy until its session closes, so collect now rather than whenever.
        del session
        gc.collect()


def _run_on_board(
    session: Session,
    job: Job,
    build: Build,
    artifact: bytes,
    inputs: dict[str, np.ndarray],
    reference: list[np.ndarray],
    builds_in_flight: int | None,
    base: dict[str, Any],
) -> Run:
    import tvm

    remote, settings = session.remote, job.measure
    facts = board_facts(remote)
    base["board_facts"] = facts
    if facts and facts.get("emulated"):
        base["emulated"] = True
    board_arch = facts.get("arch") if facts else None
    if not arch_compatible(build.artifact_arch, board_arch):
        presets = presets_for(board_arch, job.target.board_key)
        advice = f"preset = {presets[0]!r}" if presets else f"a target with mtriple for {board_arch}"
        return Run(
            status="build",
            finished_at=time.time(),
            error=f"target {job.target.name!r} built a {build.artifact_arch} artifact but board "
            f"{session.board_id} is {board_arch}: use {advice} for it (tvmbench targets list)",
            **base,
        )
    if job.executor == BASELINE_EXECUTOR:
        return _measure_onnxruntime(remote, job, build, artifact, inputs, reference, base, builds_in_flight)
    dev = _device(remote, job)
    log = PhaseLog()  # workers/phases.py: upload, load, first inference, memory and board state apart
    log.read_memory(remote, "before_load")
    log.upload(remote, artifact, artifact_name(build.artifact_sha256))
    vm = log.load_vm(remote, artifact_name(build.artifact_sha256), dev)
    args = [tvm.runtime.tensor(inputs[n], dev) for n, _, _ in job.model.inputs]
    log.read_memory(remote, "after_load")
    log.first_inference(remote, vm, dev, args)
    outputs = _outputs_to_numpy(vm.get_outputs("main"))
    max_abs, max_rel, wrong = check_outputs(outputs, reference, settings, base)
    if wrong is not None:
        return wrong
    load = os.getloadavg()[0]
    log.read_state(remote, "before")
    sampled = sample(time_evaluator_timer(vm, dev, settings, args), SamplingPlan.from_settings(settings))
    log.read_state(remote, "after")
    log.read_memory(remote, "after_runs")
    if settings.profile:
        base["kernel_profile"] = kernel_profile(remote, artifact_name(build.artifact_sha256), args, settings.repeat)
    return ok_run(
        sampled.samples_ms,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        load_avg_1m=load,
        builds_in_flight=builds_in_flight,
        **log.fields(sampled),
        **base,
    )
