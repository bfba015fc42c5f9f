"""What every Builder shares: the TVM versions, the target, the pass-trace instrument, the build's identity."""

from __future__ import annotations

import functools
import socket
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

from tvmbench.core.records import Job


def relax_type(expr: Any) -> Any:
    """A Relax expression's type: ``ty`` since TVM 0.27, ``struct_info`` in the releases before (the
    passes here run in a toolchain child of another release too)."""
    return expr.ty if hasattr(expr, "ty") else expr.struct_info


def static_shape(expr: Any) -> tuple[int, ...] | None:
    """The static shape of a tensor-typed Relax expression, or None where it has none or a symbolic dimension."""
    shape = getattr(relax_type(expr), "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        return None


def constant_array(expr: Any) -> Any:
    """A Relax constant's value as a numpy array, or None where ``expr`` is not a constant (0.27's
    ``GenericConst`` holds it in ``value``, the releases before in ``data``)."""
    if type(expr).__name__ not in ("GenericConst", "Constant"):
        return None
    value = getattr(expr, "value", None)
    value = getattr(expr, "data", None) if value is None else value
    return value.numpy() if hasattr(value, "numpy") else None


def rewrite_relax_functions(mod: Any, mutator: Any, changed: Callable[[], bool]) -> Any:
    """``mod`` with each Relax function visited by ``mutator`` (a PyExprMutator made of ``mod``) and dead
    code eliminated; ``mod`` itself where ``changed()`` says the mutator rewrote nothing (it would still
    renormalise the module)."""
    from tvm import relax

    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gvar, mutator.visit_expr(func))
    if not changed():
        return mod
    return relax.transform.DeadCodeElimination()(mutator.builder_.get())


@functools.cache
def tvm_versions() -> tuple[str, str]:
    """(apache-tvm, apache-tvm-ffi) versions of this process.

    Read from the installed distributions, without importing TVM (4 s on a busy machine, and the
    driver needs only the version for build keys), unless TVM is imported already or is not an
    installed distribution (a source build), when its own ``__version__`` says.
    """
    if "tvm" not in sys.modules:
        try:
            return metadata.version("apache-tvm"), metadata.version("apache-tvm-ffi")
        except metadata.PackageNotFoundError:
            pass
    import tvm
    import tvm_ffi

    return tvm.__version__, tvm_ffi.__version__


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


def build_identity(job: Job) -> dict[str, Any]:
    """The fields every Build of ``job`` carries, whatever its outcome: key, versions, host."""
    tvm_version, ffi_version = tvm_versions()
    return {
        "build_key": job.build_key(tvm_version),
        "tvm_version": tvm_version,
        "ffi_version": ffi_version,
        "host": socket.gethostname(),
    }
