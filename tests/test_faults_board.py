"""Board faults, provoked for real against a real tracker and board agents: a board killed mid-run, a
kernel running past the session deadline, no board for a key, a busy key, a tracker restart, a
corrupted artifact, and quarantine of a board that keeps failing its golden-model health check."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import psutil
import pytest
from typer.testing import CliRunner

from benchmarks.chaos_report import board_in_session
from db.store import ResultStore
from orchestrator.farm import LocalFarm, wait_until
from orchestrator.health import build_golden
from tvmbench.cli import app
from tvmbench.core.health import QUARANTINE_AFTER, GoldenModel
from tvmbench.core.records import Build, Job, MeasureSettings, ModelRef, Run
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.executors.registry import build_job, measure_job
from workers.executors.requests import BuildRequest, MeasureRequest
from workers.onnx_model import seeded_inputs
from workers.reference import reference_outputs
from workers.targets import PRESETS
from workers.tracker_client import request_session, tracker_summary

SLOW = {"n": 512, "chain": 4}  # about 3 s per inference untuned on this kind of machine


@dataclass(frozen=True)
class Built:
    job: Job
    build: Build
    artifact: bytes
    inputs: dict[str, np.ndarray]
    reference: list[np.ndarray]


def _build(name: str, model, shape: tuple[int, ...], settings: MeasureSettings) -> Built:
    data = model.SerializeToString()
    ref = ModelRef(name=name, sha256=hashlib.sha256(data).hexdigest(), source=name, inputs=(("x", shape, "float32"),))
    job = Job(
        model=ref, target=PRESETS["host"], executor="vm-bytecode", opt_level=2, pipeline="per-target", measure=settings
    )
    build, artifact = build_job(BuildRequest(job, data))
    assert build.ok and artifact is not None, build.error
    inputs = seeded_inputs(ref.inputs, 0)
    return Built(job, build, artifact, inputs, reference_outputs(data, inputs))


@pytest.fixture(scope="module")
def tiny() -> Built:
    return _build("tiny_mlp", model_zoo.tiny_mlp(), (1, 16), MeasureSettings(number=1, repeat=2, device_wait_s=120))


@pytest.fixture(scope="module")
def slow() -> Built:
    n = SLOW["n"]
    settings = MeasureSettings(number=1, repeat=1, session_timeout_s=60, device_wait_s=20)
    return _build("slow_matmul", model_zoo.slow_matmul(**SLOW), (n, n), settings)


@pytest.fixture
def farm2(tmp_path: Path) -> Iterator[LocalFarm]:
    """A tracker with two host boards, for tests that kill or restart things."""
    farm = LocalFarm.start(tmp_path / "farm", {"host": 2})
    yield farm
    farm.stop()


def _measure(b: Built, tracker: str, **kwargs) -> Run:
    settings = kwargs.pop("settings", None)
    job = replace(b.job, measure=settings) if settings else b.job
    return measure_job(MeasureRequest(job, b.build, b.artifact, b.inputs, b.reference, tracker, **kwargs))


def _in_thread(fn) -> tuple[threading.Thread, list]:
    box: list = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    return thread, box


def test_board_killed_mid_run_is_infra_and_retry_runs_on_another_board(
    farm2: LocalFarm, slow: Built, tiny: Built, store: ResultStore
) -> None:
    started = time.monotonic()
    thread, box = _in_thread(lambda: _measure(slow, farm2.tracker))
    victim = wait_until(lambda: board_in_session(farm2), 120, "a board to start the measurement")
    os.killpg(victim.pid, signal.SIGKILL)  # the agent and its session child, no warning
    thread.join(slow.job.measure.session_timeout_s)
    assert box, "the measurement did not return within the session deadline"
    run = box[0]
    assert run.status == "infra", run
    assert time.monotonic() - started < slow.job.measure.session_timeout_s
    victim_id = run.board_id
    assert victim_id and victim_id.endswith(f":{victim.port}")
    # The scheduler retries with the failed board in prefer_not: the retry lands on the other board.
    retry = _measure(tiny, farm2.tracker, attempt=2, prefer_not=frozenset({victim_id}))
    assert retry.status == "ok" and retry.board_id != victim_id, retry
    # The store marks the board that died suspect.
    _begin(store, tiny.job)
    store.record_run("s", replace(run, job_key=tiny.job.key), final=False)
    assert store.board_states()[victim_id] == "suspect"


def test_session_process_killed_mid_run_is_infra_and_the_board_keeps_serving(
    tmp_path: Path, slow: Built, tiny: Built
) -> None:
    # One board only: the next job must run on the board whose session died (a crashing kernel does the
    # same). TVM's server used to raise on the session's non-zero exit and take the whole agent down.
    farm = LocalFarm.start(tmp_path / "farm", {"host": 1})
    try:
        thread, box = _in_thread(lambda: _measure(slow, farm.tracker))
        board = wait_until(lambda: board_in_session(farm), 120, "the board to start the measurement")
        agent = psutil.Process(board.pid)
        sessions = wait_until(agent.children, 120, "the session process")
        for proc in sessions:
            proc.kill()
        thread.join(slow.job.measure.session_timeout_s)
        assert box and box[0].status == "infra", box
        assert agent.is_running() and agent.status() != psutil.STATUS_ZOMBIE, "the board agent died with its session"
        after = _measure(tiny, farm.tracker)
        assert after.status == "ok" and after.board_id == box[0].board_id, after
    finally:
        farm.stop()


def _begin(store: ResultStore, *jobs: Job) -> None:
    store.begin_sweep(
        "s",
        name="faults",
        label="",
        source="",
        source_path="",
        jobs=list(jobs),
        model_sizes={j.model.sha256: 1 for j in jobs},
        tvm_version="test",
    )


def test_kernel_past_session_timeout_is_timeout_and_board_recovers(
    local_farm: LocalFarm, slow: Built, tiny: Built
) -> None:
    settings = replace(slow.job.measure, session_timeout_s=1.5)
    started = time.monotonic()
    run = _measure(slow, local_farm.tracker, settings=settings)
    assert run.status == "timeout", run
    # The line names the sweep file's key, not TVM's "session_timeout" (no such key).
    assert "session_timeout_s = 1.5 s" in run.error and '"session_timeout"' not in run.error, run.error
    assert time.monotonic() - started < slow.job.measure.session_timeout_s  # 1.5 s applied, not the fixture's 60
    after = _measure(tiny, local_farm.tracker)
    assert after.status == "ok" and after.board_id == run.board_id, after


def test_an_error_at_or_past_the_session_deadline_is_the_deadline_whatever_it_says() -> None:
    from workers.board_session import classify

    # On a loaded machine a 1.5 s session can end mid-upload: the client sees a closed connection, not TVM's
    # timeout error. What decides is when it came (board_session.run_attempt measures from the connect).
    reset = ConnectionResetError("[Errno 104] Connection reset by peer")
    assert classify(reset, past_deadline=True) == "timeout"
    assert classify(reset) == "infra"  # before the deadline: the board or the network
    assert classify(RuntimeError("RPCSessionTimeoutError: session has expired")) == "timeout"


def test_key_with_no_board_fails_fast_and_never_blocks(local_farm: LocalFarm, tiny: Built) -> None:
    job = replace(tiny.job, target=replace(tiny.job.target, board_key="no-such-board"))
    started = time.monotonic()
    run = measure_job(
        MeasureRequest(
            replace(job, measure=replace(job.measure, device_wait_s=2)),
            tiny.build,
            tiny.artifact,
            tiny.inputs,
            tiny.reference,
            local_farm.tracker,
        )
    )
    elapsed = time.monotonic() - started
    assert run.status == "pending-device" and "'no-such-board'" in run.error and "farm list shows" in run.error, run
    # Waited for a registration until the 2 s deadline, not the fixture's 120 s (a busy machine adds seconds).
    assert 1.5 < elapsed < tiny.job.measure.device_wait_s, elapsed


def test_busy_key_is_device_unavailable_at_the_deadline(local_farm: LocalFarm, tiny: Built) -> None:
    held = request_session(local_farm.tracker, "host", 20, 60)  # the only board is now busy
    try:
        started = time.monotonic()
        run = _measure(tiny, local_farm.tracker, settings=replace(tiny.job.measure, device_wait_s=2))
        elapsed = time.monotonic() - started
    finally:
        del held
    assert run.status == "device-unavailable", run
    assert "'host'" in run.error and "within 2s" in run.error and "farm list shows {'host': 1}" in run.error
    assert 1.5 < elapsed < tiny.job.measure.device_wait_s, elapsed  # the 2 s deadline, not the fixture's 120 s


def test_tracker_restart_while_a_request_waits(farm2: LocalFarm, tiny: Built) -> None:
    """A request pending when the tracker restarts is asked again and served once boards re-register."""
    held = [request_session(farm2.tracker, "host", 20, 120) for _ in range(2)]  # both boards busy
    thread, box = _in_thread(
        lambda: _measure(tiny, farm2.tracker, settings=replace(tiny.job.measure, device_wait_s=60))
    )
    # The request is queued at the tracker (both boards are held) before the tracker goes away.
    wait_until(
        lambda: tracker_summary(farm2.tracker)["queue_info"].get("host", {}).get("pending", 0) >= 1,
        60,
        "the request to wait at the tracker",
    )
    farm2.restart_tracker()
    held.clear()  # sessions end: the boards notice the new tracker and register with it
    thread.join(60)
    assert box and box[0].status == "ok", box
    farm2.wait_for_boards(30)


def test_corrupted_artifact_is_never_uploaded(local_farm: LocalFarm, tiny: Built) -> None:
    bad = bytearray(tiny.artifact)
    bad[len(bad) // 2] ^= 0xFF
    run = measure_job(MeasureRequest(tiny.job, tiny.build, bytes(bad), tiny.inputs, tiny.reference, local_farm.tracker))
    assert run.status == "infra" and "sha256" in run.error and run.board_id is None, run


def test_failing_golden_model_quarantines_board_until_reset(
    farm2: LocalFarm, tiny: Built, store: ResultStore, tmp_path: Path, home: Path
) -> None:
    golden = build_golden(tiny.job, ArtifactCache(tmp_path / "cache"))
    assert isinstance(golden, GoldenModel)
    # Expected outputs no board produces: every health check fails, for real, on the board.
    broken = replace(golden, expected=tuple(e + 1.0 for e in golden.expected))
    _begin(store, tiny.job)
    first = _measure(tiny, farm2.tracker, golden=broken)
    assert first.status == "infra" and first.health == "failed" and "health check" in first.error, first
    victim = first.board_id
    store.record_run("s", first, final=False)
    for attempt in range(2, QUARANTINE_AFTER + 1):
        # Only the victim is offered: the other board is held busy.
        other = request_session(farm2.tracker, "host", 20, 120, avoid=frozenset({victim}))
        run = _measure(tiny, farm2.tracker, attempt=attempt, golden=broken)
        del other
        assert run.board_id == victim and run.health == "failed", run
        store.record_run("s", run, final=False)
    assert store.board_states()[victim] == "quarantined"
    # Quarantined boards are never used: the session lands elsewhere every time.
    quarantined = frozenset(b for b, s in store.board_states().items() if s == "quarantined")
    for _ in range(3):
        run = _measure(tiny, farm2.tracker, avoid=quarantined, golden=golden)
        assert run.status == "ok" and run.board_id != victim and run.health == "ok", run
    result = CliRunner().invoke(app, ["farm", "reset", victim, "--db", store.url])
    assert result.exit_code == 0 and victim in result.output, result.output
    assert store.board_states()[victim] == "ok"


def test_multi_output_model_is_not_mistaken_for_a_board_failure(local_farm: LocalFarm) -> None:
    """A tuple result over RPC used to come back opaque and end as `infra`, making healthy boards suspect."""
    two = _build("two_outputs", model_zoo.two_outputs(), (1, 8), MeasureSettings(number=1, repeat=1))
    run = _measure(two, local_farm.tracker)
    assert run.status == "ok" and run.max_abs_err is not None and run.max_abs_err < 1e-4, run
