"""A hostile user against the sweep's lifecycle, the scheduler and the farm (the engine room), fifth pass.

- A tracker killed mid-sweep: every job after the first waited ``device_wait_s`` again (a 30 s wait took 60-120 s
  and more, one wait per distinct program), although later jobs of a key found with no board do not wait; a
  stopped tracker (SIGSTOP) cost each later job the summary's 10 s.
- A board agent registered with the tracker but stopped (SIGSTOP): the kernel still accepts the connection on
  its port and TVM's rpc.connect waited for the handshake forever, so the sweep (and `farm list`) hung; one
  stopped mid-session never ended its session, and the client's RPC call waited forever. `farm status` said
  "running" of it.
- `sweep cancel` of a stopped driver marked the jobs itself; the driver, woken, measured them anyway and
  stored the sweep complete.
- `sweep resume` with a --db that does not exist created an empty database; a model gone since the sweep ran
  was answered with the parser's "give the path" advice; the summary line was cut at 200 columns in a pipe.
- The Python API: a ``pathlib.Path`` db refused, `plan` on a fresh machine raised, wrong types and ranges
  failed deep inside (or not at all: compare of a sweep with itself).

Real trackers and board agents on loopback where the behaviour needs them; a virtual clock or a socket that
never answers at the seams. No Ray, no timing assertions.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import onnx
import pytest

from db.store import ResultStore
from orchestrator.farm import wait_until
from orchestrator.plan import plan_jobs
from orchestrator.scheduling.measurements import FixedBoards
from tests.conftest import one_error_line, write_sweep
from tests.test_hostile_user import invoke
from tests.test_scheduler_rules import FakeBuilder, make_spec, model_ref, runs_of, sweep
from tvmbench.core.records import Job, MeasureSettings, Run, TargetSpec
from workers import model_zoo, tracker_client
from workers.board_session import SessionRunner, acquire_board
from workers.executors.requests import MeasureRequest
from workers.tracker_client import BoardNotAnswering, TrackerUnreachable, connect_bounded, request_session

WAIT_S = 60.0  # the most a real tracker or board here may take to start on a busy machine


class VirtualClock:
    """``time`` as the tracker client sees it: sleeping advances the clock at once; calls are counted."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.summaries = 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def time(self) -> float:
        return self.now


@pytest.fixture
def dead_tracker(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """A tracker that refuses every connection (killed mid-sweep), under a virtual clock: no real wait."""
    clock = VirtualClock()

    def refused(tracker: str, timeout_s: float = 10.0) -> Any:
        clock.summaries += 1
        if clock.summaries > 10_000:  # the old loop polled until its deadline: a bound, not a hang
            raise AssertionError("still polling a dead tracker")
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(tracker_client, "time", clock)
    monkeypatch.setattr(tracker_client, "tracker_summary", refused)
    return clock


def test_a_request_told_not_to_wait_does_not_poll_a_dead_tracker(dead_tracker: VirtualClock) -> None:
    """``registration_wait_s = 0`` (the key was already found without a board or tracker) ends at the first refusal."""
    with pytest.raises(TrackerUnreachable):
        request_session("127.0.0.1:9", "host", deadline_s=30.0, session_timeout_s=5, registration_wait_s=0.0)
    assert dead_tracker.summaries == 1 and dead_tracker.now == 1000.0


def test_a_request_still_waits_its_deadline_for_a_tracker_that_restarts(dead_tracker: VirtualClock) -> None:
    """The first request of a key keeps polling until its deadline (a restarting tracker comes back)."""
    with pytest.raises(TrackerUnreachable):
        request_session("127.0.0.1:9", "host", deadline_s=30.0, session_timeout_s=5)
    assert dead_tracker.summaries > 1 and 1030.0 <= dead_tracker.now <= 1031.0


class DeadTrackerRunner(SessionRunner):
    """The real board session (artifact check, board request, the job's wait) against the dead tracker."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.waited: list[float] = []  # virtual seconds each attempt spent asking for a board

    def run(self, request: MeasureRequest) -> Run:
        started = self.clock.now
        run = super().run(request)
        self.waited.append(self.clock.now - started)
        return run

    def on_board(self, session: Any, request: MeasureRequest, base: dict[str, Any]) -> Run:
        raise AssertionError("no board can be reached")


def test_a_sweep_whose_tracker_died_waits_device_wait_s_once_per_key(
    tmp_path: Path, store: ResultStore, dead_tracker: VirtualClock
) -> None:
    """Four distinct programs on one key: the first job waits ``device_wait_s`` (30 s), the others none; every
    job ends pending-device naming the tracker. Before, each waited its own 30 s (120 s for the sweep)."""
    spec = make_spec(tmp_path, ("k",), opt_levels=(0, 1, 2, 3))
    spec = replace(spec, measure=replace(spec.measure, device_wait_s=30.0))
    runner = DeadTrackerRunner(dead_tracker)
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), runner, boards=FixedBoards(per_key={"k": 1}))
    assert dict(outcome.statuses) == {"pending-device": 4}, outcome
    assert len(runner.waited) == 4 and 29.0 <= runner.waited[0] <= 31.0, runner.waited
    assert runner.waited[1:] == [0.0, 0.0, 0.0], runner.waited
    statuses = [r[2] for r in runs_of(store, spec.sweep_id)]
    assert statuses == ["pending-device"] * 4 and len(plan_jobs(spec)) == 4


# --- a board that is registered but answers nothing ----------------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose listening socket accepts connections (the kernel does) and never answers: a stopped board."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_a_handshake_that_never_comes_is_board_not_answering_and_frees_the_thread(silent_port: int) -> None:
    from tvm import rpc

    board = f"host@127.0.0.1:{silent_port}"
    before = {t.ident for t in threading.enumerate()}
    with pytest.raises(BoardNotAnswering) as caught:
        connect_bounded(
            lambda: rpc.connect("127.0.0.1", silent_port, "client:x", 5), "127.0.0.1", silent_port, board, 0.5
        )
    assert caught.value.board_id == board and board in str(caught.value), caught.value
    # The socket it opened was shut down, so TVM's wait ends and its thread with it: nothing left blocked.
    wait_until(lambda: not [t for t in threading.enumerate() if t.ident not in before], WAIT_S, "the connect thread")


def test_a_connect_that_answers_returns_its_value_and_raises_its_error() -> None:
    assert connect_bounded(lambda: "session", "127.0.0.1", 1, "host@127.0.0.1:1", 5.0) == "session"
    with pytest.raises(ValueError, match="refused"):
        connect_bounded(lambda: (_ for _ in ()).throw(ValueError("refused")), "127.0.0.1", 1, "b", 5.0)


@pytest.fixture
def frozen_farm(home: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """`farm up --key frozen` (a real tracker and board agent): (the board's id, farm.json). Whatever a test
    stopped of the board's processes is woken (SIGCONT) before `farm down`."""
    import psutil

    up = invoke("farm", "up", "--key", "frozen")
    assert up.exit_code == 0, up.output
    state = json.loads((home / "farm.json").read_text())
    (board,) = state["boards"]
    agent = psutil.Process(board["pid"])
    try:
        yield f"frozen@127.0.0.1:{board['port']}", state
    finally:
        for proc in [agent, *agent.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGCONT)
        down = invoke("farm", "down")
        assert down.exit_code == 0, down.output


def stop_tree(pid: int) -> None:
    """SIGSTOP a board agent and the session processes it forked (what Ctrl-Z does to a board in a terminal)."""
    import psutil

    agent = psutil.Process(pid)
    for proc in [agent, *agent.children(recursive=True)]:
        proc.send_signal(signal.SIGSTOP)


@pytest.fixture
def stopped_board(frozen_farm: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The frozen farm's board stopped (SIGSTOP) once registered."""
    stop_tree(frozen_farm[1]["boards"][0]["pid"])
    return frozen_farm


def test_a_stopped_board_ends_the_attempt_as_infra_naming_it(
    stopped_board: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the request hung in rpc.connect forever (the sweep with it). Now the attempt is ``infra`` on that
    board (the scheduler retries it on another and the store marks it suspect), saying what to do."""
    board, state = stopped_board
    monkeypatch.setattr(tracker_client, "HANDSHAKE_S", 0.5)
    job = Job(
        model=model_ref(),
        target=TargetSpec("frozen", {"kind": "llvm"}, "frozen", "x86_64"),
        executor="vm-bytecode",
        opt_level=2,
        pipeline="per-target",
        measure=MeasureSettings(device_wait_s=WAIT_S),
    )
    run = acquire_board(job, state["tracker"], {"job_key": job.key, "attempt": 1}, deadline_s=WAIT_S)
    assert isinstance(run, Run) and run.status == "infra" and run.board_id == board, run
    assert "did not answer the RPC handshake" in run.error and "restart that board agent" in run.error, run.error
    # `farm status` said "running" of it: it names the stopped process and how to wake it, exit 1.
    pid = state["boards"][0]["pid"]
    line = one_error_line(invoke("farm", "status"), exit_code=1)
    assert f"stopped (SIGSTOP, Ctrl-Z or a debugger: pid {pid})" in line and f"kill -CONT {pid}" in line, line
    status = invoke("farm", "status", "--json")
    assert json.loads(status.stdout)["boards"][0]["process"] == "stopped", status.stdout


# --- the sweep's last line in a pipe ----------------------------------------------------------------------


def test_the_summary_line_of_sweep_run_stays_one_line_in_a_pipe(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed sweep's summary (codegen skipped, jobs skipped, shared measurements) runs past 200 characters:
    in a pipe it was cut into two lines at the console's 200 columns ("... already had results and\\nwere
    skipped"), which breaks `grep`/`tail -1`. The sweep itself is stood in for: what is printed is the point."""
    from orchestrator import scheduler
    from orchestrator.scheduling.events import SweepOutcome
    from tvmbench.cli.common import console as cli_console

    spec_file = write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n')
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")

    def finished(spec: Any, store: ResultStore, *args: Any, **kwargs: Any) -> SweepOutcome:
        store.begin_sweep(spec.sweep_id, name=spec.name, label="", source="", source_path="", jobs=[],
                          model_sizes={}, tvm_version="0")  # fmt: skip
        outcome = SweepOutcome(spec.sweep_id, new=False, jobs=12, already_final=10, built=2, codegen_skipped=1)
        outcome.equivalent, outcome.statuses = 1, Counter(ok=12)
        return outcome

    monkeypatch.setattr(scheduler, "execute_sweep", finished)
    monkeypatch.setattr(cli_console, "width", 200)  # what a pipe gets (tvmbench/cli/common.py), whatever pytest's
    result = invoke("sweep", "run", str(spec_file), "--db", str(tmp_path / "r.db"))
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("sweep ") and len(last) > 200, result.output
    assert last.endswith("1 job(s) built a program identical to another's and share its measurement"), last


# --- resume: another --db, a model gone --------------------------------------------------------------------


def test_resume_with_a_db_that_lacks_the_sweep_creates_no_database(tmp_path: Path, home: Path) -> None:
    """`sweep resume ID --db other.db` (a typo, the wrong machine's path) said the sweep is not there but
    left an empty other.db behind; a read command does not create one, and neither does this now."""
    target = tmp_path / "other.db"
    line = one_error_line(invoke("sweep", "resume", "0123abcd", "--db", str(target)), exit_code=2)
    assert "no sweep '0123abcd'" in line and f"{target} (no such file)" in line, line
    assert not list(tmp_path.glob("other.db*")), list(tmp_path.iterdir())


def test_resume_of_a_sweep_whose_model_is_gone_says_to_restore_it(tmp_path: Path, store: ResultStore) -> None:
    """The parser's advice ("give the path of a .onnx file") cannot be followed for a stored plan: the line
    says to restore the file, or to run a sweep file as it is now."""
    from types import SimpleNamespace

    from orchestrator.resume import resume_spec
    from orchestrator.spec import SpecError

    text = '[[models]]\npath = "gone.onnx"\n'
    sweep_row = SimpleNamespace(id="abc", source=text, source_path=str(tmp_path / "s.toml"), label="")
    with pytest.raises(SpecError) as caught:
        resume_spec(store, sweep_row)
    message = str(caught.value)
    assert "gone.onnx" in message and "restore that file where it was" in message, message
    assert "`tvmbench sweep run FILE`" in message, message


# --- the Python API given the wrong types ------------------------------------------------------------------


def test_the_api_takes_a_path_object_for_db_and_plans_on_a_fresh_machine(tmp_path: Path, home: Path) -> None:
    """``tvmbench.open(Path(...))`` was "PosixPath(...) is not a database URL"; ``tvmbench.plan`` with no
    database yet raised "no results database ... run a sweep first" where `sweep plan` plans with nothing cached."""
    import tvmbench
    from tests.test_store_backends import begin

    db = tmp_path / "r.db"
    begin(ResultStore(str(db)), "abcdef123456")
    with tvmbench.open(db) as results:
        assert list(results.sweeps()["sweep_id"]) == ["abcdef123456"]
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    planned = tvmbench.plan(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n'))
    assert len(planned) >= 1 and not list(home.glob("*.db*")), list(home.iterdir())
    assert len(tvmbench.plan(tmp_path / "sweep.toml", db=db)) == len(planned)


def test_the_api_refuses_wrong_types_and_ranges_before_anything_starts(tmp_path: Path, home: Path) -> None:
    """Each was an AttributeError or numpy's words from deep inside (an int tracker, a progress that is no
    function once builds ran, confidence 2, a sweep compared with itself answered as ratio 1 everywhere)."""
    import tvmbench
    from tests.test_store_backends import begin
    from tvmbench.answers.query import QueryError

    sweep_file = tmp_path / "none.toml"  # never read: the types are checked first
    with pytest.raises(TypeError, match="tracker must be a 'HOST:PORT' string, not int 9190"):
        tvmbench.run(sweep_file, tracker=9190)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="progress must be a function"):
        tvmbench.run(sweep_file, progress=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="db must be a database URL or a SQLite file's path"):
        tvmbench.open(5)  # type: ignore[arg-type]
    db = tmp_path / "r.db"
    begin(ResultStore(str(db)), "abcdef123456")
    with tvmbench.open(db) as results:
        with pytest.raises(ValueError, match="confidence 2: must be above 0 and below 1"):
            results.best(confidence=2)
        with pytest.raises(ValueError, match="lookback 0: must be at least 3"):
            results.history("abc", lookback=0)
        with pytest.raises(ValueError, match="since = 'yesterday' is no date"):
            results.query(since="yesterday")
        with pytest.raises(QueryError, match="on both sides: give two different sweeps"):
            results.compare("abcdef", "abcdef123456")


# --- cancel while the driver is stopped ----------------------------------------------------------------------


def test_a_driver_woken_after_sweep_cancel_marked_its_jobs_stops_there(
    tmp_path: Path, store: ResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sweep cancel` of a stopped driver (SIGSTOP, Ctrl-Z) waits, then marks the jobs itself. The driver,
    woken (SIGCONT), only looked for "cancelling": it measured the cancelled jobs, printed "12 jobs (12 ok)",
    exit 0, and stored the sweep as complete. Now it stops at once and counts them cancelled."""
    from orchestrator.scheduling import sweep as loop
    from orchestrator.submit import CANCEL_REASON
    from tests.test_scheduler_rules import FakeRunner

    monkeypatch.setattr(loop, "CANCEL_POLL_S", 0.0)
    spec = make_spec(tmp_path, ("k",) * 6)

    def cancelled_meanwhile(job: Job, attempt: int, board: str) -> str:
        if len(runner.calls) == 2:  # what cancel_local does once its wait for the driver ran out
            store.request_cancel(spec.sweep_id)
            store.cancel_pending_jobs(spec.sweep_id, CANCEL_REASON)
        return "ok"

    runner = FakeRunner(outcome=cancelled_meanwhile)
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), runner, boards=FixedBoards(per_key={"k": 1}))
    assert len(runner.calls) == 2, runner.calls
    assert store.get_sweep(spec.sweep_id).status == "cancelled"
    # The second job's measurement was under way when its row was marked: its result does not replace that.
    assert Counter(store.job_statuses(spec.sweep_id).values()) == Counter({"ok": 1, "cancelled": 5})
    assert outcome.statuses == Counter({"ok": 2, "cancelled": 4}), outcome.statuses


def test_a_request_told_not_to_wait_gives_a_silent_tracker_a_short_look(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped tracker (SIGSTOP) takes connections and never answers: each job after the first spent the
    summary's full 10 s finding that out again. With ``registration_wait_s = 0`` the look is LAST_LOOK_S."""
    asked: list[float] = []

    def silent(tracker: str, timeout_s: float = 10.0) -> Any:
        asked.append(timeout_s)
        raise TimeoutError("timed out")

    monkeypatch.setattr(tracker_client, "tracker_summary", silent)
    with pytest.raises(TrackerUnreachable):
        request_session("127.0.0.1:9", "host", deadline_s=30.0, session_timeout_s=5, registration_wait_s=0.0)
    assert asked == [tracker_client.LAST_LOOK_S], asked


class StopsTheBoard(SessionRunner):
    """On the board: stop the board's processes (SIGSTOP), then ask it something, as a measurement would."""

    checks_arch = False

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def on_board(self, session: Any, request: MeasureRequest, base: dict[str, Any]) -> Run:
        stop_tree(self.pid)
        session.remote.get_function("tvmbench.board_facts")()  # never answered: the board is stopped
        raise AssertionError("a stopped board answered")


def test_a_board_stopped_mid_session_ends_the_attempt_as_infra(
    frozen_farm: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A board stopped (SIGSTOP) mid-measurement never ends its session at session_timeout_s, and the client's
    RPC call waited for it forever: the sweep hung. Now the client ends the session SESSION_GRACE_S later."""
    import hashlib

    from tvmbench.core.records import Build

    board, state = frozen_farm
    monkeypatch.setattr(tracker_client, "SESSION_GRACE_S", 0.5)
    job = Job(
        model=model_ref(),
        target=TargetSpec("frozen", {"kind": "llvm"}, "frozen", "x86_64"),
        executor="vm-bytecode",
        opt_level=2,
        pipeline="per-target",
        measure=MeasureSettings(device_wait_s=WAIT_S, session_timeout_s=1.0),
    )
    build = Build(build_key="b", status="ok", artifact_sha256=hashlib.sha256(b"x").hexdigest())
    request = MeasureRequest(job, build, b"x", {}, [], state["tracker"])
    run = StopsTheBoard(state["boards"][0]["pid"]).run(request)
    assert run.status == "infra" and run.board_id == board, run
    assert f"{board} stopped answering" in run.error and "kill -CONT" in run.error, run.error


def test_farm_list_names_a_stopped_free_board_and_does_not_wait_for_it(
    stopped_board: tuple[str, dict[str, Any]],
) -> None:
    """`farm list` asks each free board for its facts; a stopped one (still registered, still free in the
    tracker's queue) took the connection and TVM waited for its handshake forever. Now it is "not answering"."""
    board, _ = stopped_board
    listed = invoke("farm", "list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = {row["board"]: row for row in json.loads(listed.stdout)["boards"]}
    assert rows[board]["state"] == "not answering", rows
