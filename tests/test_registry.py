"""The executor registry: every executor name has a Builder and a Runner, and the entry answers what the
rest of the code used to ask by name (targets accepted, kernels axis, golden model)."""

from __future__ import annotations

import inspect

from workers.executors import registry
from workers.executors.base import Builder, Runner
from workers.targets import PRESETS


def test_every_executor_has_a_builder_and_a_runner_of_the_protocol_shape() -> None:
    assert registry.NAMES == ("vm-bytecode", "vm-compiled", "onnxruntime", "aot-c")
    run_params = list(inspect.signature(Runner.run).parameters)
    for name in registry.NAMES:
        entry = registry.get(name)
        assert callable(entry.builder.build) and callable(entry.runner.run), name
        assert list(inspect.signature(entry.runner.run).parameters) == run_params[1:], name
        assert list(inspect.signature(entry.builder.build).parameters) == ["job", "model_data", "claim"], name
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
