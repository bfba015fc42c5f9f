"""Boards of a TVM release: a real tracker, real board agents under the real 0.26.0 toolchain's interpreter.

The 0.26.0 toolchain is the one tests/test_toolchains.py provisions and caches in ~/.cache/tvmbench-test
(TVMBENCH_TEST_CACHE overrides; provisioned here on the first run, ~2 min). What these tests pin down:
a board started from a toolchain registers under its release's key (``release_key``) and says which
runtime it serves; a board whose runtime is not its key's release never gets an artifact; the installed
TVM's RPC client measures a 0.26-built artifact on a 0.26 board (the RPC protocol of the two releases is
the same: checked by hand first, then here through the real runner); and ``farm up --tvm`` starts,
shows and stops such boards, on the host and on the emulated aarch64 board (its 0.26.0 root borrows the
userland of tests/conftest.py's arm64-emu root and adds that release's aarch64 wheels: ~15 s once, cached
next to it in ~/.cache/tvmbench). The module runs in about a minute on 2 cores once both are cached.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrator.farm import FarmError, LocalFarm, free_port, provision_board, stop_pid, wait_until
from orchestrator.farm.processes import _spawn
from orchestrator.health import build_golden
from orchestrator.plan import plan_jobs
from orchestrator.spec import parse_spec
from tests.conftest import ARM64_CACHE, QEMU_AARCH64, TOOLCHAIN_CACHE
from tvmbench.cli import app
from tvmbench.core.records import Build, Job
from workers.artifacts import ArtifactCache
from workers.board_session import board_runtime
from workers.executors.registry import measure_job
from workers.executors.requests import MeasureRequest
from workers.onnx_model import seeded_inputs
from workers.reference import reference_outputs
from workers.toolchains import provision, registry
from workers.toolchains.boards import installed_version, release_key
from workers.toolchains.build import build_in_toolchain, run_in_toolchain
from workers.toolchains.toolchain import Toolchain
from workers.tracker_client import registered_keys, request_session, tracker_summary

RELEASE = "0.26.0"
KEY026 = release_key("host", RELEASE)  # host-tvm0.26.0
LIAR = release_key("liar", RELEASE)  # an installed-TVM agent registered under a 0.26 key
runner = CliRunner()


@pytest.fixture(scope="module")
def tvm026() -> Iterator[Toolchain]:
    """TVM 0.26.0 from the test cache (provisioned there on the first run); TVMBENCH_HOME at the cache."""
    TOOLCHAIN_CACHE.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TVMBENCH_HOME", str(TOOLCHAIN_CACHE))
        provision.add(RELEASE)
        toolchain = registry.find(RELEASE)
        assert toolchain is not None and toolchain.tvm_version == RELEASE
        yield toolchain


@pytest.fixture(scope="module")
def farm026(tvm026: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    """A tracker, one host board of 0.26.0 (from its toolchain), and one installed-TVM board under a 0.26 key."""
    farm = LocalFarm.start(tmp_path_factory.mktemp("release-farm"), {"host": 1}, toolchains=[tvm026])
    try:
        farm.add_board(LIAR)  # no toolchain: this interpreter's TVM, whatever the key says
        yield farm
    finally:
        farm.stop()


@pytest.fixture(scope="module")
def built026(tvm026: Toolchain, models_dir: Path) -> tuple[Job, Build, bytes, dict[str, np.ndarray], list[np.ndarray]]:
    """tiny_cnn built by 0.26.0, its inputs, and the outputs 0.26.0's own runtime gives (run_in_toolchain)."""
    text = (
        "[[models]]\npath = 'tiny_cnn.onnx'\n[axes]\nexecutor = ['vm-bytecode']\nopt_level = [3]\n"
        "[measure]\nnumber = 2\nrepeat = 3\ndevice_wait_s = 20\n"
    )
    (job,) = plan_jobs(parse_spec(text, base=models_dir))
    build, artifact = build_in_toolchain(tvm026, job, (models_dir / "tiny_cnn.onnx").read_bytes())
    assert build.ok, build.error
    assert build.tvm_version == RELEASE and artifact is not None
    inputs = seeded_inputs(job.model.inputs, job.measure.seed)
    outputs, facts = run_in_toolchain(tvm026, artifact, inputs)
    assert facts["tvm_version"] == RELEASE
    return job, build, artifact, inputs, outputs


def on_key(job: Job, key: str) -> Job:
    """The job measured on boards of tracker key ``key`` (how a job of a release asks for its boards)."""
    return replace(job, target=replace(job.target, board_key=key))


def test_a_026_board_registers_under_its_release_key_and_reports_its_runtime(farm026: LocalFarm) -> None:
    assert KEY026 == "host-tvm0.26.0" and release_key("host", installed_version()) == "host"
    board = next(b for b in farm026.boards if b.key == KEY026)
    assert (board.tvm_version, board.toolchain) == (RELEASE, RELEASE)
    assert registered_keys(tracker_summary(farm026.tracker)) == {KEY026: 1, LIAR: 1}
    session = request_session(farm026.tracker, KEY026, deadline_s=120, session_timeout_s=30)
    try:
        assert board_runtime(session.remote) == {"tvm_version": RELEASE, "ffi_version": "0.1.14.post1"}
        facts = json.loads(session.remote.get_function("tvmbench.board_facts")())
        assert facts["tvm_version"] == RELEASE and facts["key"] == KEY026
    finally:
        del session


def test_a_board_whose_runtime_is_not_its_keys_release_never_gets_the_artifact(
    farm026: LocalFarm, built026: tuple, tmp_path: Path
) -> None:
    job, build, artifact, inputs, reference = built026
    golden = build_golden(job, ArtifactCache(tmp_path / "cache"))
    request = MeasureRequest(on_key(job, LIAR), build, artifact, inputs, reference, farm026.tracker, golden=golden)
    run = measure_job(request)
    # This 0.26 artifact would even load in 0.27 here: only the check stops it, before upload and golden model.
    assert run.status == "infra", run.error
    assert run.board_id.startswith(f"{LIAR}@127.0.0.1:")
    assert f"runs TVM {installed_version()}" in run.error and f"its key is for TVM {RELEASE}" in run.error
    assert run.board_id in run.error and "not uploaded" in run.error and "\n" not in run.error
    assert run.upload_s is None and run.upload_bytes is None and run.health is None


def test_the_installed_client_measures_a_026_artifact_on_the_026_board(farm026: LocalFarm, built026: tuple) -> None:
    job, build, artifact, inputs, reference = built026
    run = measure_job(MeasureRequest(on_key(job, KEY026), build, artifact, inputs, reference, farm026.tracker))
    assert run.status == "ok", run.error
    assert run.board_id.startswith(f"{KEY026}@127.0.0.1:")
    assert run.board_facts["tvm_version"] == RELEASE
    assert run.max_abs_err is not None and run.max_abs_err < 1e-5  # the board's outputs are run_in_toolchain's
    assert len(run.samples_ms) >= 3 and all(s > 0 for s in run.samples_ms)  # time_evaluator over RPC
    assert run.upload_bytes == len(artifact) and run.phases["first_inference"]["source"] == "board"


def test_the_golden_model_of_the_installed_release_is_not_run_on_a_026_board(
    farm026: LocalFarm, built026: tuple, tmp_path: Path
) -> None:
    job, build, artifact, inputs, reference = built026
    golden = build_golden(job, ArtifactCache(tmp_path / "cache"))
    assert golden is not None
    request = MeasureRequest(on_key(job, KEY026), build, artifact, inputs, reference, farm026.tracker, golden=golden)
    run = measure_job(request)
    assert run.status == "ok", run.error
    assert run.health is None  # not checked: its golden model is another release's artifact


def test_a_stock_rpc_server_is_taken_at_its_keys_word(farm026: LocalFarm, built026: tuple, tmp_path: Path) -> None:
    job, build, artifact, inputs, reference = built026
    key, port = release_key("stock", RELEASE), free_port()
    command = [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--port-end", str(port + 1), "--tracker", farm026.tracker, "--key", key]
    server = _spawn(command, tmp_path / "stock.log")
    try:
        wait_until(lambda: key in registered_keys(tracker_summary(farm026.tracker)), 60, f"stock server {key}")
        session = request_session(farm026.tracker, key, deadline_s=120, session_timeout_s=30)
        assert board_runtime(session.remote) is None  # a stock server cannot say what it runs
        del session
        run = measure_job(MeasureRequest(on_key(job, key), build, artifact, inputs, reference, farm026.tracker))
    finally:
        stop_pid(server.pid)
    # Its key says 0.26.0 and nothing says otherwise: the artifact goes to it (this 0.27 server happens to load it).
    assert run.status == "ok", run.error
    assert run.board_id.startswith(f"{key}@") and run.board_facts is None


@pytest.fixture
def release_home(home: Path, tvm026: Toolchain) -> Path:
    """A fresh TVMBENCH_HOME whose toolchains are the cached ones (a link: nothing is provisioned)."""
    (home / "toolchains").symlink_to(TOOLCHAIN_CACHE / "toolchains", target_is_directory=True)
    return home


def farm(*args: str) -> object:
    return runner.invoke(app, ["farm", *args], catch_exceptions=False)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_farm_up_tvm_starts_a_board_of_that_release_status_shows_it_down_stops_it(
    release_home: Path, tvm026: Toolchain
) -> None:
    boards: list[dict] = []  # what farm status showed: the processes farm down must stop
    up = farm("up", "--board", "host", "--tvm", RELEASE)
    try:
        assert up.exit_code == 0, up.output
        assert f"1 with key '{KEY026}'" in up.output
        boards = json.loads(farm("status", "--json").stdout)["boards"]
        (board,) = boards
        assert (board["key"], board["tvm"], board["toolchain"], board["running"]) == (KEY026, RELEASE, RELEASE, True)
        # The agent runs the toolchain's runtime and holds it: a remove is refused (checked first by the
        # lock's holders, so that a failure here never deletes the cached toolchain).
        assert board["pid"] in registry.lock_holders(registry.lock_file(tvm026.name))
        refused = runner.invoke(app, ["toolchains", "remove", RELEASE])
        assert refused.exit_code == 2 and "in use by process" in refused.output, refused.output
        assert str(board["pid"]) in refused.output.split("(")[0]  # among the holders (other tests' boards too)
        assert "`tvmbench farm down`" in refused.output and registry.find(RELEASE) is not None
        text = farm("status")
        assert text.exit_code == 0 and f"TVM {RELEASE}" in text.output and KEY026 in text.output
        listed = json.loads(farm("list", "--json").stdout)
        (row,) = listed["boards"]
        assert (row["key"], row["tvm"], row["release"]) == (KEY026, RELEASE, RELEASE)  # the agent said 0.26.0
        added = farm("add", "--tvm", RELEASE)
        assert added.exit_code == 0 and f"board {KEY026}@127.0.0.1:" in added.output, added.output
        boards = json.loads(farm("status", "--json").stdout)["boards"]
        assert [(b["key"], b["tvm"], b["running"]) for b in boards] == [(KEY026, RELEASE, True)] * 2
    finally:
        down = farm("down")
    assert down.exit_code == 0, down.output
    for b in boards:
        wait_until(lambda b=b: _gone(b["pid"]), 120, f"board process {b['pid']} to stop after farm down")
    assert not (release_home / "farm.json").exists()


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["--tvm", "9.9.9"], "`tvmbench toolchains add 9.9.9`"),
        (["--tvm", "0.26"], "--tvm 0.26: write 0.26.0, the pinned release it matches"),
        (["--tvm", ""], "--tvm '': give a TVM release"),
        (["--board", "host", "--tvm", "9.9.9"], "no toolchain of TVM 9.9.9 here"),
        (["--board", "arm64-emu", "--tvm", "9.9.9"], "`tvmbench toolchains add 9.9.9`"),
    ],
)
def test_farm_up_tvm_bad_input_is_one_line_exit_2(release_home: Path, args: list[str], culprit: str) -> None:
    result = farm("up", *args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and culprit in errors[0], result.output
    assert not (release_home / "farm.json").exists()  # nothing was started


ARM64_RELEASE_CACHE = ARM64_CACHE.parent / release_key("arm64-emu", RELEASE)  # next to the installed one's root


@pytest.fixture(scope="module")
def arm64_026_root(arm64_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An arm64-emu root with TVM 0.26.0's aarch64 wheels, its userland borrowed from the installed one's (once)."""
    log = tmp_path_factory.mktemp("provision") / "provision-026.log"
    try:
        return provision_board("arm64-emu", ARM64_RELEASE_CACHE, log=log, tvm_version=RELEASE, base_root=arm64_root)
    except FarmError as exc:
        pytest.fail(f"{exc} (full log: {log})", pytrace=False)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(QEMU_AARCH64) is None, reason=f"{QEMU_AARCH64} not installed")
def test_farm_up_arm64_emu_tvm_runs_that_release_on_aarch64_and_measures_its_cross_build(
    release_home: Path, arm64_026_root: Path, tvm026: Toolchain, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = release_key("arm64-emu", RELEASE)
    monkeypatch.setenv("TVMBENCH_BOARD_ROOT_ARM64_EMU_TVM0_26_0", str(arm64_026_root))
    stamp = (arm64_026_root / ".tvmbench-provisioned").read_text()
    assert f"apache-tvm[rpc]=={RELEASE} apache-tvm-ffi==0.1.14.post1" in stamp
    up = farm("up", "--boards", "0", "--board", "arm64-emu", "--tvm", RELEASE)
    try:
        assert up.exit_code == 0, up.output
        (board,) = json.loads(farm("status", "--json").stdout)["boards"]
        assert (board["key"], board["tvm"], board["running"]) == (key, RELEASE, True)
        text = (
            "[[models]]\npath = 'tiny_cnn.onnx'\n[[targets]]\npreset = 'arm64-emu'\n[measure]\nnumber = 1\nrepeat = 2\n"
        )
        (job,) = plan_jobs(parse_spec(text, base=models_dir))
        data = (models_dir / "tiny_cnn.onnx").read_bytes()
        build, artifact = build_in_toolchain(tvm026, job, data)
        assert build.ok and build.artifact_arch == "aarch64", build.error
        inputs = seeded_inputs(job.model.inputs, job.measure.seed)
        tracker = json.loads(farm("status", "--json").stdout)["tracker"]
        request = MeasureRequest(on_key(job, key), build, artifact, inputs, reference_outputs(data, inputs), tracker)
        run = measure_job(request)
        assert run.status == "ok", run.error
        assert run.board_facts["tvm_version"] == RELEASE and run.board_facts["arch"] == "aarch64"
        assert run.emulated and run.max_abs_err < 1e-4
    finally:
        down = farm("down")
    assert down.exit_code == 0, down.output
    wait_until(lambda: _gone(board["pid"]), 120, f"board process {board['pid']} to stop after farm down")
