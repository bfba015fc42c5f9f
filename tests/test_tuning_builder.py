"""The tuning Builder's Ray tasks against a real local Ray and the real host fence actor.

A candidate compile that never ends (one NHWC light_squeezenet candidate compiled for 16 minutes) must cost
one failed trial, and nothing more: the batch goes on, and the fence hold the cancelled task held is let
go of (the task is killed before its own release; its hold kept every timing on the host waiting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

from workers.fence import Fence, create_fence
from workers.tuning.builder import BuiltCandidate, RayBuilder


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

    def hang_or_build(
        mod_json: str, _target: str, _cross: Any, fence_host: str | None, holder: str | None
    ) -> BuiltCandidate:
        import time

        from workers.fence import local_fence

        with local_fence(fence_host).building(holder=holder):
            while "tvmbench_test_hang" in mod_json:  # a compile that never ends, holding the fence
                time.sleep(1)
            return BuiltCandidate(b"built", fence_wait_s=0.0, compile_s=0.01)

    builder = RayBuilder(fence_host=host, timeout_s=20)  # room for a busy machine to start the good ones
    builder._remote = ray.remote(num_cpus=1, max_retries=0)(hang_or_build)
    builder._warm = True
    results = builder.build([_candidate(False), _candidate(True), _candidate(False)])
    errors = [r.error_msg for r in results]
    assert errors[0] is None and errors[2] is None, errors
    assert errors[1] is not None and errors[1].startswith("build-timeout"), errors
    assert builder.stats.failed == {"build-timeout": 1}
    assert builder.stats.candidates_built == 2 and builder.stats.times["candidate_compile_s"] > 0  # the two that built
    assert fence.state() == {"builds": 0, "timing": 0, "waiting_timers": 0}, "the cancelled build's hold was kept"


def test_a_stop_cuts_the_batch_in_flight_and_lets_go_of_its_fence_holds(ray_local: None, tmp_path: Path) -> None:
    """The auto budget's time rule (``stop``) ends a batch whose last compile would run for its whole timeout."""
    host = create_fence()
    fence = Fence(host)
    done = tmp_path / "built"
    done.mkdir()

    def hang_or_build(
        mod_json: str, _target: str, _cross: Any, fence_host: str | None, holder: str | None
    ) -> BuiltCandidate:
        import time
        import uuid

        from workers.fence import local_fence

        with local_fence(fence_host).building(holder=holder):
            while "tvmbench_test_hang" in mod_json:
                time.sleep(1)
            (done / uuid.uuid4().hex).touch()
            return BuiltCandidate(b"built", fence_wait_s=0.0, compile_s=0.01)

    # Stopped once both quick candidates are built: only the stop can end the hung one (timeout 10 minutes).
    builder = RayBuilder(fence_host=host, timeout_s=600, stop=lambda: len(list(done.iterdir())) >= 2)
    builder._remote = ray.remote(num_cpus=1, max_retries=0)(hang_or_build)
    builder._warm = True
    results = builder.build([_candidate(False), _candidate(True), _candidate(False)])
    errors = [r.error_msg for r in results]
    # "stopped", not "timed out after 600s": the stop ended the batch, not the timeout.
    assert errors[1] is not None and errors[1].startswith("build-stopped: candidate build stopped"), errors
    assert builder.stats.failed == {"build-stopped": 1 + sum(e is not None for e in (errors[0], errors[2]))}
    assert fence.state() == {"builds": 0, "timing": 0, "waiting_timers": 0}, "the stopped build's hold was kept"


def test_the_warm_up_is_a_build_and_waits_for_a_timing_on_the_host(ray_local: None) -> None:
    """Importing TVM in every worker is seconds of CPU: it must not run while a host board times a program."""
    from orchestrator.farm import wait_until
    from workers.tuning.builder import warm_worker

    host = create_fence()
    fence = Fence(host)
    refused_before = fence._call("refused")
    assert fence.try_hold("time", "a timing", 60)
    try:
        ref = ray.remote(num_cpus=1)(warm_worker).remote(host)
        # The warm-up asks for the fence and is refused while the timing holds it.
        wait_until(lambda: fence._call("refused") > refused_before, 120, "the warm-up to ask for the fence")
        assert not ray.wait([ref], timeout=0)[0], "the warm-up ran during the timing"
    finally:
        fence.release("a timing")
    assert ray.get(ref, timeout=300) >= 0
    assert fence.state() == {"builds": 0, "timing": 0, "waiting_timers": 0}


def test_candidates_of_any_board_key_hold_the_drivers_machine_fence() -> None:
    from workers.tuning.search import candidate_fence
    from workers.tuning.stage import TuningEnv

    # Boards elsewhere: no timing fence for the key, but the builds run on the driver's machine all the same.
    assert candidate_fence(TuningEnv(tracker="t", fence_host=None, machine_fence="driver")) == "driver"
    assert candidate_fence(TuningEnv(tracker="t", fence_host="driver", machine_fence="driver")) == "driver"
    assert candidate_fence(TuningEnv(tracker="t")) is None  # a build outside a sweep: no fence at all
