"""The tuning Builder's Ray tasks against a real local Ray and the real host fence actor.

A candidate compile that never ends (one NHWC light_squeezenet candidate compiled for 16 minutes) must cost
one failed trial, and nothing more: the batch goes on, and the fence hold the cancelled task held is let
go of (the task is killed before its own release; its hold kept every timing on the host waiting).
"""

from __future__ import annotations

from typing import Any

import pytest
import ray

from workers.fence import Fence, create_fence
from workers.tuning.builder import RayBuilder


def _candidate(hang: bool) -> Any:
    """A BuilderInput of a small kernel; ``hang`` marks it for the test's compile function."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    a = te.placeholder((64,), name="A")
    b = te.compute((64,), lambda i: a[i] + 1.0, name="B")
    func = te.create_prim_func([a, b]).with_attr("global_symbol", "main")
    if hang:
        func = func.with_attr("tvmbench_test_hang", 1)
    return BuilderInput(tvm.IRModule({"main": func}), tvm.target.Target("llvm"))


def test_a_candidate_past_its_timeout_is_a_failed_trial_and_its_fence_hold_is_let_go(ray_local: None) -> None:
    host = create_fence()  # this machine's fence, as a sweep's driver creates it
    fence = Fence(host)

    def hang_or_build(mod_json: str, _target: str, _cross: Any, fence_host: str | None, holder: str | None) -> bytes:
        import time

        from workers.fence import local_fence

        with local_fence(fence_host).building(holder=holder):
            while "tvmbench_test_hang" in mod_json:  # a compile that never ends, holding the fence
                time.sleep(1)
            return b"built"

    builder = RayBuilder(fence_host=host, timeout_s=3)
    builder._remote = ray.remote(num_cpus=1, max_retries=0)(hang_or_build)
    builder._warm = True
    results = builder.build([_candidate(False), _candidate(True), _candidate(False)])
    errors = [r.error_msg for r in results]
    assert errors[0] is None and errors[2] is None, errors
    assert errors[1] is not None and errors[1].startswith("build-timeout"), errors
    assert builder.stats.failed == {"build-timeout": 1}
    assert fence.state() == {"builds": 0, "timing": 0, "waiting_timers": 0}, "the cancelled build's hold was kept"


@pytest.fixture(autouse=True)
def _fence_left_clean(ray_local: None) -> Any:
    """Other tests share this machine's fence actor in the session's Ray: leave it without holds."""
    yield
    from workers.fence import reset_fence

    reset_fence(create_fence())
