"""The tuning runner's board sessions: one per candidate (before) against one per batch (now). Prints figures.

A real tracker and host board agent on loopback (the local farm), real candidates built by the tuning
builder's ``compile_candidate``, timed by ``FarmRunner`` as a tuning run times them (MetaSchedule's
evaluator settings: number 3, repeat 1, min_repeat_ms 50). Both ways run alternately in one process, so
the ratio is taken under the same load. No Ray and no host fence: what is compared is the session.

    .venv/bin/python -m benchmarks.tuning_sessions [--batch 16] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.farm import LocalFarm
from workers.tuning.builder import _artifact, compile_candidate
from workers.tuning.runner import FarmRunner, FarmRunnerConfig


def candidate() -> tuple[str, list[Any]]:
    """(artifact path, args info) of a real kernel: a 64x64 by 64x64 matmul."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")
    data = compile_candidate(tvm.ir.save_json(tvm.IRModule({"main": func})), "llvm", None, None)
    return str(_artifact(data).artifact_path), ArgInfo.from_prim_func(func)


def one_batch(tracker: str, reuse: bool, batch: int, cand: tuple[str, list[Any]]) -> dict[str, float]:
    """Time one batch of ``batch`` candidates; wall, board wait and run seconds per candidate."""
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    runner = FarmRunner(FarmRunnerConfig(tracker=tracker, board_key="host", reuse_sessions=reuse))
    try:
        started = time.perf_counter()
        results = [f.result() for f in runner.run([RunnerInput(cand[0], "cpu", cand[1]) for _ in range(batch)])]
        wall = time.perf_counter() - started
    finally:
        runner.shutdown()
    failed = [r.error_msg for r in results if r.error_msg]
    assert not failed, failed[:3]
    times = runner.stats.times
    return {"wall": wall / batch, "wait": times["board_wait_s"] / batch, "run": times["run_s"] / batch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="candidates per batch (the sweep's num_trials_per_iter)")
    parser.add_argument("--rounds", type=int, default=4, help="batches of each way, alternating")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tvmbench-sessions-") as tmp:
        farm = LocalFarm.start(Path(tmp) / "farm", {"host": 1})
        try:
            cand = candidate()
            one_batch(farm.tracker, True, 2, cand)  # the board's first session pays its imports: not counted
            figures: dict[bool, list[dict[str, float]]] = {False: [], True: []}
            for _ in range(args.rounds):
                for reuse in (False, True):
                    figures[reuse].append(one_batch(farm.tracker, reuse, args.batch, cand))
        finally:
            farm.stop()
    print(f"\n{args.rounds} batches of {args.batch} candidates each way, load average {load_before:.1f} -> "
          f"{os.getloadavg()[0]:.1f}; ms per candidate, median over batches:")  # fmt: skip
    print(f"  {'':<28} {'wall':>8} {'board wait':>11} {'timing':>8}")
    med = {r: {k: statistics.median(f[k] for f in figures[r]) * 1e3 for k in ("wall", "wait", "run")} for r in figures}
    for reuse, name in ((False, "a session per candidate"), (True, "a session per batch")):
        m = med[reuse]
        print(f"  {name:<28} {m['wall']:>8.1f} {m['wait']:>11.1f} {m['run']:>8.1f}")
    print(f"  per-batch / per-candidate wall: {med[True]['wall'] / med[False]['wall']:.2f}x")


if __name__ == "__main__":
    main()
