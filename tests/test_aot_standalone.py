"""The AOT backend on its own: lowering, the lifetime-packed arena, firmware built with both kernel paths
and run under qemu-system-arm, checked against ONNX Runtime; a model too large for the board refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from workers import model_zoo
from workers.aot import AotUnsupported
from workers.aot.boards import BOARDS
from workers.aot.build import build_firmware
from workers.aot.firmware import GCC, write_support_files
from workers.aot.lower import import_onnx, lower_static, read_program
from workers.aot.memory import live_ranges, plan_arena, plan_workspace
from workers.aot.runner import QemuRunner, pack_inputs
from workers.onnx_model import seeded_inputs
from workers.reference import compare, reference_outputs

needs_toolchain = pytest.mark.skipif(
    shutil.which(GCC) is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm (bash scripts/setup.sh --system)",
)


def _signature(model) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    return tuple(
        (i.name, tuple(d.dim_value for d in i.type.tensor_type.shape.dim), "float32") for i in model.graph.input
    )


def _program(model):
    import tvm

    shapes = {n: list(s) for n, s, _ in _signature(model)}
    onnx_model, mod = import_onnx(model.SerializeToString(), shapes)
    with tvm.transform.PassContext(opt_level=2):
        lowered = lower_static(mod)
    return read_program(lowered, [o.name for o in onnx_model.graph.output], list(shapes))


def test_arena_packs_tensors_by_lifetime() -> None:
    program = _program(model_zoo.tiny_cnn())
    plan = plan_arena(program)
    ranges = live_ranges(program)
    assert plan.size < plan.naive_size, "tensors with disjoint lifetimes should share bytes"
    names = list(plan.offsets)
    shared = 0
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (fa, la), (fb, lb) = ranges[a], ranges[b]
            ea, eb = plan.offsets[a] + program.tensors[a].nbytes, plan.offsets[b] + program.tensors[b].nbytes
            overlap = plan.offsets[a] < eb and plan.offsets[b] < ea
            if overlap:
                shared += 1
                assert la < fb or lb < fa, f"{a} and {b} are alive together but overlap"
    assert shared > 0
    workspace = plan_workspace(program)
    # The padded input of the first convolution (3x18x18 floats) is a workspace temporary.
    assert workspace.per_kernel["fused_conv2d_add"] >= 3 * 18 * 18 * 4


def _run_model(model, kernels: str, board_name: str, out_dir: Path, repeat: int = 2):
    board = BOARDS[board_name]
    sig = _signature(model)
    data = model.SerializeToString()
    built = build_firmware(data, {n: list(s) for n, s, _ in sig}, board, kernels, out_dir)
    inputs = seeded_inputs(sig, 0)
    result = QemuRunner(board).run(
        built.elf.read_bytes(), pack_inputs([inputs[n].tobytes() for n, _, _ in sig], repeat), repeat, 60
    )
    assert result.status == "ok", result.error
    outputs, offset = [], 0
    for spec in built.manifest["outputs"]:
        size = int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
        outputs.append(np.frombuffer(result.outputs[offset : offset + size], spec["dtype"]).reshape(spec["shape"]))
        offset += size
    return built, result, compare(outputs, reference_outputs(data, inputs), 1e-4, 1e-3)


@needs_toolchain
@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["c", "llvm"])
def test_firmware_matches_onnxruntime_on_cortex_m4(kernels: str, tmp_path: Path) -> None:
    built, result, (max_abs, _, problem) = _run_model(model_zoo.tiny_cnn(), kernels, "cortex-m4", tmp_path)
    assert problem is None and max_abs < 1e-4
    assert len(result.instructions) == 2 and result.instructions[0] == result.instructions[1] > 10_000
    mem = built.memory
    assert mem["flash_bytes"] > mem["weights_bytes"] >= 23_000
    # The pool is sized by what the lowered kernels allocate: the largest kernel fills it exactly, and
    # the bound from the fused TIR (before lowering inlines intermediates) is looser.
    assert result.workspace_peak == mem["workspace_bytes"] < mem["workspace_ir_bound_bytes"]
    assert mem["ram_bytes"] >= mem["arena_bytes"] + mem["workspace_bytes"]
    assert "tvmbench_run(void* const* inputs, void* const* outputs)" in (tmp_path / "tvmbench_model.h").read_text()


@needs_toolchain
@pytest.mark.slow
def test_two_outputs_on_cortex_m3(tmp_path: Path) -> None:
    built, _result, (_, _, problem) = _run_model(model_zoo.two_outputs(), "c", "cortex-m3", tmp_path, repeat=1)
    assert problem is None
    assert [o["name"] for o in built.manifest["outputs"]] == ["ya", "yb"]
    header = (tmp_path / "tvmbench_model.h").read_text()
    assert "'ya'" in header and "'yb'" in header


def test_model_too_large_for_the_board_is_refused_naming_sizes(tmp_path: Path) -> None:
    model = model_zoo.wide_gemm()
    with pytest.raises(AotUnsupported, match=r"weights of 5242880 bytes .* flash of 4194304 bytes"):
        build_firmware(model.SerializeToString(), {"x": [1, 1024]}, BOARDS["cortex-m4"], "c", tmp_path)


def test_vm_builtin_without_c_equivalent_is_refused_naming_the_operator(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT)],
        "nonzero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(AotUnsupported, match=r"operator relax\.run\.nonzero .* has no C equivalent"):
        build_firmware(model.SerializeToString(), {"x": [1, 8]}, BOARDS["cortex-m4"], "c", tmp_path)


def hanging_firmware(tmp_path: Path, board_name: str = "cortex-m4") -> bytes:
    """A firmware that never finishes (for deadline tests)."""
    board = BOARDS[board_name]
    write_support_files(board, tmp_path, stack_reserve=1024)
    (tmp_path / "hang.c").write_text("void SysTick_Handler(void) {}\nint main(void) { for (;;) {} }\n")
    elf = tmp_path / "hang.elf"
    subprocess.run(
        [
            GCC,
            *board.gcc_flags,
            "-nostartfiles",
            "--specs=rdimon.specs",
            "-T",
            str(tmp_path / "link.ld"),
            str(tmp_path / "startup.c"),
            str(tmp_path / "hang.c"),
            "-lrdimon",
            "-o",
            str(elf),
        ],
        check=True,
    )
    return elf.read_bytes()


@needs_toolchain
def test_hanging_firmware_is_killed_at_the_deadline(tmp_path: Path) -> None:
    result = QemuRunner(BOARDS["cortex-m4"]).run(hanging_firmware(tmp_path), pack_inputs([], 1), 1, timeout_s=2)
    assert result.status == "timeout" and "killed" in (result.error or "")
    assert result.wall_s >= 2  # it ran to its deadline (the kill's own latency is no test's business)
