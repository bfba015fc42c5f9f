"""Does timing over the farm change the number? And what does the adaptive sampler cost?

1. The same artifact (bytes built once by the sweep's own build path) is timed in this process and
   over RPC through a real tracker and board agent on loopback, with the same time_evaluator settings.
   Rounds alternate (in-process batch, RPC batch, ...) so that load drifting on a shared machine hits
   both sides alike. Prints median(RPC) / median(in-process) with its bootstrap 95 % CI (aim: within 5 %).
2. The adaptive sampler (workers/sampling.py) runs over RPC to a 2 % target on a stable model and on a
   noisy one, and prints how many samples and timer calls each needed and why it stopped.

    PYTHONPATH=. python -m benchmarks.fidelity [--rounds 8] [--per-round 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def build(model: Any, name: str) -> tuple[bytes, dict[str, np.ndarray], Any]:
    """Build ``model`` for the host with the sweep's build path; (artifact, inputs, job)."""
    import onnx

    from orchestrator.plan import plan_jobs
    from orchestrator.spec import load_spec
    from workers.executors.registry import build_job
    from workers.executors.requests import BuildRequest
    from workers.onnx_model import seeded_inputs

    tmp = Path(tempfile.mkdtemp(prefix="tvmbench-fidelity-"))
    onnx.save(model, tmp / f"{name}.onnx")
    (tmp / "s.toml").write_text(f'[[models]]\npath = "{tmp / name}.onnx"\n[[targets]]\npreset = "host"\n')
    spec = load_spec(tmp / "s.toml")
    job = plan_jobs(spec)[0]
    built, data = build_job(BuildRequest(job, (tmp / f"{name}.onnx").read_bytes()))
    if data is None:
        raise SystemExit(f"build of {name} failed: {built.error}")
    return data, seeded_inputs(job.model.inputs, 0), job


class Settings:
    """The time_evaluator settings both sides use."""

    def __init__(self, number: int) -> None:
        self.number, self.repeat, self.min_repeat_ms, self.cooldown_ms = number, 1, 0, 0


def local_timer(artifact: bytes, inputs: dict[str, np.ndarray], job: Any, settings: Settings):
    import tvm
    from tvm import relax

    from workers.sampling import time_evaluator_timer

    path = Path(tempfile.mkdtemp(prefix="tvmbench-fidelity-")) / "program.so"
    path.write_bytes(artifact)
    dev = tvm.cpu(0)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), dev)
    args = [tvm.runtime.tensor(inputs[n], dev) for n, _, _ in job.model.inputs]
    return time_evaluator_timer(vm, dev, settings, args)


def remote_timer(session: Any, artifact: bytes, inputs: dict[str, np.ndarray], job: Any, settings: Settings):
    import tvm

    from workers.phases import PhaseLog
    from workers.sampling import time_evaluator_timer

    remote = session.remote
    dev = remote.cpu(0)
    log = PhaseLog()
    log.upload(remote, artifact, "fidelity.so")
    vm = log.load_vm(remote, "fidelity.so", dev)
    args = [tvm.runtime.tensor(inputs[n], dev) for n, _, _ in job.model.inputs]
    return time_evaluator_timer(vm, dev, settings, args), log


def spread(samples: list[float]) -> float:
    """Interquartile range over the median: the noise a sampler has to average away."""
    q1, q2, q3 = np.percentile(samples, [25, 50, 75])
    return float((q3 - q1) / q2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="alternating in-process/RPC rounds")
    parser.add_argument("--per-round", type=int, default=10, help="samples per side per round")
    parser.add_argument("--number", type=int, default=20, help="runs averaged into one sample")
    parser.add_argument("--target", type=float, default=0.02, help="adaptive sampler CI target")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    opts = parser.parse_args()

    from orchestrator.farm import LocalFarm
    from tvmbench.answers.stats import median_ci, ratio_ci
    from workers import model_zoo
    from workers.sampling import SamplingPlan, sample
    from workers.tracker_client import request_session

    load_before = os.getloadavg()
    figures: dict[str, Any] = {"cores": os.cpu_count(), "load_avg_before": load_before}
    settings = Settings(opts.number)
    artifact, inputs, job = build(model_zoo.tiny_cnn(), "tiny_cnn")
    noisy_artifact, noisy_inputs, noisy_job = build(model_zoo.outer_product(1024), "outer_product")

    with tempfile.TemporaryDirectory(prefix="tvmbench-fidelity-farm-") as logs:
        farm = LocalFarm.start(Path(logs), {"host": 1})
        try:
            session = request_session(farm.tracker, "host", 60, 600)
            local = local_timer(artifact, inputs, job, settings)
            remote, phases = remote_timer(session, artifact, inputs, job, settings)
            local(3), remote(3)  # warm both sides outside the comparison
            local_s: list[float] = []
            remote_s: list[float] = []
            for _ in range(opts.rounds):
                local_s += local(opts.per_round)
                remote_s += remote(opts.per_round)
            ratio = ratio_ci(local_s, remote_s)
            lo_ci, re_ci = median_ci(local_s), median_ci(remote_s)
            figures["fidelity"] = {
                "model": "tiny_cnn",
                "number": opts.number,
                "samples_per_side": len(local_s),
                "in_process_median_ms": lo_ci.value,
                "in_process_ci_ms": [lo_ci.lo, lo_ci.hi],
                "rpc_median_ms": re_ci.value,
                "rpc_ci_ms": [re_ci.lo, re_ci.hi],
                "ratio_rpc_over_in_process": ratio.value,
                "ratio_ci": [ratio.lo, ratio.hi],
                "upload_ms": phases.upload_s * 1e3,
                "load_ms": phases.load_s * 1e3,
            }
            print(
                f"fidelity (tiny_cnn, number={opts.number}, {len(local_s)} samples a side, alternating rounds):\n"
                f"  in-process median {lo_ci.value:.4f} ms [{lo_ci.lo:.4f}, {lo_ci.hi:.4f}]\n"
                f"  over RPC   median {re_ci.value:.4f} ms [{re_ci.lo:.4f}, {re_ci.hi:.4f}]\n"
                f"  ratio RPC / in-process {ratio.value:.3f}, 95% CI [{ratio.lo:.3f}, {ratio.hi:.3f}]"
                f" ({'within' if abs(ratio.value - 1) <= 0.05 else 'outside'} 5 %)"
            )
            del remote, local
            del session
            gc.collect()

            figures["adaptive"] = []
            plan = SamplingPlan(warmup=3, min_repeat=5, max_repeat=2000, target_rel_ci=opts.target, max_s=60)
            for label, (art, inp, jb) in (
                ("tiny_cnn", (artifact, inputs, job)),
                ("outer_product 1024", (noisy_artifact, noisy_inputs, noisy_job)),
            ):
                session = request_session(farm.tracker, "host", 60, 600)
                timer, _ = remote_timer(session, art, inp, jb, Settings(opts.number if label == "tiny_cnn" else 1))
                t0 = time.perf_counter()
                got = sample(timer, plan)
                row = {
                    "model": label,
                    "spread_iqr_over_median": spread(list(got.samples_ms)),
                    "samples": len(got.samples_ms),
                    "timer_calls": got.calls,
                    "stop_reason": got.stop_reason,
                    "rel_ci": got.rel_ci,
                    "seconds": time.perf_counter() - t0,
                    "median_ms": got.ci.value,
                }
                figures["adaptive"].append(row)
                print(
                    f"adaptive to {opts.target:.0%} on {label}: {row['samples']} samples in {row['timer_calls']} "
                    f"timer calls, {row['seconds']:.2f} s, stopped by {row['stop_reason']} at ±{got.rel_ci:.2%}; "
                    f"noise (IQR/median) {row['spread_iqr_over_median']:.1%}, median {got.ci.value:.4g} ms"
                )
                del timer, session
                gc.collect()
        finally:
            farm.stop()
    figures["load_avg_after"] = os.getloadavg()
    print(
        f"host: {figures['cores']} cores, load average {load_before[0]:.1f} before and "
        f"{figures['load_avg_after'][0]:.1f} after (other work shares this machine)"
    )
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
