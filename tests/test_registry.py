"""The executor registry: every executor name has a Builder and a Runner taking one request record, and
the entry answers what the rest of the code used to ask by name (targets accepted, kernels axis, golden
model, tuning, baseline, unit, static memory)."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from tvmbench.core.records import Build, Job, ModelRef, Run
from workers.board_session import ok_run
from workers.build_common import tvm_versions
from workers.executors import registry
from workers.executors.base import Builder, Executor, Runner, not_mcu
from workers.executors.requests import BuildRequest, MeasureRequest
from workers.targets import PRESETS

ROOT = Path(__file__).resolve().parent.parent


def test_every_executor_has_a_builder_and_a_runner_taking_one_request() -> None:
    assert registry.NAMES == ("vm-bytecode", "vm-compiled", "onnxruntime", "aot-c")
    assert list(inspect.signature(Runner.run).parameters) == ["self", "request"]
    assert list(inspect.signature(Builder.build).parameters) == ["self", "request"]
    for name in registry.NAMES:
        entry = registry.get(name)
        assert list(inspect.signature(entry.runner.run).parameters) == ["request"], name
        assert list(inspect.signature(entry.builder.build).parameters) == ["request"], name
        assert not hasattr(entry.builder, "build_tuned"), f"{name}: tuned and untuned builds are one entry"
    assert Builder is not Runner


def test_entries_say_which_targets_kernels_and_golden_model() -> None:
    host, mcu = PRESETS["host"], PRESETS["cortex-m4"]
    assert [n for n in registry.NAMES if registry.accepts(n, host)] == ["vm-bytecode", "vm-compiled", "onnxruntime"]
    assert [n for n in registry.NAMES if registry.accepts(n, mcu)] == ["aot-c"]
    assert registry.get("aot-c").kernel_paths == ("c", "llvm") and registry.KERNEL_PATHS == ("c", "llvm")
    assert registry.get("vm-compiled").golden_executor == "vm-compiled"
    assert registry.get("onnxruntime").golden_executor is None  # the golden model is a Relax VM program


def test_unknown_executor_names_the_known_ones() -> None:
    try:
        registry.get("tensorrt")
    except KeyError as exc:
        assert "tensorrt" in str(exc) and "vm-bytecode" in str(exc)
    else:
        raise AssertionError("an unknown executor must not resolve")


def test_claims_give_each_program_one_compiler() -> None:
    from workers.program_index import Claims

    claims = Claims({"p0": "cached-build"})
    assert claims.claim("p1", "b1") is None, "the first build of a program compiles it"
    assert claims.claim("p1", "b2") == "b1" and claims.claim("p1", "b1") is None, "a retried task compiles again"
    assert claims.claim("p0", "b3") == "cached-build"
    claims.release("p1", "b1")
    assert claims.claim("p1", "b2") is None, "after a failed compile, the next claim compiles"


def test_onnx_import_is_cached_per_model_and_signature(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    from tvmbench.core.records import Job, ModelRef
    from workers import model_zoo
    from workers.build_common import build_identity
    from workers.executors import relax_vm

    data = model_zoo.tiny_mlp().SerializeToString()
    ref = ModelRef("tiny_mlp", hashlib.sha256(data).hexdigest(), "x", (("x", (1, 16), "float32"),))
    job = Job(model=ref, target=PRESETS["host"], executor="vm-bytecode", opt_level=2, pipeline="per-target")
    first = relax_vm.import_model(job, data, build_identity(job))
    assert relax_vm.import_model(job, data, build_identity(job)) is first
    other = ModelRef("tiny_mlp", ref.sha256, "x", (("x", (2, 16), "float32"),))
    job2 = Job(model=other, target=PRESETS["host"], executor="vm-bytecode", opt_level=2, pipeline="per-target")
    assert relax_vm.import_model(job2, data, build_identity(job2)) is not first


def _job(executor: str = "vm-bytecode", tuning: int = 0) -> Job:
    data = b"model bytes"
    ref = ModelRef("m", hashlib.sha256(data).hexdigest(), "x", (("x", (1, 16), "float32"),))
    return Job(model=ref, target=PRESETS["host"], executor=executor, opt_level=2, pipeline="per-target", tuning=tuning)


def test_traits_answer_tuning_baseline_unit_and_static_memory() -> None:
    llvm, cuda, tag = {"kind": "llvm"}, {"kind": "cuda"}, {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}
    assert registry.tunable("vm-bytecode", llvm) and registry.tunable("vm-compiled", tag)
    assert not registry.tunable("vm-bytecode", cuda), "only llvm targets are tunable"
    assert not registry.tunable("onnxruntime", llvm) and not registry.tunable("aot-c", llvm)
    assert registry.tunable_names() == ("vm-bytecode", "vm-compiled") and registry.tunable_kinds() == ("llvm",)
    assert registry.baseline_names() == ("onnxruntime",)
    assert registry.static_memory_names() == ("aot-c",)
    assert registry.unit("aot-c") == "instructions" and registry.unit("vm-compiled") == registry.unit("onnxruntime")
    assert registry.unit("onnxruntime") == "ms"


def test_the_vm_modes_share_an_untuned_configurations_lowering_and_nothing_else_does() -> None:
    from dataclasses import replace

    def shared(job: Job) -> str | None:
        return registry.for_job(job).shared_lowering(job)

    bytecode, compiled = _job("vm-bytecode"), _job("vm-compiled")
    assert shared(bytecode) is not None and shared(bytecode) == shared(compiled)
    for other in (
        replace(compiled, opt_level=3),
        replace(compiled, layout="NHWC"),
        replace(compiled, pipeline="generic"),
    ):
        assert shared(other) != shared(bytecode), other
    assert shared(_job("vm-compiled", tuning=64)) is None, "a tuned job's pipeline is its own search"
    assert shared(_job("onnxruntime")) is None


def test_importing_the_registry_loads_no_executor_code() -> None:
    """The answers import the registry for its traits: no TVM, ONNX, ONNX Runtime, Ray or executor module."""
    code = (
        "import sys, workers.executors.registry as r; r.tunable('vm-bytecode', {'kind': 'llvm'}); "
        "heavy = ('tvm', 'tvm_ffi', 'onnx', 'onnxruntime', 'ray', 'numpy', 'workers.executors.relax_vm', "
        "'workers.executors.onnxruntime', 'workers.executors.aot_c', 'workers.board_session'); "
        "print(sorted(m for m in sys.modules if m in heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_an_entry_without_code_or_module_says_so() -> None:
    entry = Executor("nothing", accepts=not_mcu)
    with pytest.raises(LookupError, match="nothing"):
        entry.builder  # noqa: B018


def test_a_measure_request_carries_what_the_runner_took_before() -> None:
    """The 13 parameters of the old ``Runner.run``, in order, with the same defaults."""
    fields = dataclasses.fields(MeasureRequest)
    assert [f.name for f in fields] == [
        "job", "build", "artifact", "inputs", "reference", "tracker", "attempt", "builds_in_flight",
        "avoid", "prefer_not", "registration_wait_s", "golden", "checked_boards",
    ]  # fmt: skip
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    assert defaults == {
        "attempt": 1,
        "builds_in_flight": None,
        "avoid": frozenset(),
        "prefer_not": frozenset(),
        "registration_wait_s": None,
        "golden": None,
        "checked_boards": frozenset(),
    }
    assert [f.name for f in dataclasses.fields(BuildRequest)] == [
        "job", "model_data", "claim", "hold", "tuning_env", "toolchain",
    ]  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        BuildRequest(_job(), b"").toolchain = "0.1"  # type: ignore[misc]


class _RecordingBuilder:
    def __init__(self) -> None:
        self.requests: list[BuildRequest] = []

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        self.requests.append(request)
        tuned = {"budget": request.job.tuning} if request.job.tuning else None
        return Build(build_key=request.job.build_key("fake"), status="ok", tuning=tuned), b"artifact"


class _RecordingRunner:
    def __init__(self) -> None:
        self.requests: list[MeasureRequest] = []

    def run(self, request: MeasureRequest) -> Run:
        self.requests.append(request)
        return ok_run([1.0, 2.0, 3.0], job_key=request.job.key, attempt=request.attempt)


def test_fake_executors_written_against_the_records_work_through_the_registry(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    builder, runner = _RecordingBuilder(), _RecordingRunner()
    monkeypatch.setitem(registry.REGISTRY, "vm-bytecode", Executor("vm-bytecode", builder, runner, accepts=not_mcu))
    tuned = _job(tuning=64)
    claim = lambda program, build_key: None  # noqa: E731
    build, artifact = registry.build_job(BuildRequest(tuned, b"onnx", claim=claim, hold="hold", tuning_env="env"))
    assert build.ok and build.tuning == {"budget": 64} and artifact == b"artifact"
    (seen,) = builder.requests
    assert (seen.job, seen.model_data, seen.claim, seen.hold, seen.tuning_env) == (tuned, b"onnx", claim, "hold", "env")

    request = MeasureRequest(
        tuned,
        build,
        artifact,
        {"x": None},
        [],
        "127.0.0.1:1",
        attempt=2,
        avoid=frozenset({"b0"}),  # type: ignore[dict-item]
    )
    run = registry.measure_job(request)
    assert run.ok and run.job_key == tuned.key and run.attempt == 2 and run.median_ms == 2.0
    assert runner.requests == [request] and runner.requests[0].avoid == frozenset({"b0"})


def test_a_build_for_another_toolchain_fails_as_data() -> None:
    """The baseline's builder (no compiler to load) refuses a TVM it is not running, and takes its own."""
    running = tvm_versions()[0]
    job = _job("onnxruntime")
    build, artifact = registry.build_job(BuildRequest(job, b"onnx bytes", toolchain="0.0.1"))
    assert build.status == "build" and artifact is None and "0.0.1" in (build.error or "")
    build, artifact = registry.build_job(BuildRequest(job, b"onnx bytes", toolchain=running))
    assert build.ok and artifact == b"onnx bytes"
    assert registry.build_job(BuildRequest(job, b"onnx bytes"))[0].build_key == build.build_key, "None: the running one"
