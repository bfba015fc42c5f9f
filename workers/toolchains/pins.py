"""The one table of TVM releases tvmbench provisions: each release with the apache-tvm-ffi it loads with.

apache-tvm declares a loose apache-tvm-ffi requirement, so pip picks the newest ffi, which does not always
load. Each pin below was proven by the import check (``probe.py``) in a fresh environment on x86_64,
Python 3.11, with the build and the VM run of a small model (tests/test_toolchains.py for 0.26.0):

- 0.25.0.post1: ffi 0.1.12. With 0.1.13.post3 or 0.1.15.post2, libtvm_runtime.so fails to load on an
  undefined symbol ``tvm::ffi::json::Stringify``.
- 0.26.0: ffi 0.1.14.post1. It loads with 0.1.15.post2 (what pip picks), but then ``tvm.ir.save_json``
  segfaults (in ``tvm::ffi::ToJSONGraph``), as with 0.27.
- 0.27.0.post1: ffi 0.1.14.post1. 0.1.15.post2 segfaults in ``tvm.ir.save_json`` (every MetaSchedule run).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    """What one TVM release is installed with."""

    tvm: str  # the apache-tvm version
    ffi: str  # the apache-tvm-ffi version it loads with


PINS: dict[str, Pin] = {
    p.tvm: p
    for p in (
        Pin("0.25.0.post1", "0.1.12"),
        Pin("0.26.0", "0.1.14.post1"),
        Pin("0.27.0.post1", "0.1.14.post1"),
    )
}

# What the build code needs besides TVM (tvm itself requires numpy and ml_dtypes; pinned so every release
# builds with the same importer and the same arrays). The versions are those of the project's own
# environment, where the 0.27 builds run.
BUILD_NEEDS: tuple[str, ...] = ("numpy==2.4.6", "onnx==1.23.2", "ml_dtypes==0.7.0")


def pip_requirements(tvm_requirement: str, tvm_version: str) -> list[str]:
    """pip's arguments for a toolchain: TVM (a ``==`` requirement or a wheel path), its ffi pin, the needs.

    A version without a pin (a wheel of another TVM) leaves the ffi to pip.
    """
    pin = PINS.get(tvm_version.split("+")[0])
    ffi = [f"apache-tvm-ffi=={pin.ffi}"] if pin else []
    return [tvm_requirement, *ffi, *BUILD_NEEDS]
