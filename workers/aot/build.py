"""One AOT build: ONNX bytes -> generated C sources, kernels and a firmware ELF, with memory figures."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.aot import AotUnsupported
from workers.aot.boards import McuBoard
from workers.aot.codegen import generate_driver
from workers.aot.firmware import HEAP_RESERVE, link_firmware, section_sizes, stack_estimate, write_support_files
from workers.aot.kernels import emit_kernels
from workers.aot.lower import Program, import_onnx, lower_static, read_program
from workers.aot.memory import check_plan, plan_arena, plan_workspace, workspace_from_lowered

CODE_RESERVE = 64 * 1024  # room for code next to the weights when checking the fit before compiling


@dataclass(frozen=True)
class AotBuild:
    """A built firmware and what is in it."""

    elf: Path
    program: Program
    memory: dict[str, int]  # flash_bytes, ram_bytes and their parts
    manifest: dict[str, Any]  # I/O names, shapes, dtypes and the memory figures, stored with the artifact


def check_weights_fit(program: Program, board: McuBoard) -> None:
    """Refuse before generating code, naming the sizes, when the weights cannot fit the board's flash."""
    weights = sum(t.nbytes for t in program.tensors.values() if t.kind == "const")
    if weights + CODE_RESERVE > board.flash_bytes:
        raise AotUnsupported(
            f"weights of {weights} bytes (+{CODE_RESERVE} for code) do not fit {board.name}'s flash of "
            f"{board.flash_bytes} bytes: use a smaller model or a board with more flash"
        )


def check_fit(program: Program, board: McuBoard, arena: int, workspace: int) -> None:
    """Refuse, naming the sizes, when the weights or the RAM plan cannot fit the board."""
    check_weights_fit(program, board)
    io_bytes = sum(program.tensors[n].nbytes for n in program.inputs + program.outputs)
    ram = arena + workspace + io_bytes + HEAP_RESERVE
    if ram > board.ram_bytes:
        raise AotUnsupported(
            f"arena {arena} + workspace {workspace} + I/O {io_bytes} + heap {HEAP_RESERVE} bytes = {ram} bytes "
            f"do not fit {board.name}'s RAM of {board.ram_bytes} bytes"
        )


def build_firmware(
    model_data: bytes,
    shape_dict: dict[str, list[int]],
    board: McuBoard,
    kernel_path: str,
    out_dir: Path,
    opt_level: int = 2,
    instruments: list[Any] | None = None,
) -> AotBuild:
    """ONNX -> firmware.elf in ``out_dir``. AotUnsupported for what cannot run on the board."""
    import tvm

    model, mod = import_onnx(model_data, shape_dict)
    with tvm.transform.PassContext(opt_level=opt_level, instruments=instruments or []):
        lowered = lower_static(mod)
    program = read_program(
        lowered,
        [o.name for o in model.graph.output],
        [i.name for i in model.graph.input if i.name in shape_dict],
    )
    arena = plan_arena(program)
    check_plan(program, arena)
    workspace = plan_workspace(program)
    check_weights_fit(program, board)

    out_dir.mkdir(parents=True, exist_ok=True)
    kernels = emit_kernels(program.kernels, kernel_path, board, out_dir)
    # The pool is sized by the temporaries that survive TIR lowering (the same lowering feeds both
    # code generators), read from the C codegen's output; the fused TIR's bound is the fallback.
    c_kernels = kernels if kernel_path == "c" else emit_kernels(program.kernels, "c", board, out_dir / "c")
    workspace = workspace.tightened(workspace_from_lowered(c_kernels.read_text()))
    check_fit(program, board, arena.size, workspace.size)
    driver = generate_driver(program, arena, workspace)
    (out_dir / "tvmbench_model.h").write_text(driver.header)
    (out_dir / "tvmbench_model.c").write_text(driver.source)
    write_support_files(board, out_dir, stack_reserve=4096)
    elf = link_firmware(board, out_dir, kernels)
    sizes = section_sizes(elf, driver.weights_bytes)
    stack = stack_estimate(out_dir, workspace.stack_temporaries)
    io_bytes = sum(program.tensors[n].nbytes for n in program.inputs + program.outputs)
    memory = {
        "flash_bytes": sizes.flash_bytes,
        "text_bytes": sizes.text_bytes,
        "weights_bytes": sizes.weights_bytes,
        "ram_bytes": sizes.static_ram_bytes + stack,
        "arena_bytes": arena.size,
        "arena_naive_bytes": arena.naive_size,
        "workspace_bytes": workspace.size,
        "workspace_ir_bound_bytes": workspace.ir_bound,
        "io_bytes": io_bytes,
        "static_ram_bytes": sizes.static_ram_bytes,
        "stack_estimate_bytes": stack,
    }
    manifest = {
        "board": board.name,
        "qemu_machine": board.qemu_machine,
        "kernels": kernel_path,
        "inputs": [
            {"name": n, "shape": list(program.tensors[t].shape), "dtype": program.tensors[t].dtype}
            for n, t in zip(program.input_names, program.inputs, strict=True)
        ],
        "outputs": [
            {"name": n, "shape": list(program.tensors[t].shape), "dtype": program.tensors[t].dtype}
            for n, t in zip(program.output_names, program.outputs, strict=True)
        ],
        "memory": memory,
        "kernel_count": len(program.kernels.functions),
        "workspace_per_kernel": workspace.per_kernel,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return AotBuild(elf=elf, program=program, memory=memory, manifest=manifest)


ARTIFACT_FILES = (
    "manifest.json",
    "firmware.elf",
    "tvmbench_model.h",
    "tvmbench_model.c",
    "kernels.c",
    "kernels.o",
    "startup.c",
    "harness.c",
    "link.ld",
)


def pack_artifact(out_dir: Path) -> bytes:
    """The artifact: a deterministic tar of the firmware, its manifest and the generated sources."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ARTIFACT_FILES:
            path = out_dir / name
            if not path.exists():
                continue
            info = tarfile.TarInfo(name)
            data = path.read_bytes()
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpack_artifact(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(manifest, firmware ELF bytes) from an artifact."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        elf = tar.extractfile("firmware.elf").read()  # type: ignore[union-attr]
    return manifest, elf


__all__ = ["AotBuild", "build_firmware", "check_fit", "pack_artifact", "unpack_artifact"]
