"""MetaSchedule's Runner over the farm: each candidate is timed on a board of the job's key via the tracker.

Not the stock ``RPCRunner`` (DESIGN.md, "Tuning"): its ``tracker.request`` blocks with no deadline
when no board is free, its popen worker pool costs a Python start per worker on a 2-core machine, it
cannot skip a board that keeps failing, and it knows nothing of the host fence. This runner asks the
tracker through the farm's own ``request_session`` (one deadline over every wait, tracker restarts
ridden out, avoided boards never used), holds the host fence while a board on this machine times a
candidate, and turns every failure into a failed trial of a kind (``infra``, ``timeout``,
``device-unavailable``, ``build``) instead of an exception: a board that dies mid-tuning costs the
trials it was running, never the job.

On boards that share this machine's cores (fenced), ``run`` returns once the whole batch is timed, and the
tuning thread's own fence hold (``pause``) is let go of only meanwhile: MetaSchedule's task schedulers
search and build the next task, and update the cost model, while a batch is out on the boards, and on
this machine's cores that work ran during the timings (the auto budget searched one task while the
last one's candidates were timed, two threads each on two cores). On other boards a batch is still
timed while the tuning thread works on.

A board that fails ``QUARANTINE_AFTER`` candidates in a row is avoided for the rest of this tuning run
(the farm's quarantine rule, applied locally: the sweep's own health bookkeeping sees only measurements).

A session is reused for the next candidate while candidates are queued: asking the tracker, connecting
and the board's fork of a session process cost about as much as timing a candidate (a sixth of a quiet
auto-budget run on light_squeezenet went to it). Sessions are opened for ``SESSION_REUSE`` x the
configured session timeout and taken again only while younger than one timeout, so every candidate
still has at least ``session_timeout_s`` of its session; a candidate that fails closes its session, and
when the runner has nothing queued every session is closed and its board is free for other jobs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerFuture, RunnerInput, RunnerResult

from tvmbench.core.health import QUARANTINE_AFTER  # the farm's rule, applied within one tuning run
from workers.tuning.stats import TuningStats

SESSION_REUSE = 2  # a session's timeout, in candidate session timeouts (see the module docstring)


@dataclass(frozen=True)
class FarmRunnerConfig:
    """Where and how candidates are timed."""

    tracker: str
    board_key: str
    number: int = 3  # runs per repeat (MetaSchedule's EvaluatorConfig defaults)
    repeat: int = 1
    min_repeat_ms: int = 50
    session_timeout_s: float = 60.0  # one candidate's session: upload + load + runs
    device_wait_s: float = 60.0  # waiting for a free board, per candidate
    registration_wait_s: float = 5.0  # a key with no board registered fails its trials this fast
    fence_host: str | None = None  # the host whose cores the key's boards share (None: no fence)
    max_workers: int = 1  # candidates timed at once (boards of the key; 1 when fenced)
    reuse_sessions: bool = True  # False: a session per candidate (benchmarks/tuning_sessions.py compares)


Pause = Callable[[], contextlib.AbstractContextManager[Any]]


@derived_object
class _Future(PyRunnerFuture):
    def __init__(self, future: concurrent.futures.Future, pause: Pause | None = None) -> None:
        super().__init__()
        self.future = future
        self.pause = pause

    def done(self) -> bool:
        return self.future.done()

    def result(self) -> RunnerResult:
        if self.pause is not None and not self.future.done():
            with self.pause():  # waiting is no work: let timings on this machine go on meanwhile
                self.future.result()
        run_secs, error = self.future.result()
        return RunnerResult(run_secs, error)


@derived_object
class FarmRunner(PyRunner):
    """Times candidates on the farm's boards; see the module docstring."""

    def __init__(
        self,
        config: FarmRunnerConfig,
        *,
        avoid: frozenset[str] = frozenset(),
        stats: TuningStats | None = None,
        stop: Any = None,
        fence: Any = None,
        pause: Pause | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.stats = stats or TuningStats()
        self.stop = stop
        # A fence object in place of the host's Ray actor (a toolchain's child: workers/toolchains/tuning.py).
        self.fence = fence
        # Lets go of the tuning thread's fence hold while it waits for candidates (see the module docstring).
        self.pause = pause
        self.fenced = config.fence_host is not None or fence is not None
        self._lock = threading.Lock()
        self._avoid = set(avoid)
        self._streak: Counter = Counter()  # board id -> failures in a row
        self._queued = 0  # candidates submitted and not yet finished
        self._idle_sessions: list[tuple[Any, float]] = []  # (Session, opened at) free for the next candidate
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, config.max_workers), thread_name_prefix="tvmbench-farm-runner"
        )

    def run(self, runner_inputs: list[RunnerInput]) -> list[RunnerFuture]:
        with self._lock:
            self._queued += len(runner_inputs)
        futures = []
        for ri in runner_inputs:
            args_info = [a.as_json() for a in ri.args_info]
            path = str(ri.artifact_path)
            future = self._pool.submit(self._run_one, path, str(ri.device_type), args_info)
            # When each candidate finished, for the tuning curve's seconds (a batch is reported at its end).
            future.add_done_callback(lambda _, path=path: self.stats.timed(path))
            futures.append(_Future(future, self.pause))
        if self.fenced:  # timed before the tuning thread works on (see the module docstring)
            with self.pause() if self.pause is not None else contextlib.nullcontext():
                concurrent.futures.wait([f.future for f in futures])
        return futures

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._close_idle_sessions()

    def _close_idle_sessions(self) -> None:
        with self._lock:
            closing, self._idle_sessions = self._idle_sessions, []
        if closing:
            closing.clear()
            gc.collect()  # a session closes (and its board frees) when its last handle goes

    def open_sessions(self) -> int:
        """Sessions held for the next candidate (0 whenever nothing is queued)."""
        with self._lock:
            return len(self._idle_sessions)

    # --- one candidate --------------------------------------------------------------------------

    def _failed(self, kind: str, message: str) -> tuple[None, str]:
        self.stats.fail(kind, message)
        return None, f"{kind}: {message}"

    def _note(self, board_id: str, ok: bool) -> None:
        with self._lock:
            if ok:
                self._streak.pop(board_id, None)
                return
            self._streak[board_id] += 1
            if self._streak[board_id] >= QUARANTINE_AFTER:
                self._avoid.add(board_id)

    def _run_one(
        self, artifact_path: str, device_type: str, args_info: list[Any]
    ) -> tuple[list[float] | None, str | None]:
        try:
            return self._time_candidate(artifact_path, device_type, args_info)
        finally:
            with self._lock:
                self._queued -= 1
                idle = self._queued == 0
            if idle:
                self._close_idle_sessions()

    def _reused_session(self, avoid: frozenset[str]) -> tuple[Any, float] | None:
        """An idle session young enough to give a candidate its whole timeout, on a board not avoided."""
        with self._lock:
            while self._idle_sessions:
                session, opened = self._idle_sessions.pop()
                if session.board_id not in avoid and time.monotonic() - opened < self.config.session_timeout_s:
                    return session, opened
        return None

    def _time_candidate(
        self, artifact_path: str, device_type: str, args_info: list[Any], reuse: bool = True
    ) -> tuple[list[float] | None, str | None]:
        from tvmbench.core.errors import one_line
        from workers.board_session import classify
        from workers.fence import Fence
        from workers.tracker_client import DeviceUnavailable, NoBoardRegistered, TrackerUnreachable, request_session

        cfg = self.config
        if self.stop is not None and self.stop():
            return self._failed("cancelled", "tuning stopped")
        fence = self.fence if self.fence is not None else Fence(cfg.fence_host)
        waited = time.perf_counter()
        with self._lock:
            avoid = frozenset(self._avoid)
        reused = self._reused_session(avoid) if reuse and cfg.reuse_sessions else None
        try:
            session, opened = reused or (
                request_session(
                    cfg.tracker,
                    cfg.board_key,
                    cfg.device_wait_s,
                    cfg.session_timeout_s * SESSION_REUSE,
                    avoid=avoid,
                    registration_wait_s=cfg.registration_wait_s,
                ),
                time.monotonic(),
            )
        except TrackerUnreachable as exc:
            self.stats.add_time("board_wait_s", time.perf_counter() - waited)
            return self._failed("device-unavailable", str(exc))
        except NoBoardRegistered:
            self.stats.add_time("board_wait_s", time.perf_counter() - waited)
            return self._failed("device-unavailable", f"no board with key {cfg.board_key!r} is registered")
        except DeviceUnavailable as exc:
            self.stats.add_time("board_wait_s", time.perf_counter() - waited)
            return self._failed(
                "device-unavailable", f"no board of {cfg.board_key!r} free in {cfg.device_wait_s:g}s ({exc})"
            )
        except Exception as exc:
            self.stats.add_time("board_wait_s", time.perf_counter() - waited)
            return self._failed("infra", f"tracker {cfg.tracker}: {one_line(exc)}")
        board_id = session.board_id
        try:
            # The fence is taken with the board in hand: waiting for both at once in the other order
            # would hold the machine quiet for nothing while the tracker queues.
            with fence.timing(ttl_s=cfg.session_timeout_s + 30, stop=self.stop):
                self.stats.add_time("board_wait_s", time.perf_counter() - waited)
                started = time.perf_counter()
                try:
                    run_secs = self._time_on_board(session.remote, artifact_path, device_type, args_info)
                finally:
                    self.stats.add_time("run_s", time.perf_counter() - started)
        except Exception as exc:
            del session
            gc.collect()  # a session a candidate failed in is not trusted again: close it now
            kind = "timeout" if isinstance(exc, TimeoutError) else classify(exc)
            if reused is not None and kind != "timeout":
                # A session left idle may have died with its board: that costs a new session, not a trial
                # (and not a failure of the board: a fresh session decides).
                return self._time_candidate(artifact_path, device_type, args_info, reuse=False)
            self._note(board_id, ok=False)
            return self._failed(kind, f"{board_id}: {one_line(exc)}")
        self._note(board_id, ok=True)
        if cfg.reuse_sessions:
            with self._lock:
                self._idle_sessions.append((session, opened))
        else:
            del session
            gc.collect()
        return run_secs, None

    def _time_on_board(self, remote: Any, artifact_path: str, device_type: str, args_info: list[Any]) -> list[float]:
        import os

        from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

        cfg = self.config
        # One name per artifact: the board's session folder is private to the session anyway.
        name = os.path.basename(os.path.dirname(artifact_path)) + ".so"
        remote.upload(artifact_path, name)
        rt_mod = remote.load_module(name)
        dev = remote.device(device_type, 0)
        fill = remote.get_function("tvm.contrib.random.random_fill_for_measure")
        args = alloc_argument_common(fill, dev, args_info, 1)[0]
        evaluator = rt_mod.time_evaluator(
            rt_mod.entry_name, dev, number=cfg.number, repeat=cfg.repeat, min_repeat_ms=cfg.min_repeat_ms
        )
        dev.sync()
        costs = [float(c) for c in evaluator(*args).results]
        del args, rt_mod, evaluator
        with contextlib.suppress(Exception):
            remote.remove(name)
        return costs
