"""Speed figures side by side: a hand-written seed loop vs `tvmbench sweep run`, cold and cached, the lower
bound T*, no-op jobs through real Ray and a real database, a sweep with nothing left to do, and `sweep plan` of
10,000 jobs.

    .venv/bin/python -m benchmarks.sweep_speed [--quick] [--workdir DIR]

Everything runs in one process tree and one run, against one local farm (a TVM RPC tracker and one
host board agent on 127.0.0.1):
- seed loop: what a user writes by hand, one configuration at a time: import the ONNX model, run the
  Relax pipeline in a PassContext, build and export the library, upload it to a board, time it. It builds
  for the sweep's own target (the ``host`` preset, with this machine's ``mcpu``), so that both build and
  time the same programs (before, it built for plain ``llvm``: other programs, other seconds in T*).
- `tvmbench sweep run` as a separate process, cold (empty artifact cache and database), then again
  with `--label cached` (every build comes from the cache; everything is measured again).
- T*: (distinct import + pipeline + codegen CPU-seconds) / cores + distinct measurement seconds, from
  the seed loop's own timings (a lower bound for any tool on this machine).
- no-op jobs: a sweep whose Builder and Runner return at once (injected through run_sweep's
  ``executors``), through real Ray tasks and a real SQLite database: jobs per second.
- a sweep with nothing left: `tvmbench sweep run` as a process on 16 jobs already final (stored here by
  the no-op executors through the in-process pool): wall seconds to say so (it starts no farm and no Ray).
- `tvmbench sweep plan` of a 10,000-job sweep file: wall seconds and peak memory of the process.

The default configurations are the issue's: light_squeezenet and light_shufflenet x vm-bytecode and
vm-compiled x opt_level 0-3 (16 jobs); ``--quick`` uses two tiny models instead (seconds per build).
Figures depend on the machine and its load: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.scheduler import ensure_ray, run_sweep
from orchestrator.scheduling.measurements import FixedBoards
from orchestrator.scheduling.pool import InlinePool
from orchestrator.spec import SweepSpec, load_spec
from tvmbench.core.records import Build, MeasureSettings, ModelRef, Run, TargetSpec
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.board_session import ok_run
from workers.build_common import make_target, tvm_versions
from workers.executors.base import Executor, not_mcu
from workers.executors.requests import BuildRequest, MeasureRequest
from workers.onnx_model import bundled_path
from workers.targets import PRESETS
from workers.tracker_client import request_session

TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))
EXECUTORS = ("vm-bytecode", "vm-compiled")
OPT_LEVELS = (0, 1, 2, 3)
NUMBER, REPEAT = 3, 5
ONE_BYTE_SHA = hashlib.sha256(b"x").hexdigest()
AIMS = {
    "cold": 2.5,
    "cached": 10.0,
    "t_star": 1.2,
    "noop_jobs_s": 200.0,
    "plan_s": 2.0,
    "plan_mb": 300.0,
    "idle_s": 4.0,
}
# The figures before the scheduler was split and batched (issue 17), printed beside today's.
BEFORE = {"noop_jobs_s": 49.6, "idle_s": 9.5}


@dataclass
class SeedConfig:
    model: str
    path: Path
    executor: str
    opt_level: int


@dataclass
class SeedFigures:
    wall_s: float = 0.0
    import_cpu: dict[str, float] = field(default_factory=dict)  # model -> CPU-s of one ONNX import
    pipeline_cpu: list[float] = field(default_factory=list)  # per configuration
    codegen_cpu: dict[str, float] = field(default_factory=dict)  # program fingerprint -> CPU-s (first build)
    measure_s: dict[str, float] = field(default_factory=dict)  # program fingerprint -> upload + timing seconds
    configs: int = 0


def _cpu() -> float:
    """CPU-seconds of this process and its waited children (the C compiler export_library runs)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def seed_loop(configs: list[SeedConfig], tracker: str, workdir: Path) -> SeedFigures:
    """The loop a user writes by hand: build, export, upload, time, one configuration at a time."""
    import tvm
    import tvm_ffi
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    figures = SeedFigures(configs=len(configs))
    target = make_target(PRESETS["host"].tvm_target)  # the sweep file's target: the same programs
    started = time.perf_counter()
    for i, cfg in enumerate(configs):
        cpu0 = _cpu()
        model = onnx.load(str(cfg.path))
        mod = from_onnx(model, keep_params_in_input=False)
        cpu1 = _cpu()
        figures.import_cpu.setdefault(cfg.model, cpu1 - cpu0)
        with tvm.transform.PassContext(opt_level=cfg.opt_level):
            with target:
                lowered = relax.get_default_pipeline(target)(mod)
            cpu2 = _cpu()
            executable = relax.build(lowered, target, relax_pipeline=None, exec_mode=cfg.executor.removeprefix("vm-"))
            lib = workdir / f"seed-{i}.so"
            executable.export_library(str(lib))
        cpu3 = _cpu()
        program = f"{tvm_ffi.structural_hash(lowered)}/{cfg.executor}"
        figures.pipeline_cpu.append(cpu2 - cpu1)
        figures.codegen_cpu.setdefault(program, cpu3 - cpu2)
        t0 = time.perf_counter()
        session = request_session(tracker, "host", 120, 300)
        remote = session.remote
        remote.upload(str(lib))
        dev = remote.cpu(0)
        vm = relax.VirtualMachine(remote.load_module(lib.name), dev)
        args = [
            tvm.runtime.tensor(_random_input(inp), dev)
            for inp in model.graph.input
            if inp.name not in {t.name for t in model.graph.initializer}
        ]
        vm.time_evaluator("main", dev, number=NUMBER, repeat=REPEAT)(*args)
        figures.measure_s.setdefault(program, time.perf_counter() - t0)
        # The board is busy until its session's last handle is freed; handles sit in reference cycles.
        del vm, remote, session, args, dev
        gc.collect()
    figures.wall_s = time.perf_counter() - started
    return figures


def _random_input(inp: Any) -> Any:
    import numpy as np

    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


def t_star(seed: SeedFigures, cores: int) -> float:
    """The lower bound: distinct CPU work spread over every core, plus distinct measurements one at a time."""
    cpu = sum(seed.import_cpu.values()) + sum(seed.pipeline_cpu) + sum(seed.codegen_cpu.values())
    return cpu / cores + sum(seed.measure_s.values())


def _sweep_file(path: Path, models: dict[str, Path]) -> Path:
    """The sweep file of the configurations: models x EXECUTORS x OPT_LEVELS on the host board."""
    lines = ['name = "sweep-speed"\n', *(f'[[models]]\npath = "{p}"\n' for p in models.values())]
    lines.append(
        f"[axes]\nexecutor = {json.dumps(list(EXECUTORS))}\nopt_level = {json.dumps(list(OPT_LEVELS))}\n"
        f"[measure]\nnumber = {NUMBER}\nrepeat = {REPEAT}\nsession_timeout_s = 300\ndevice_wait_s = 300\n"
    )
    path.write_text("".join(lines))
    return path


def tvmbench(args: list[str], env: dict[str, str]) -> tuple[float, int, str, Any]:
    """Run the CLI as its own process: (wall seconds, exit status, output, rusage of that process)."""
    started = time.perf_counter()
    proc = subprocess.Popen([TVMBENCH, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - started, proc.returncode, out, usage


def _json_tail(out: str) -> dict[str, Any]:
    """The JSON document the CLI printed (progress lines come before it on the same stream)."""
    return json.loads(out[out.index("{\n") :])


# --- no-op jobs ---------------------------------------------------------------------------------------


class NoopBuilder:
    """A Builder that returns at once: a distinct program per build key, a one-byte artifact."""

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        job = request.job
        key = job.build_key("noop")
        return Build(
            build_key=job.build_key(_tvm_version()),
            status="ok",
            fingerprint=key[:16],
            compile_s=0.0,
            artifact_sha256=ONE_BYTE_SHA,
            artifact_size=1,
        ), b"x"


class NoopRunner:
    """A Runner that returns an ok Run at once, without a board."""

    def run(self, request: MeasureRequest) -> Run:
        return ok_run(
            [1.0], job_key=request.job.key, attempt=request.attempt, builds_in_flight=request.builds_in_flight
        )


def _tvm_version() -> str:
    return tvm_versions()[0]


def noop_jobs_per_second(workdir: Path, tracker: str, targets: int = 250, keys: int = 4) -> tuple[int, float]:
    """(jobs, jobs per second) of a sweep of no-op jobs: real Ray tasks, real SQLite, the real scheduler."""
    model_path = workdir / "noop.onnx"
    onnx.save(model_zoo.tiny_mlp(), str(model_path))
    spec0 = load_spec(_sweep_file(workdir / "noop-base.toml", {"tiny_mlp": model_path}))
    model: ModelRef = spec0.models[0]
    # A few board keys (measurements of one key run one at a time; each measurement in flight holds a
    # Ray worker process), none of them on a board sharing this machine's cores, so nothing is fenced.
    # Distinct target dicts (never compiled) make every job a build task and a measurement task of its own.
    tspecs = tuple(
        TargetSpec(f"noop-{i}", tvm_target={"kind": "llvm", "noop": i}, board_key=f"noop-{i % keys}", arch="x86_64")
        for i in range(targets)
    )
    spec = SweepSpec(
        name="noop",
        label="",
        models=(model,),
        targets=tspecs,
        executors=EXECUTORS,
        opt_levels=OPT_LEVELS,
        pipelines=("per-target",),
        measure=MeasureSettings(number=1, repeat=1),
        model_paths=spec0.model_paths,
        source="noop",
        source_path=str(workdir / "noop.toml"),
    )
    noop = {name: Executor(name, NoopBuilder(), NoopRunner(), accepts=not_mcu) for name in EXECUTORS}
    ensure_ray(num_cpus=os.cpu_count() or 2)
    store = ResultStore(f"sqlite:///{workdir / 'noop.db'}")
    started = time.perf_counter()
    outcome = run_sweep(
        spec, store, tracker, ArtifactCache(workdir / "noop-artifacts"), health_checks=False, executors=noop
    )
    elapsed = time.perf_counter() - started
    assert dict(outcome.statuses) == {"ok": outcome.jobs}, outcome.statuses
    return outcome.jobs, outcome.jobs / elapsed


# --- a sweep with nothing left to do -------------------------------------------------------------------


def idle_sweep_seconds(workdir: Path, env: dict[str, str]) -> tuple[int, float, float]:
    """(jobs, wall seconds, CPU-seconds) of `tvmbench sweep run` on a sweep whose jobs are all final already."""
    models = {}
    for name, proto in (("tiny_cnn", model_zoo.tiny_cnn()), ("conv_gemm_32", model_zoo.conv_gemm_32())):
        models[name] = workdir / f"idle-{name}.onnx"
        onnx.save(proto, str(models[name]))
    path = _sweep_file(workdir / "idle.toml", models)
    spec = load_spec(path)
    home = Path(env["TVMBENCH_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    store = ResultStore(f"sqlite:///{home / 'results.db'}")
    noop = {name: Executor(name, NoopBuilder(), NoopRunner(), accepts=not_mcu) for name in EXECUTORS}
    done = run_sweep(spec, store, "", ArtifactCache(home / "artifacts"), health_checks=False, executors=noop,
                     pool=InlinePool(), boards=FixedBoards())  # fmt: skip
    store.close()
    assert done.complete, done.statuses
    seconds, code, out, usage = tvmbench(["sweep", "run", str(path), "--json"], env)
    assert code == 0, out[-3000:]
    assert _json_tail(out)["outcome"]["already_final"] == done.jobs, out[-2000:]
    return done.jobs, seconds, usage.ru_utime + usage.ru_stime


# --- sweep plan of 10,000 jobs -----------------------------------------------------------------------


def plan_file(workdir: Path, models: int = 5, targets: int = 125) -> tuple[Path, int]:
    """A sweep file of models x targets x 2 executors x 4 opt_levels x 2 pipelines jobs."""
    lines = ['name = "plan-10k"\n']
    for i in range(models):
        path = workdir / f"plan-model-{i}.onnx"
        onnx.save(model_zoo.tiny_mlp(seed=i), str(path))
        lines.append(f'[[models]]\npath = "{path.name}"\n')
    for i in range(targets):
        lines.append(f'[[targets]]\nname = "t{i}"\ntarget = {{ kind = "llvm" }}\nboard_key = "host"\narch = "x86_64"\n')
    lines.append(
        f"[axes]\nexecutor = {json.dumps(list(EXECUTORS))}\nopt_level = {json.dumps(list(OPT_LEVELS))}\n"
        'pipeline = ["per-target", "generic"]\n'
    )
    path = workdir / "plan-10k.toml"
    path.write_text("".join(lines))
    return path, models * targets * len(EXECUTORS) * len(OPT_LEVELS) * 2


# --- the run -------------------------------------------------------------------------------------------


PARTS = ("plan", "sweep", "noop", "idle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two tiny models instead of squeezenet and shufflenet")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--noop-targets", type=int, default=250, help="no-op sweep size / 8 jobs")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tvmbench-speed-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()[0]
    print(f"workdir {workdir}; {cores} cores; load average {load_before:.1f} at start", flush=True)
    env = {**os.environ, "TVMBENCH_HOME": str(workdir / "home"), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("TVMBENCH_DB", None)
    env.pop("TVMBENCH_TRACKER", None)
    rows: list[tuple[str, float, str | None, float | None]] = []

    if "plan" in parts:  # first: os.wait4 then reports this process's own peak memory
        path, planned = plan_file(workdir)
        plan_s, code, out, usage = tvmbench(["sweep", "plan", str(path), "--json"], env)
        assert code == 0, out[-2000:]
        assert len(_json_tail(out)["jobs"]) == planned, "the plan lost jobs"
        plan_mb = usage.ru_maxrss / 1024
        plan_cpu = usage.ru_utime + usage.ru_stime  # what the wall time is on an otherwise idle core
        print(f"sweep plan: {planned} jobs in {plan_s:.2f} s ({plan_cpu:.2f} CPU-s), peak {plan_mb:.0f} MB", flush=True)
        rows += [
            (f"sweep plan {planned} jobs (s)", plan_s, f"< {AIMS['plan_s']:g}", None),
            (f"sweep plan {planned} jobs (CPU-s)", plan_cpu, f"< {AIMS['plan_s']:g}", None),
            ("sweep plan peak memory (MB)", plan_mb, f"< {AIMS['plan_mb']:g}", None),
        ]
    if "idle" in parts:  # before the farm: it needs none
        jobs, idle_s, idle_cpu = idle_sweep_seconds(workdir, env)
        print(f"nothing left: {jobs} final jobs reported in {idle_s:.2f} s ({idle_cpu:.2f} CPU-s)", flush=True)
        rows += [
            (f"sweep run, {jobs} jobs all final (s)", idle_s, f"< {AIMS['idle_s']:g}", BEFORE["idle_s"]),
            (f"sweep run, {jobs} jobs all final (CPU-s)", idle_cpu, f"< {AIMS['idle_s']:g}", None),
        ]

    farm = LocalFarm.start(workdir / "logs", {"host": 1}) if parts & {"sweep", "noop"} else None
    try:
        if farm is not None and "sweep" in parts:
            rows += sweep_figures(workdir, farm.tracker, env, cores, args.quick)
        if farm is not None and "noop" in parts:
            jobs, rate = noop_jobs_per_second(workdir, farm.tracker, args.noop_targets)
            print(f"no-op: {jobs} jobs at {rate:.0f} jobs/s", flush=True)
            rows.append((f"no-op jobs/s ({jobs} jobs)", rate, f">= {AIMS['noop_jobs_s']:g}", BEFORE["noop_jobs_s"]))
    finally:
        if farm is not None:
            farm.stop()

    load_after = os.getloadavg()[0]
    what = "quick: tiny models" if args.quick else "light_squeezenet + light_shufflenet"
    print(f"\nfigures ({what}, {cores} cores, load average {load_before:.1f} -> {load_after:.1f}):")
    print(f"  {'':<40} {'now':>9}   {'before':>9}")
    for name, value, aim, before in rows:
        was = f"{before:>9.2f}" if before is not None else " " * 9
        print(f"  {name:<40} {value:>9.2f}   {was}   {('aim ' + aim) if aim else ''}")


def sweep_figures(workdir: Path, tracker: str, env: dict[str, str], cores: int, quick: bool) -> list[Any]:
    """The seed loop, T*, and `tvmbench sweep run` cold and cached, on the same configurations."""
    if quick:
        models = {}
        for name, proto in (("tiny_cnn", model_zoo.tiny_cnn()), ("conv_gemm_32", model_zoo.conv_gemm_32())):
            models[name] = workdir / f"{name}.onnx"
            onnx.save(proto, str(models[name]))
    else:
        models = {name: bundled_path(name) for name in ("light_squeezenet", "light_shufflenet")}
    configs = [SeedConfig(m, p, e, o) for m, p in models.items() for e in EXECUTORS for o in OPT_LEVELS]
    sweep_path = _sweep_file(workdir / "sweep.toml", models)

    seed = seed_loop(configs, tracker, workdir)
    bound = t_star(seed, cores)
    print(f"seed loop: {seed.configs} configs in {seed.wall_s:.1f} s ({len(seed.codegen_cpu)} distinct "
          f"programs); T* = {bound:.1f} s", flush=True)  # fmt: skip
    cold_s, code, out, _ = tvmbench(["sweep", "run", str(sweep_path), "--tracker", tracker, "--json"], env)
    assert code == 0, out[-3000:]
    print(f"sweep run cold: {cold_s:.1f} s {_json_tail(out)['outcome']}", flush=True)
    cached_s, code, out, _ = tvmbench(
        ["sweep", "run", str(sweep_path), "--tracker", tracker, "--label", "cached", "--json"], env
    )
    assert code == 0, out[-3000:]
    print(f"sweep run cached: {cached_s:.1f} s {_json_tail(out)['outcome']}", flush=True)
    return [
        ("seed loop (s)", seed.wall_s, None, None),
        ("sweep run cold (s)", cold_s, None, None),
        ("sweep run cached (s)", cached_s, None, None),
        ("T* lower bound (s)", bound, None, None),
        ("cold speed-up vs seed loop (x)", seed.wall_s / cold_s, f">= {AIMS['cold']:g}", None),
        ("cached speed-up vs seed loop (x)", seed.wall_s / cached_s, f">= {AIMS['cached']:g}", None),
        ("cold / T* (x)", cold_s / bound, f"<= {AIMS['t_star']:g}", None),
    ]


if __name__ == "__main__":
    main()
