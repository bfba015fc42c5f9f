"""Measurement through a real TVM RPC tracker and a real board agent on loopback."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from orchestrator.farm import LocalFarm
from orchestrator.farm.local import _board_log_name
from orchestrator.plan import plan_jobs
from orchestrator.spec import parse_spec
from workers import board_state
from workers.executors.registry import build_job, measure_job
from workers.executors.requests import BuildRequest, MeasureRequest
from workers.onnx_model import seeded_inputs
from workers.reference import reference_outputs
from workers.tracker_client import request_session


@pytest.fixture(scope="module")
def built(models_dir: Path):
    text = "[[models]]\npath = 'two_outputs.onnx'\n[measure]\nnumber = 2\nrepeat = 4\ndevice_wait_s = 2\n"
    job = plan_jobs(parse_spec(text, base=models_dir))[0]
    data = (models_dir / "two_outputs.onnx").read_bytes()
    build, lib = build_job(BuildRequest(job, data))
    assert build.ok, build.error
    inputs = seeded_inputs(job.model.inputs, job.measure.seed)
    return job, build, lib, inputs, reference_outputs(data, inputs)


def test_ok_run_checks_outputs_and_keeps_every_sample(built, local_farm: LocalFarm) -> None:
    job, build, lib, inputs, reference = built
    run = measure_job(MeasureRequest(job, build, lib, inputs, reference, local_farm.tracker))
    assert run.status == "ok", run.error
    assert len(run.samples_ms) == 4 and all(s > 0 for s in run.samples_ms)
    assert run.min_ms <= run.median_ms <= run.max_ms
    assert run.median_ms == pytest.approx(float(np.median(run.samples_ms)))
    assert run.max_abs_err < 1e-5
    assert run.board_id.startswith(f"host@127.0.0.1:{local_farm.boards[0].port}")
    assert run.board_facts["arch"] and run.board_facts["tvm_version"] == "0.27.0.post1"
    assert run.load_avg_1m is not None
    # Timed on every core: TVM's own default (half the logical CPUs on x86-64) ran one thread of two here.
    assert run.board_facts["runtime_threads"] == board_state.physical_cores()
    assert run.board_facts["runtime_threads_from"] == "cores"


def test_a_session_runs_tvm_on_one_thread_per_core(local_farm: LocalFarm) -> None:
    session = request_session(local_farm.tracker, "host", deadline_s=60, session_timeout_s=30)
    try:
        threads = session.remote.get_function("runtime.NumThreads")()
    finally:
        del session
    assert threads == board_state.physical_cores()
    board = local_farm.boards[0]
    log = Path(local_farm.log_dir) / _board_log_name(board.key, board.port)
    assert f"runtime_threads={threads} (cores)" in log.read_text()  # what a user reading the log sees


def test_wrong_output_is_wrong_result_not_a_latency(built, local_farm: LocalFarm) -> None:
    job, build, lib, inputs, reference = built
    skewed = [reference[0] + 0.5, reference[1]]
    run = measure_job(MeasureRequest(job, build, lib, inputs, skewed, local_farm.tracker))
    assert run.status == "wrong-result"
    assert "output 0" in run.error and run.max_abs_err == pytest.approx(0.5, rel=1e-3)
    assert run.median_ms is None and run.samples_ms == ()


def test_unknown_key_is_pending_device_at_once(built, local_farm: LocalFarm) -> None:
    job, build, lib, inputs, reference = built
    job = replace(job, target=replace(job.target, board_key="no-such-board"))
    run = measure_job(MeasureRequest(job, build, lib, inputs, reference, local_farm.tracker))
    assert run.status == "pending-device"
    assert "no-such-board" in run.error and "host" in run.error


def test_busy_key_gives_device_unavailable_at_the_deadline(built, local_farm: LocalFarm) -> None:
    job, build, lib, inputs, reference = built
    held = request_session(local_farm.tracker, "host", deadline_s=30, session_timeout_s=60)
    try:
        run = measure_job(MeasureRequest(job, build, lib, inputs, reference, local_farm.tracker))
    finally:
        del held
    assert run.status == "device-unavailable"
    assert "'host'" in run.error and "within 2s" in run.error
    # Bound by what it must not wait for (the held session's 60 s), not by how fast a busy machine polls.
    assert run.finished_at - run.started_at < 60
