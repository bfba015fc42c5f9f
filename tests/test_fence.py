"""The host fence as a real Ray actor: it lives as long as the driver that created it, and it fences.

The state rules themselves (shared builds, a timing alone, a waiting timing blocking new builds) are
checked on ``_HostFenceState`` without Ray in tests/test_releases_tuning.py; here the actor behind them.
"""

from __future__ import annotations

import gc
import threading

from orchestrator.farm import wait_until
from workers.fence import Fence, create_fence


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
