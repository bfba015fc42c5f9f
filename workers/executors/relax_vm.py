"""The Relax VM executors (``vm-bytecode``, ``vm-compiled``): ONNX -> Relax -> VM executable, run over RPC.

Builder: every pass that runs is recorded by an instrument on the same PassContext that carries the
opt_level (the seed question of this field was "did my opt_level apply?"), and the lowered IR is
fingerprinted, so the database can say whether two configurations built the same program. The steps
are separate functions (import -> pipeline -> fingerprint -> codegen/export) so that a stage such as
tuning slots in between the pipeline and codegen.

Runner: upload the library, open a VM on the board, check the outputs of its first inference against
ONNX Runtime, time "main" with TVM's time_evaluator in batches until the stop rule fires
(workers/sampling.py), optionally profile every kernel call on the board. Upload, load, first inference,
the session's memory and the board's state are measured apart (workers/phases.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from tvmbench.core.errors import one_line
from tvmbench.core.health import GoldenModel
from tvmbench.core.records import Build, Job, Run, canonical_hash
from workers.artifacts import elf_arch
from workers.board_session import SessionRunner, check_outputs, ok_run
from workers.build_common import build_identity, make_target, pass_trace_instrument
from workers.executors.requests import BuildRequest, MeasureRequest, foreign_toolchain
from workers.memory_plan import memory_plan_probe
from workers.phases import PhaseLog
from workers.program_index import ClaimFn, reuse_key
from workers.reference import compare
from workers.rewrites import REWRITTEN, rewritten_module
from workers.sampling import SamplingPlan, sample, time_evaluator_timer
from workers.tracker_client import Session
from workers.vm_program import artifact_name, codegen_export, device, load_vm

# --- build ------------------------------------------------------------------------------------------


class BuildFailed(Exception):
    """A step of the build failed; ``build`` is the failed Build to return."""

    def __init__(self, build: Build) -> None:
        super().__init__(build.error)
        self.build = build


# ONNX import is per model, not per configuration: a worker keeps the last few imported modules (Relax
# passes return new modules and never change their input, so one import serves every configuration).
IMPORT_CACHE_SIZE = 4
_imported: OrderedDict[tuple[str, str], Any] = OrderedDict()


def import_model(job: Job, model_data: bytes, common: dict[str, Any]) -> Any:
    """The Relax module of the job's ONNX model (BuildFailed with status "model" when it cannot be imported).

    Imported once per worker process for a given model and input signature (keyed by sha256).
    """
    key = (hashlib.sha256(model_data).hexdigest(), canonical_hash(job.model.shape_dict))
    if key in _imported:
        _imported.move_to_end(key)
        return _imported[key]
    mod = _import(job, model_data, common)
    _imported[key] = mod
    while len(_imported) > IMPORT_CACHE_SIZE:
        _imported.popitem(last=False)
    return mod


def _import(job: Job, model_data: bytes, common: dict[str, Any]) -> Any:
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    try:
        model = onnx.load_from_string(model_data)
        # Defence in depth (intake refuses these): from_onnx would read external data relative to the
        # worker's working directory, i.e. any file the location names.
        if any(t.external_data or t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            raise BuildFailed(Build(status="model", error="model keeps weights in external data (not read)", **common))
        return from_onnx(model, shape_dict=job.model.shape_dict, keep_params_in_input=False)
    except BuildFailed:
        raise
    except Exception as exc:
        raise BuildFailed(Build(status="model", error=f"ONNX import failed: {one_line(exc)}", **common)) from None


@dataclass(frozen=True)
class Lowering:
    """An untuned configuration's program before codegen, and what its builds record of getting there."""

    module: Any
    layout: dict[str, Any] | None
    pass_trace: tuple[str, ...]
    memory: dict[str, Any] | None
    seconds: float


# The Relax VM modes differ only in codegen: the scheduler gives the builds of one untuned configuration by
# both to one task (Executor.lowering), and the second takes the first's lowered module (never changed by
# codegen, as imported modules are never changed by passes) instead of running the pipeline again. Only the
# last is kept: the builds that share it come one after another in one task, and it holds the weights.
_lowered: dict[str, Lowering] = {}  # lowering key -> the last lowering of this process


def _shared_lowering(job: Job) -> Lowering | None:
    return None if job.tuning else _lowered.get(job.lowering_key())


def _keep_lowering(job: Job, lowering: Lowering) -> None:
    _lowered.clear()
    _lowered[job.lowering_key()] = lowering


def pipeline_passes(name: str, target: Any) -> Any:
    """TVM's passes of the Relax pipeline called ``name`` (records.PIPELINES) for ``target``: the rewrites of
    the pipelines named after per-target run before the layout axis (``rewritten_module``), not here."""
    from tvm import relax

    if name == "per-target" or name in REWRITTEN:
        return relax.get_default_pipeline(target)
    return relax.get_pipeline("default")


def run_pipeline(job: Job, mod: Any, target: Any) -> Any:
    """The job's Relax pipeline on ``mod`` (call inside the job's PassContext)."""
    with target:
        return pipeline_passes(job.pipeline, target)(mod)


def fingerprint(job: Job, lowered: Any, tvm_version: str) -> str:
    """The program's identity: the structure of the lowered IR plus what turns it into machine code.

    The .so bytes differ between identical builds (pointer strings in LLVM metadata), so the bytes
    cannot say that two configurations built the same program; the lowered IR can.
    """
    import tvm_ffi

    return canonical_hash(
        {
            "ir": str(tvm_ffi.structural_hash(lowered)),
            "executor": job.executor,
            "target": job.target.tvm_target,
            "tvm": tvm_version,
        }
    )[:16]


def kernel_count(lowered: Any) -> int:
    """TIR functions (kernels) in the lowered module."""
    import tvm

    return sum(1 for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc))


def _missing_cross_compiler(job: Job, common: dict[str, Any]) -> Build | None:
    if job.target.cross_compiler and shutil.which(job.target.cross_compiler) is None:
        package = job.target.cross_compiler_package or "the cross compiler's package"
        return Build(
            status="build",
            error=f"cross compiler {job.target.cross_compiler} not found on "
            f"{socket.gethostname()}: apt-get install {package}",
            **common,
        )
    return None


def _build_error(job: Job, exc: Exception) -> str:
    if job.target.cross_compiler and "cannot find crt" in str(exc):
        # The compiler is there but not the target's C library (installed without recommends).
        return (
            f"{job.target.cross_compiler} cannot link: the target's C runtime is missing "
            f"on {socket.gethostname()}: apt-get install {job.target.cross_compiler_package}"
        )
    return one_line(exc)


def _ask(claim: ClaimFn | None, key: str, build_key: str) -> str | None:
    """The build key that compiles this program already, or None (no index, or it did not answer: compile)."""
    if claim is None:
        return None
    try:
        return claim(key, build_key)
    except Exception:
        return None


class RelaxVmBuilder:
    """Builder of the Relax VM executors: import, pipeline, fingerprint, codegen and export.

    A new stage (tuning) goes between ``run_pipeline`` and ``fingerprint``: the fingerprint must see the
    program that codegen will compile.
    """

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        """Compile one job; returns the build record and the exported library's bytes (None on failure).

        A job of the layout axis has its module converted first (workers/layouts.py), in the traced
        PassContext. A tuned job (``job.tuning`` > 0): the tuning stage (workers/tuning/stage.py) replaces the pipeline
        inside the same traced PassContext, tuning on the farm ``request.tuning_env`` describes; the
        build's host-fence hold (``request.hold``) is let go while its candidates are timed. With
        ``request.claim``, a program that another build compiles already (same fingerprint) skips codegen
        and export: the Build is ok, has ``reused_from`` and no bytes.
        """
        import tvm

        job, model_data, claim = request.job, request.model_data, request.claim
        common = build_identity(job)
        missing = foreign_toolchain(request, common) or _missing_cross_compiler(job, common)
        if missing is not None:
            return missing, None
        try:
            mod = import_model(job, model_data, common)
        except BuildFailed as failed:
            return failed.build, None
        trace = pass_trace_instrument()
        memory = memory_plan_probe()  # the static memory plan, taken after StaticPlanBlockMemory
        started = time.perf_counter()
        reused_from = None
        tuning: dict[str, Any] | None = None
        layout: dict[str, Any] | None = None
        # Another executor's build of this configuration lowered it in this process: its passes and seconds
        # are this build's too (compile_s stays what the configuration costs to build alone).
        shared = _shared_lowering(job)
        before, earlier_s = (shared.pass_trace, shared.seconds) if shared else ((), 0.0)
        try:
            target = make_target(job.target.tvm_target)
            with tvm.transform.PassContext(opt_level=job.opt_level, instruments=[trace] if shared else [trace, memory]):
                if shared is not None:
                    lowered, layout = shared.module, shared.layout
                else:
                    # The pipeline's graph rewrites and the layout axis first: the pipeline's TVM passes, and
                    # tuning's task extraction, see the rewritten and converted module.
                    mod, layout = rewritten_module(job, mod)
                    if job.tuning:
                        from workers.tuning.stage import TuningEnv, tuned_lowering

                        env = request.tuning_env or TuningEnv(tracker="")
                        lowered, target, tuning = tuned_lowering(job, mod, env, request.hold, request.model_data)
                    else:
                        lowered = run_pipeline(job, mod, target)
                        shared = Lowering(
                            lowered, layout, tuple(trace.names), _static_memory(memory), time.perf_counter() - started
                        )
                        _keep_lowering(job, shared)
                # After tuning: the fingerprint says whether the tuned program differs from the untuned one.
                program = fingerprint(job, lowered, common["tvm_version"])
                pipeline_passes = len(before) + len(trace.names)
                reused_from = _ask(claim, reuse_key(program, job), common["build_key"])
                data = None if reused_from else codegen_export(job, lowered, target)
        except Exception as exc:
            return Build(
                status="build",
                error=_build_error(job, exc),
                pass_trace=(*before, *trace.names),
                compile_s=earlier_s + time.perf_counter() - started,
                tuning=getattr(exc, "tuning", tuning),  # a TuningMiss carries what the search found
                layout=layout,
                **common,
            ), None
        facts: dict[str, Any] = (
            {"reused_from": reused_from}
            if data is None
            else {
                "artifact_sha256": hashlib.sha256(data).hexdigest(),
                "artifact_size": len(data),
                "artifact_arch": elf_arch(data),
            }
        )
        return Build(
            status="ok",
            fingerprint=program,
            pass_trace=(*before, *trace.names),
            pipeline_passes=pipeline_passes,
            kernel_count=kernel_count(lowered),
            compile_s=earlier_s + time.perf_counter() - started,
            memory=shared.memory if shared else _static_memory(memory),
            tuning=tuning,
            layout=layout,
            **facts,
            **common,
        ), data


def _static_memory(probe: Any) -> dict[str, Any] | None:
    """The build's static memory plan, or a record of why there is none (never a made-up zero)."""
    try:
        return probe.result()
    except ValueError as exc:
        return {"kind": "relax-static-plan", "available": False, "reason": str(exc)}


# --- run --------------------------------------------------------------------------------------------


def kernel_profile(remote: Any, file_name: str, args: list[Any], repeat: int) -> dict[str, Any]:
    """Per-kernel times of an uploaded module, taken on the board by the agent's ``tvmbench.profile``.

    A board without the agent (a stock ``tvm.exec.rpc_server``) or a profile that fails leaves the run
    as it is: the profile is then recorded as unavailable, with the reason.
    """
    import json

    try:
        profile_fn = remote.get_function("tvmbench.profile")
    except Exception:
        return {
            "available": False,
            "reason": "the board runs a stock TVM RPC server; per-kernel profiles need workers/board_agent.py",
        }
    try:
        return json.loads(profile_fn(file_name, repeat, *args))
    except Exception as exc:
        return {"available": False, "reason": f"profiling failed on the board: {one_line(exc)}"}


def _outputs_to_numpy(out: Any) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    flat: list[np.ndarray] = []
    for item in out:
        flat.extend(_outputs_to_numpy(item))
    return flat


def _run_outputs(vm: Any, args: list[Any]) -> list[np.ndarray]:
    """Run "main" once and fetch its outputs as numpy arrays.

    Over RPC a tuple result comes back as an opaque RPCObjectRef (calling ``vm["main"]`` directly made
    every multi-output model fail); the stateful interface hands the outputs back one by one.
    """
    vm.set_input("main", *args)
    vm.invoke_stateful("main")
    return _outputs_to_numpy(vm.get_outputs("main"))


def run_golden(remote: Any, golden: GoldenModel, job: Job) -> str | None:
    """Run the golden model on the session's board; None when its outputs match, else the problem."""
    import tvm

    try:
        dev = device(remote, job)
        vm = load_vm(remote, golden.artifact, golden.sha256, dev)
        args = [tvm.runtime.tensor(golden.inputs[n], dev) for n in golden.input_names]
        outputs = _run_outputs(vm, args)
    except Exception as exc:
        return one_line(exc)
    _, _, problem = compare(outputs, list(golden.expected), golden.atol, golden.rtol)
    return problem


class RelaxVmRunner(SessionRunner):
    """Runner of the Relax VM executors over TVM RPC, health-checked with the golden model."""

    golden_check = staticmethod(run_golden)

    def on_board(self, session: Session, request: MeasureRequest, base: dict[str, Any]) -> Run:
        import tvm

        job, build, artifact = request.job, request.build, request.artifact
        inputs, reference, builds_in_flight = request.inputs, request.reference, request.builds_in_flight
        remote, settings = session.remote, job.measure
        dev = device(remote, job)
        log = PhaseLog()  # workers/phases.py: upload, load, first inference, memory and board state apart
        log.read_memory(remote, "before_load")
        log.upload(remote, artifact, artifact_name(build.artifact_sha256))
        vm = log.load_vm(remote, artifact_name(build.artifact_sha256), dev)
        args = [tvm.runtime.tensor(inputs[n], dev) for n, _, _ in job.model.inputs]
        log.read_memory(remote, "after_load")
        log.first_inference(remote, vm, dev, args)
        outputs = _outputs_to_numpy(vm.get_outputs("main"))
        max_abs, max_rel, wrong = check_outputs(outputs, reference, settings, base)
        if wrong is not None:
            return wrong
        load = os.getloadavg()[0]
        log.read_state(remote, "before")
        sampled = sample(time_evaluator_timer(vm, dev, settings, args), SamplingPlan.from_settings(settings))
        log.read_state(remote, "after")
        log.read_memory(remote, "after_runs")
        if settings.profile:
            base["kernel_profile"] = kernel_profile(remote, artifact_name(build.artifact_sha256), args, settings.repeat)
        return ok_run(
            sampled.samples_ms,
            max_abs_err=max_abs,
            max_rel_err=max_rel,
            load_avg_1m=load,
            builds_in_flight=builds_in_flight,
            **log.fields(sampled),
            **base,
        )


# Both VM executors (vm-bytecode, vm-compiled) build and run with these; their entries are in registry.py.
BUILDER = RelaxVmBuilder()
RUNNER = RelaxVmRunner()
