"""The tuning runner's board sessions: one session serves a batch of candidates, and is closed after it.

Real candidates (a TIR kernel built by the builder's own ``compile_candidate``), a real tracker and host
board agent on loopback; no Ray (no fence host) and no search.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.farm import LocalFarm, wait_until
from workers import tracker_client
from workers.tuning.builder import _artifact, compile_candidate
from workers.tuning.runner import FarmRunner, FarmRunnerConfig


@pytest.fixture(scope="module")
def candidate() -> tuple[str, list[Any]]:
    """(artifact path, args info) of a small real kernel: B = A * 2 over 4096 floats."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    a = te.placeholder((4096,), name="A")
    b = te.compute((4096,), lambda i: a[i] * 2.0, name="B")
    func = te.create_prim_func([a, b]).with_attr("global_symbol", "main")
    data = compile_candidate(tvm.ir.save_json(tvm.IRModule({"main": func})), "llvm", None, None)
    return str(_artifact(data).artifact_path), ArgInfo.from_prim_func(func)


@pytest.fixture
def sessions_opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The board of every session the runner asks the tracker for (the real request, counted)."""
    opened: list[str] = []
    real = tracker_client.request_session

    def counted(*args: Any, **kwargs: Any) -> Any:
        session = real(*args, **kwargs)
        opened.append(session.board_id)
        return session

    monkeypatch.setattr(tracker_client, "request_session", counted)
    yield opened


def _run(runner: FarmRunner, candidate: tuple[str, list[Any]], n: int) -> list[Any]:
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    path, args_info = candidate
    futures = runner.run([RunnerInput(path, "cpu", args_info) for _ in range(n)])
    return [f.result() for f in futures]  # each blocks until its candidate is timed


def _board_free(tracker: str) -> bool:
    return tracker_client.tracker_summary(tracker)["queue_info"].get("host", {}).get("free", 0) == 1


def test_a_batch_is_timed_in_one_session_that_is_closed_after_it(
    local_farm: LocalFarm, candidate: tuple[str, list[Any]], sessions_opened: list[str]
) -> None:
    runner = FarmRunner(FarmRunnerConfig(tracker=local_farm.tracker, board_key="host"))
    try:
        results = _run(runner, candidate, 4)
        assert [r.error_msg for r in results] == [None] * 4
        assert all(r.run_secs and all(float(s) > 0 for s in r.run_secs) for r in results)
        assert len(sessions_opened) == 1, sessions_opened
        # Nothing queued: the session is closed and the board goes back to the tracker for other jobs.
        assert runner.open_sessions() == 0
        wait_until(lambda: _board_free(local_farm.tracker), 120, "the board free again after the batch")
        assert [r.error_msg for r in _run(runner, candidate, 2)] == [None] * 2
        assert len(sessions_opened) == 2, sessions_opened  # the next batch opened a session of its own
    finally:
        runner.shutdown()


class _DeadRemote:
    """The remote of a session whose board went away while the session sat idle."""

    def upload(self, *args: Any) -> None:
        raise ConnectionResetError("connection reset by peer")


class _DeadSession:
    remote = _DeadRemote()
    board_id = "host@127.0.0.1:1"


def test_an_idle_session_that_died_costs_a_new_session_not_a_trial(
    local_farm: LocalFarm, candidate: tuple[str, list[Any]], sessions_opened: list[str]
) -> None:
    runner = FarmRunner(FarmRunnerConfig(tracker=local_farm.tracker, board_key="host"))
    try:
        runner._idle_sessions.append((_DeadSession(), time.monotonic()))
        [result] = _run(runner, candidate, 1)
        assert result.error_msg is None and result.run_secs
        assert len(sessions_opened) == 1  # the retry's fresh session
        assert not runner._streak and not runner._avoid  # the dead session was not held against a board
        assert not runner.stats.failed and not runner.stats.errors
    finally:
        runner.shutdown()


class _InProcessFence:
    """The host fence's own rules (``_HostFenceState``) in this process, with every hold's span recorded."""

    def __init__(self) -> None:
        import threading

        from workers.fence import _HostFenceState

        self.state, self.lock = _HostFenceState(), threading.Lock()
        self.spans: list[tuple[str, float, float]] = []  # (kind, from, to)

    @contextlib.contextmanager
    def _hold(self, kind: str, ttl_s: float) -> Iterator[float]:
        holder = uuid.uuid4().hex
        ask = self.state.try_build if kind == "build" else self.state.try_time
        while True:
            with self.lock:
                if ask(holder, ttl_s):
                    break
            time.sleep(0.002)
        started = time.monotonic()
        try:
            yield 0.0
        finally:
            with self.lock:
                self.spans.append((kind, started, time.monotonic()))
                self.state.release(holder)

    def building(self, ttl_s: float = 1800.0) -> contextlib.AbstractContextManager[float]:
        return self._hold("build", ttl_s)

    def timing(self, ttl_s: float = 300.0, stop: Any = None) -> contextlib.AbstractContextManager[float]:
        return self._hold("time", ttl_s)


def test_on_fenced_boards_a_batch_is_timed_while_the_tuning_thread_waits(
    local_farm: LocalFarm, candidate: tuple[str, list[Any]]
) -> None:
    """The tuning thread holds the fence while it works (search, cost model) and lets go only while its batch
    is timed: ``run`` comes back with the batch timed and the hold taken again, and no timing overlapped a
    span of the thread's hold. Without ``pause`` the batch could never be timed (the thread's own hold)."""
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from workers.fence import WorkHold

    fence = _InProcessFence()
    path, args_info = candidate
    with WorkHold(fence.building) as hold:
        config = FarmRunnerConfig(tracker=local_farm.tracker, board_key="host")
        runner = FarmRunner(config, fence=fence, pause=hold.paused)
        try:
            futures = runner.run([RunnerInput(path, "cpu", args_info) for _ in range(3)])
            assert all(f.done() for f in futures), "run returned before its fenced batch was timed"
            assert fence.state.state()["builds"] == 1  # the thread's hold, taken again
            assert [f.result().error_msg for f in futures] == [None] * 3
        finally:
            runner.shutdown()
    timings = [(a, b) for kind, a, b in fence.spans if kind == "time"]
    works = [(a, b) for kind, a, b in fence.spans if kind == "build"]
    assert len(timings) == 3 and len(works) == 2, fence.spans  # held before the batch and after it
    assert not [(t, w) for t in timings for w in works if t[0] < w[1] and w[0] < t[1]], fence.spans


def test_on_other_boards_run_returns_at_once_and_the_batch_is_timed_meanwhile(
    local_farm: LocalFarm, candidate: tuple[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Boards that do not share this machine's cores (no fence): ``run`` hands the batch to the runner's
    threads and returns, so the tuning thread searches and builds the next task while it is timed."""
    import threading

    from tvm.s_tir.meta_schedule.runner import RunnerInput

    timing_allowed = threading.Event()
    runner_class = FarmRunner._cls  # the Python class behind TVM's derived object
    real = runner_class._time_on_board

    def gated(self: Any, *args: Any) -> list[float]:
        assert timing_allowed.wait(120), "the test never let the timing go on"
        return real(self, *args)

    monkeypatch.setattr(runner_class, "_time_on_board", gated)
    path, args_info = candidate
    runner = FarmRunner(FarmRunnerConfig(tracker=local_farm.tracker, board_key="host"))
    try:
        futures = runner.run([RunnerInput(path, "cpu", args_info) for _ in range(2)])
        assert not runner.fenced and not any(f.done() for f in futures)  # returned with its batch still out
        timing_allowed.set()
        assert [f.result().error_msg for f in futures] == [None, None]
    finally:
        timing_allowed.set()
        runner.shutdown()
