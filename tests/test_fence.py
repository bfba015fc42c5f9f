"""The host fence as a real Ray actor: it lives as long as the driver that created it, and it fences.

The state rules themselves (shared builds, a timing alone, a waiting timing blocking new builds) are
checked on ``_HostFenceState`` without Ray in tests/test_releases_tuning.py; here the actor behind them,
and the holds of a process that died without letting go.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.farm import wait_until
from tvmbench.core.liveness import pid_alive
from workers.fence import Fence, _HostFenceState, create_fence


def test_the_fence_outlives_its_creator_call_and_fences(ray_local: None) -> None:
    host = create_fence("fence-test-host")
    gc.collect()  # the handle create_fence made must not be the actor's only life line
    fence = Fence(host)
    assert fence.active and fence.state() == {"builds": 0, "timing": 0, "waiting_timers": 0}
    timed = threading.Event()
    with fence.building():
        assert fence.state()["builds"] == 1

        def time_it() -> None:
            with Fence(host).timing(ttl_s=60):
                timed.set()

        thread = threading.Thread(target=time_it, daemon=True)
        thread.start()
        # The timing waits for the build, and while it waits no new build is let in.
        wait_until(lambda: fence.state()["waiting_timers"] == 1, 60, "the timing to wait for the build")
        assert not timed.is_set()
        assert fence.try_hold("build", "a-second-build", 60) is False
    thread.join(60)
    assert timed.is_set(), "the timing never got the fence after the build let go"
    assert fence.state() == {"builds": 0, "timing": 0, "waiting_timers": 0}


def test_a_hold_of_a_process_that_died_is_dropped_at_the_next_ask() -> None:
    state = _HostFenceState()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        assert state.try_build("doomed-build", 1800, pid=child.pid)
        assert state.try_build("anonymous-build", 1800)  # no pid: only its time-to-live ends it
        state.release("anonymous-build")
        assert state.try_time("timer", 60, pid=os.getpid()) is False, "a live build must hold the timing off"
        child.kill()
        # Not reaped yet, the child is a zombie: dead all the same, so the build's 30 minutes do not count.
        wait_until(lambda: not pid_alive(child.pid), 30, "the killed child to die")
        assert Path(f"/proc/{child.pid}").exists(), "the child was reaped: this no longer tests a zombie"
        assert state.try_time("timer", 60, pid=os.getpid()), "the dead build still holds the fence"
        assert state.state()["builds"] == 0
        # A live holder (this process) keeps its hold however often others ask.
        assert state.try_build("late-build", 60, pid=os.getpid()) is False
        assert state.state()["timing"] == 1
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("pid", [os.getpid(), 1])
def test_a_live_process_is_alive(pid: int) -> None:
    assert pid_alive(pid)


def test_a_build_task_killed_holding_the_fence_does_not_wedge_it(ray_local: None) -> None:
    import ray

    host = create_fence()  # this machine's: a holder here is told dead by its process id

    @ray.remote(max_retries=0)
    def hold_and_die(fence_host: str) -> None:
        with Fence(fence_host).building():
            os._exit(1)  # as sweep cancel, the OOM killer or a segfault in LLVM end a worker: no release

    with pytest.raises(ray.exceptions.RayError):
        ray.get(hold_and_die.remote(host), timeout=120)
    fence = Fence(host)
    try:
        # Before, the dead build held the fence for its whole time-to-live (30 minutes).
        wait_until(lambda: fence.try_hold("time", "after-the-crash", 60), 60, "the dead build's hold to go")
        assert fence.state()["builds"] == 0
    finally:
        fence.release("after-the-crash")
