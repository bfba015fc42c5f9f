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
        assert list(inspect.signature(entry.builder.build).parameters) == ["job", "model_data"], name
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
