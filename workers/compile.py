"""Build: ONNX -> Relax -> VM executable inside an explicit PassContext, recording what actually ran.

The seed question of this field was "did my opt_level apply?". Every pass that runs is recorded by an
instrument on the same PassContext that carries the opt_level, and the lowered IR is fingerprinted, so
the database can say whether two configurations built the same program.
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from workers.artifacts import elf_arch
from workers.records import BASELINE_EXECUTOR, Build, Job, canonical_hash


def tvm_versions() -> tuple[str, str]:
    """(apache-tvm, apache-tvm-ffi) versions of this process."""
    import tvm
    import tvm_ffi

    return tvm.__version__, tvm_ffi.__version__


def one_line(exc: BaseException, limit: int = 400) -> str:
    """The most telling line of an exception: TVM errors carry a traceback before the message."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    message = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def make_target(tvm_target: dict[str, Any]):
    """A tvm.target.Target from the dict form or {"tag": name}."""
    from tvm.target import Target

    if set(tvm_target) == {"tag"}:
        return Target(tvm_target["tag"])
    return Target(dict(tvm_target))


def pass_trace_instrument() -> Any:
    """A PassContext instrument whose ``names`` lists every pass that actually ran, in order."""
    import tvm

    @tvm.instrument.pass_instrument
    class PassTrace:
        def __init__(self) -> None:
            self.names: list[str] = []

        def run_before_pass(self, _mod: Any, info: Any) -> None:
            self.names.append(info.name)

    return PassTrace()


def _pipeline(name: str, target):
    from tvm import relax

    if name == "per-target":
        return relax.get_default_pipeline(target)
    return relax.get_pipeline("default")


def build_job(job: Job, model_data: bytes, *, fence: Any = None, tuning_env: Any = None) -> tuple[Build, bytes | None]:
    """Compile one job; returns the build record and the exported library's bytes (None on failure).

    Never raises for a bad model or a compiler error: those come back as a Build with status
    "model" or "build". ``fence`` (a ``workers.fence.Fence``) is held while compiling; a tuned job
    (``job.tuning`` > 0) tunes on the farm that ``tuning_env`` (a ``workers.tuning.stage.TuningEnv``)
    describes, letting go of the fence while its candidates are timed.
    """
    if fence is None:
        from workers.fence import Fence

        fence = Fence(None)
    with fence.building() as hold:
        return _build_job(job, model_data, hold, tuning_env)


def _build_job(job: Job, model_data: bytes, hold: Any, tuning_env: Any) -> tuple[Build, bytes | None]:
    if job.executor == "aot-c":  # microcontrollers: standalone C firmware, not a VM executable
        from workers.aot.job import build_aot_job

        return build_aot_job(job, model_data)
    import onnx
    import tvm
    import tvm_ffi
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    tvm_version, ffi_version = tvm_versions()
    build_key = job.build_key(tvm_version)
    common: dict[str, Any] = {
        "build_key": build_key,
        "tvm_version": tvm_version,
        "ffi_version": ffi_version,
        "host": socket.gethostname(),
    }
    if job.executor == BASELINE_EXECUTOR:
        # The baseline runs the ONNX file itself on the board: nothing to compile, the model is the artifact.
        return Build(
            status="ok",
            fingerprint=canonical_hash({"onnx": hashlib.sha256(model_data).hexdigest(), "executor": job.executor})[:16],
            compile_s=0.0,
            artifact_sha256=hashlib.sha256(model_data).hexdigest(),
            artifact_size=len(model_data),
            **common,
        ), model_data
    if job.target.cross_compiler and shutil.which(job.target.cross_compiler) is None:
        package = job.target.cross_compiler_package or "the cross compiler's package"
        return Build(
            status="build",
            error=f"cross compiler {job.target.cross_compiler} not found on "
            f"{socket.gethostname()}: apt-get install {package}",
            **common,
        ), None
    try:
        model = onnx.load_from_string(model_data)
        # Defence in depth (intake refuses these): from_onnx would read external data relative to the
        # worker's working directory, i.e. any file the location names.
        if any(t.external_data or t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            return Build(status="model", error="model keeps weights in external data (not read)", **common), None
        mod = from_onnx(model, shape_dict=job.model.shape_dict, keep_params_in_input=False)
    except Exception as exc:
        return Build(status="model", error=f"ONNX import failed: {one_line(exc)}", **common), None

    trace = pass_trace_instrument()
    started = time.perf_counter()
    tuning: dict[str, Any] | None = None
    try:
        target = make_target(job.target.tvm_target)
        with tvm.transform.PassContext(opt_level=job.opt_level, instruments=[trace]):
            if job.tuning:
                from workers.tuning.stage import TuningEnv, tuned_lowering

                lowered, target, tuning = tuned_lowering(job, mod, tuning_env or TuningEnv(tracker=""), hold)
            else:
                with target:
                    lowered = _pipeline(job.pipeline, target)(mod)
            executable = relax.build(lowered, target, relax_pipeline=None, exec_mode=job.executor.removeprefix("vm-"))
        with tempfile.TemporaryDirectory(prefix="tvmbench-build-") as tmp:
            lib_path = Path(tmp) / "program.so"
            if job.target.cross_compiler:
                from tvm.support import cc

                executable.export_library(str(lib_path), fcompile=cc.cross_compiler(job.target.cross_compiler))
            else:
                executable.export_library(str(lib_path))
            data = lib_path.read_bytes()
    except Exception as exc:
        error = one_line(exc)
        tuning = getattr(exc, "tuning", tuning)  # a TuningMiss carries what the search found
        if job.target.cross_compiler and "cannot find crt" in str(exc):
            # The compiler is there but not the target's C library (installed without recommends).
            error = (
                f"{job.target.cross_compiler} cannot link: the target's C runtime is missing "
                f"on {socket.gethostname()}: apt-get install {job.target.cross_compiler_package}"
            )
        return Build(
            status="build",
            error=error,
            pass_trace=tuple(trace.names),
            compile_s=time.perf_counter() - started,
            tuning=tuning,
            **common,
        ), None
    compile_s = time.perf_counter() - started
    kernels = sum(1 for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    # The .so bytes differ between identical builds (pointer strings in LLVM metadata), so the program
    # is identified by the structure of the lowered IR plus what turns it into machine code.
    fingerprint = canonical_hash(
        {
            "ir": str(tvm_ffi.structural_hash(lowered)),
            "executor": job.executor,
            "target": job.target.tvm_target,
            "tvm": tvm_version,
        }
    )[:16]
    return Build(
        status="ok",
        fingerprint=fingerprint,
        pass_trace=tuple(trace.names),
        kernel_count=kernels,
        compile_s=compile_s,
        artifact_sha256=hashlib.sha256(data).hexdigest(),
        artifact_size=len(data),
        artifact_arch=elf_arch(data),
        tuning=tuning,
        **common,
    ), data
