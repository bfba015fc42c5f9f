"""The kernels two ways: TVM's C codegen (compiled later by arm-none-eabi-gcc), or TVM's LLVM emitting a
Cortex-M object directly. Both use the packed ABI ``int32_t __tvm_ffi_<name>(self, args, n, result)``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.aot.boards import McuBoard

KERNEL_PATHS = ("c", "llvm")


def _build(kernels: Any, target: dict[str, Any]) -> Any:
    import tvm
    from tvm.target import Target

    # Argument checks would pull in the FFI error machinery and grow a tiny kernel from 7 KB to 0.6 KB.
    with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_assert": True}):
        return tvm.tirx.build(kernels, target=Target(target))


def emit_kernels(kernels: Any, path: str, board: McuBoard, out_dir: Path) -> Path:
    """Write the kernels as ``kernels.c`` (path "c") or ``kernels.o`` (path "llvm"); returns the file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if path == "c":
        lib = _build(kernels, {"kind": "c"})
        out = out_dir / "kernels.c"
        out.write_text(lib.inspect_source())
        return out
    if path == "llvm":
        lib = _build(kernels, board.llvm_target)
        out = out_dir / "kernels.o"
        lib.write_to_file(str(out))
        return out
    raise ValueError(f"kernels = {path!r}: use one of {', '.join(KERNEL_PATHS)}")


def kernel_symbol(name: str) -> str:
    return f"__tvm_ffi_{name}"


def include_dirs() -> list[Path]:
    """Plain-C headers the generated code includes (tvm/ffi/c_api.h, dlpack, c_backend_api.h)."""
    import tvm
    import tvm_ffi

    return [Path(tvm.__file__).parent / "include", Path(tvm_ffi.__file__).parent / "include"]
