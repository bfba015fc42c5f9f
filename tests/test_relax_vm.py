"""Real TVM Relax builds: the pass trace and fingerprint answer "did my opt_level apply?"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import onnx
import pytest

from orchestrator.plan import plan_jobs
from orchestrator.spec import parse_spec
from tvmbench.core.records import Job
from workers.executors.registry import build_job
from workers.executors.requests import BuildRequest


@pytest.fixture(scope="module")
def cnn_jobs(models_dir: Path) -> dict[tuple[str, int, str], Job]:
    text = (
        "[[models]]\npath = 'tiny_cnn.onnx'\n[axes]\nexecutor = ['vm-bytecode']\n"
        "opt_level = [0, 2, 3]\npipeline = ['per-target', 'generic']\n"
    )
    jobs = plan_jobs(parse_spec(text, base=models_dir))
    return {(j.executor, j.opt_level, j.pipeline): j for j in jobs}


@pytest.fixture(scope="module")
def cnn_data(models_dir: Path) -> bytes:
    return (models_dir / "tiny_cnn.onnx").read_bytes()


def test_opt_level_changes_trace_and_program(cnn_jobs: dict, cnn_data: bytes) -> None:
    b0, lib0 = build_job(BuildRequest(cnn_jobs[("vm-bytecode", 0, "per-target")], cnn_data))
    b2, _ = build_job(BuildRequest(cnn_jobs[("vm-bytecode", 2, "per-target")], cnn_data))
    b3, _ = build_job(BuildRequest(cnn_jobs[("vm-bytecode", 3, "per-target")], cnn_data))
    assert b0.ok and b2.ok and b3.ok, (b0.error, b2.error, b3.error)
    # FuseOps/FuseTIR do nothing at opt_level 0, so level 0 leaves one kernel per operator.
    assert "FuseOps" in b2.pass_trace
    assert b0.pass_trace != b2.pass_trace
    assert b0.fingerprint != b2.fingerprint
    assert b0.kernel_count > b2.kernel_count
    # Levels 2 and 3 build the same program on this pipeline: same fingerprint, different build keys.
    assert b2.fingerprint == b3.fingerprint
    assert b2.build_key != b3.build_key
    assert lib0 is not None and lib0[:4] == b"\x7fELF" and len(lib0) == b0.artifact_size
    assert b0.artifact_arch == "x86_64" or b0.artifact_arch == __import__("platform").machine()
    assert b0.tvm_version == "0.27.0.post1" and b0.ffi_version == "0.1.14.post1"
    assert b0.compile_s > 0


def test_pipelines_differ(cnn_jobs: dict, cnn_data: bytes) -> None:
    generic, _ = build_job(BuildRequest(cnn_jobs[("vm-bytecode", 2, "generic")], cnn_data))
    fused, _ = build_job(BuildRequest(cnn_jobs[("vm-bytecode", 2, "per-target")], cnn_data))
    assert generic.ok, generic.error
    assert "FuseOps" not in generic.pass_trace  # tvm.compile's CPU pipeline does not fuse
    assert generic.fingerprint != fused.fingerprint


def test_bad_model_is_a_model_error_value(cnn_jobs: dict) -> None:
    build, data = build_job(BuildRequest(cnn_jobs[("vm-bytecode", 2, "per-target")], b"not a model at all"))
    assert (build.status, data) == ("model", None)
    assert build.error.startswith("ONNX import failed")


def test_unsupported_operator_is_a_model_error(cnn_jobs: dict) -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])],
    )
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.example", 1)]
    )
    build, _ = build_job(BuildRequest(cnn_jobs[("vm-bytecode", 2, "per-target")], model.SerializeToString()))
    assert build.status == "model"
    assert "NoSuchOp" in build.error


def test_missing_cross_compiler_names_the_package(cnn_jobs: dict, cnn_data: bytes) -> None:
    job = cnn_jobs[("vm-bytecode", 2, "per-target")]
    target = replace(job.target, cross_compiler="no-such-gcc", cross_compiler_package="gcc-no-such")
    build, _ = build_job(BuildRequest(replace(job, target=target), cnn_data))
    assert build.status == "build"
    assert "no-such-gcc not found" in build.error and "apt-get install gcc-no-such" in build.error


def test_the_vm_modes_of_one_configuration_run_its_pipeline_once(
    cnn_jobs: dict, cnn_data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.executors import relax_vm

    ran: list[str] = []
    real = relax_vm.run_pipeline
    monkeypatch.setattr(
        relax_vm, "run_pipeline", lambda job, mod, target: ran.append(job.executor) or real(job, mod, target)
    )
    monkeypatch.setattr(relax_vm, "_lowered", {})  # nothing lowered before this test
    bytecode = cnn_jobs[("vm-bytecode", 2, "per-target")]
    compiled = replace(bytecode, executor="vm-compiled")
    b1, lib1 = build_job(BuildRequest(bytecode, cnn_data))
    b2, lib2 = build_job(BuildRequest(compiled, cnn_data))
    assert b1.ok and b2.ok, (b1.error, b2.error)
    assert ran == ["vm-bytecode"]  # the second mode took the first's lowered module
    # Each build records the whole pipeline, then its own codegen; the programs differ in codegen only.
    assert b2.pipeline_passes == b1.pipeline_passes and "FuseOps" in b2.pass_trace[: b2.pipeline_passes]
    assert b2.pass_trace[: b2.pipeline_passes] == b1.pass_trace[: b1.pipeline_passes]
    assert b2.pass_trace[b2.pipeline_passes :] and b1.fingerprint != b2.fingerprint
    assert b2.memory == b1.memory and b2.kernel_count == b1.kernel_count
    assert lib1 != lib2 and lib2 is not None and len(lib2) == b2.artifact_size
    # compile_s is what the configuration costs alone: the shared pipeline's seconds are in it.
    assert b2.compile_s > relax_vm._lowered[bytecode.lowering_key()].seconds
    # Another opt_level is another program: its own pipeline run.
    build_job(BuildRequest(replace(compiled, opt_level=3), cnn_data))
    assert ran == ["vm-bytecode", "vm-compiled"]
