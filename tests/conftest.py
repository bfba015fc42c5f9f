"""Shared fixtures: real Ray, a real TVM RPC tracker with real board agents, real databases."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest

# A suite started in the background by a non-interactive shell (`pytest ... &`, nohup, some CI runners)
# inherits Ctrl-C ignored, and so would every CLI the tests start: a test that presses Ctrl-C would see the
# command finish with exit 0. A terminal's user has it on; so do the tests (a Python handler is reset to
# the default at exec, an ignored signal stays ignored).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A local Ray instance listens on loopback only with this set (see shared notes on Ray).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from db.store import ResultStore
from orchestrator.farm import FarmError, LocalFarm, free_port, provision_board, stop_pid, wait_until
from workers import model_zoo
from workers.tracker_client import registered_keys, tracker_summary


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TVMBENCH_HOME (database, artifact cache, farm state) for one test."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("TVMBENCH_HOME", str(path))
    monkeypatch.delenv("TVMBENCH_DB", raising=False)
    monkeypatch.delenv("TVMBENCH_TRACKER", raising=False)
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultStore]:
    s = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    yield s
    s.close()


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model zoo written as .onnx files: tiny_cnn, tiny_mlp, two_outputs."""
    path = tmp_path_factory.mktemp("models")
    for name in ("tiny_cnn", "tiny_mlp", "two_outputs"):
        onnx.save(getattr(model_zoo, name)(), path / f"{name}.onnx")
    return path


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """One local Ray instance for the whole test session (starting one takes seconds)."""
    from orchestrator.local_ray import stop_local_ray
    from orchestrator.scheduler import ensure_ray

    ensure_ray(num_cpus=2)
    yield
    stop_local_ray()


ARM64_CACHE = Path(os.environ.get("TVMBENCH_ARM64_CACHE", Path.home() / ".cache" / "tvmbench" / "arm64-emu"))
QEMU_AARCH64 = "qemu-aarch64-static"


def provisioned_arm64_root(cache: Path, log: Path) -> Path:
    """The arm64-emu board root at ``cache``, provisioned now if it is not (once: it is reused after).

    Skips only where this machine cannot emulate aarch64 at all (no qemu-aarch64-static). Anything else
    that stops provisioning (no debootstrap, no mirror, a full disk) fails the test that needs the board:
    a feature's tests must not vanish from CI because its board was never set up.
    """
    if shutil.which(QEMU_AARCH64) is None:
        pytest.skip(f"{QEMU_AARCH64} not installed (apt-get install qemu-user-static; scripts/setup.sh --system)")
    try:
        return provision_board("arm64-emu", cache, log=log)
    except FarmError as exc:
        pytest.fail(f"{exc} (full log: {log})", pytrace=False)


@pytest.fixture(scope="session")
def arm64_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A provisioned arm64-emu root in TVMBENCH_ARM64_CACHE (default ~/.cache/tvmbench/arm64-emu), shared by
    every test of the session that runs the emulated aarch64 board, and by later sessions."""
    return provisioned_arm64_root(ARM64_CACHE, tmp_path_factory.mktemp("provision") / "provision.log")


@pytest.fixture(scope="session")
def local_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    """A real tracker and one real "host" board agent on free loopback ports."""
    farm = LocalFarm.start(tmp_path_factory.mktemp("farm-logs"), {"host": 1})
    yield farm
    farm.stop()


def _exited(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # already reaped, or not ours
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return waited == pid


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


REREGISTER_S = 15.0


def _revive(farm: LocalFarm) -> list[str]:
    """Start again the tracker or boards of ``farm`` that died; what died, with its log's tail."""
    logs = Path(farm.log_dir)
    casualties = []
    if _exited(farm.tracker_pid):
        casualties.append(f"the tracker died; its log:\n{_log_tail(logs / 'tracker.log')}")
        farm.restart_tracker()
    for board in list(farm.boards):
        if _exited(board.pid):
            log = logs / f"board-{board.key}-{board.port}.log"
            casualties.append(f"board {board.key}@{board.port} died; its log:\n{_log_tail(log)}")
            farm.boards.remove(board)
            farm.add_board(board.key)
    try:  # alive but gone from the tracker (a board re-registers within seconds of a tracker restart)
        farm.wait_for_boards(REREGISTER_S)
    except FarmError as exc:
        casualties.append(f"a board is alive but not registered: {exc}")
        for board in list(farm.boards):
            stop_pid(board.pid)
            farm.boards.remove(board)
            farm.add_board(board.key)
    return casualties


@pytest.fixture(autouse=True)
def _host_fence_left_clean() -> Iterator[None]:
    """After each test, drop the holds left on this machine's fence actor, which lives for the whole session.

    A build that a test kills or abandons (a cancel, a crash, a driver stopped mid-sweep) never releases
    its hold, and the hold's time-to-live is 30 minutes: every later test's timings on the host waited for
    it (a tuned test hung 20 minutes in CI). Each test starts with a free fence, as each sweep process does.
    """
    yield
    ray = sys.modules.get("ray")  # never imported here: tests that must not import Ray stay without it
    if ray is None or not ray.is_initialized():
        return
    from workers.fence import _FENCES, reset_fence

    for host in list(_FENCES):
        reset_fence(host)


@pytest.fixture(autouse=True)
def _local_farm_survives(request: pytest.FixtureRequest) -> Iterator[None]:
    """Around a test that uses the shared farm: if its tracker or a board died, fail the test it died in
    with the logs and start the dead parts again, so one casualty does not fail every later test as
    "pending-device". A death noticed only at the next test's start (it happened as the last test
    ended) is revived with a warning."""
    if "local_farm" not in request.fixturenames:
        yield
        return
    farm: LocalFarm = request.getfixturevalue("local_farm")
    for casualty in _revive(farm):
        warnings.warn(f"the shared local farm was revived before {request.node.name}: {casualty}", stacklevel=1)
    yield
    casualties = _revive(farm)
    if casualties:
        pytest.fail("the shared local farm lost a process during this test:\n" + "\n".join(casualties))


@pytest.fixture
def stock_board(local_farm: LocalFarm, tmp_path: Path) -> Iterator[str]:
    """A stock `python -m tvm.exec.rpc_server` (no tvmbench functions) registered under key "stock"."""
    port = free_port()
    with open(tmp_path / "stock.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tvm.exec.rpc_server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--port-end",
                str(port + 1),
                "--tracker",
                local_farm.tracker,
                "--key",
                "stock",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_until(lambda: "stock" in registered_keys(tracker_summary(local_farm.tracker)), 60, "the stock server")
        yield "stock"
    finally:
        stop_pid(proc.pid)


def write_sweep(directory: Path, text: str, name: str = "sweep.toml") -> Path:
    """Write a sweep file into ``directory`` and return its path."""
    path = directory / name
    path.write_text(text)
    return path


# The PostgreSQL server the machine runs (CI starts it): trust auth on loopback. Override the admin URL
# with TVMBENCH_TEST_PG (a database the tests may CREATE DATABASE from).
PG_ADMIN_URLS = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
    "postgresql+psycopg://root@127.0.0.1:5432/test",
)


def lowered_and_output(proto: onnx.ModelProto, pipeline: str, x: Any, layout: str = "NCHW") -> tuple[Any, Any]:
    """The module ``pipeline`` lowers ``proto`` to in ``layout`` (for llvm, opt_level 3), as the build does
    (the pipeline's rewrites, the layout, TVM's passes), and its output on ``x``."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from workers.executors.relax_vm import pipeline_passes
    from workers.layouts import convert
    from workers.rewrites import rewrite_passes

    target = tvm.target.Target({"kind": "llvm"})
    with target, tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential(rewrite_passes(pipeline))(from_onnx(proto, keep_params_in_input=False))
        lowered = pipeline_passes(pipeline, target)(convert(mod, layout)[0])
        vm = relax.VirtualMachine(relax.build(lowered, target), tvm.cpu())
    return lowered, vm["main"](tvm.runtime.tensor(x)).numpy()


def _pg_admin_engine():
    from sqlalchemy import create_engine, text

    candidates = [os.environ["TVMBENCH_TEST_PG"]] if os.environ.get("TVMBENCH_TEST_PG") else list(PG_ADMIN_URLS)
    errors = []
    for url in candidates:
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return engine
        except Exception as exc:
            errors.append(f"{url}: {str(exc).splitlines()[0]}")
            engine.dispose()
    pytest.fail(
        "PostgreSQL at 127.0.0.1:5432 is not reachable (" + "; ".join(errors) + "); start it, point "
        'TVMBENCH_TEST_PG at a server, or deselect these tests with -m "not postgres"'
    )


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test (CREATEd with a unique name, DROPped afterwards)."""
    import uuid

    from sqlalchemy import text

    admin = _pg_admin_engine()
    name = f"tvmbench_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            # FORCE ends sessions a failed test left open (PostgreSQL 13+).
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty results database, once per backend: SQLite and PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("pg_url")


# Toolchains (TVM releases in venvs of their own) for tests, kept between runs: only the first provisions.
TOOLCHAIN_CACHE = Path(os.environ.get("TVMBENCH_TEST_CACHE", Path.home() / ".cache" / "tvmbench-test"))


@pytest.fixture(scope="module")
def cached_home() -> Iterator[Path]:
    """TVMBENCH_HOME at the toolchain test cache, for one module (the toolchains there outlive the run)."""
    TOOLCHAIN_CACHE.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TVMBENCH_HOME", str(TOOLCHAIN_CACHE))
        patch.delenv("TVMBENCH_DB", raising=False)
        patch.delenv("TVMBENCH_TRACKER", raising=False)
        yield TOOLCHAIN_CACHE


def one_error_line(result: Any, exit_code: int = 2) -> str:
    """The single 'error: ...' line of a failed command, whatever progress notes came before it."""
    assert result.exit_code == exit_code, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def linked_venv_copy(python: str, folder: Path) -> Path:
    """A hard-linked copy of the venv of ``python`` at ``folder`` (cheap, and what a test breaks in it leaves
    the cached venv whole); returns the copy's python."""
    subprocess.run(["cp", "-al", str(Path(python).parents[1]), str(folder)], check=True)
    return folder / "bin" / "python"
