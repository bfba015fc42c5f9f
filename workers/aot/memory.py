"""Memory planning for the AOT driver: one static arena packed by tensor lifetime, and the workspace bound.

Relax's StaticPlanBlockMemory reuses storage between tensors of the same size class; here every planned
tensor gets its own live range (first to last step that touches it or a view of it) and tensors whose
ranges do not overlap share bytes. Placement is greedy by size, lowest free offset first, like TFLite
Micro's planner. The workspace is what the kernels ask TVMBackendAllocWorkspace for; its bound comes from
the buffers each kernel allocates in its TIR, tightened to what survives TIR lowering.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from workers.aot.lower import KernelCall, Program

ALIGN = 16
STACK_ALLOCA_MAX = 1024  # TVM's kMaxStackAlloca: smaller temporaries go on the stack, not the workspace
WORKSPACE_HEADER = 16  # the driver's workspace allocator keeps each block's size in front of it


def align(n: int, to: int = ALIGN) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class ArenaPlan:
    offsets: dict[str, int]  # planned tensor -> byte offset in the arena
    size: int  # bytes
    naive_size: int  # what one region per tensor would take


def live_ranges(program: Program) -> dict[str, tuple[int, int]]:
    """Planned (arena) tensor -> (first step, last step) that reads or writes it or one of its views."""
    ranges: dict[str, tuple[int, int]] = {}
    for i, step in enumerate(program.steps):
        names = step.args if isinstance(step, KernelCall) else [step.src, step.dst]
        for name in names:
            root = program.root(name)
            if root.kind != "arena":
                continue
            first, last = ranges.get(root.name, (i, i))
            ranges[root.name] = (min(first, i), max(last, i))
    return ranges


def plan_arena(program: Program) -> ArenaPlan:
    """Offsets for every planned tensor such that tensors alive at the same step never overlap."""
    ranges = live_ranges(program)
    sizes = {name: align(program.tensors[name].nbytes) for name in ranges}
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    offsets: dict[str, int] = {}
    for name in sorted(ranges, key=lambda n: (-sizes[n], ranges[n][0], n)):
        first, last = ranges[name]
        size = sizes[name]
        busy = sorted((o, o + s) for o, s, f, la in placed if not (la < first or last < f))
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, end)
        offsets[name] = offset
        placed.append((offset, size, first, last))
    size = max((o + s for o, s, _, _ in placed), default=0)
    return ArenaPlan(offsets=offsets, size=size, naive_size=sum(sizes.values()))


def _buffer_bytes(buf: Any) -> int | None:
    n = 1
    for d in buf.shape:
        if not hasattr(d, "value"):
            return None
        n *= int(d.value)
    return n * np.dtype(str(buf.dtype)).itemsize


def _walk(node: Any, visit: Any, seen: set[int] | None = None) -> None:
    """Visit TIR statements depth-first through the fields that hold nested statements."""
    if node is None:
        return
    visit(node)
    for attr in ("body", "block", "then_case", "else_case", "init"):
        child = getattr(node, attr, None)
        if child is not None and child is not node and type(child).__module__.startswith("tvm"):
            _walk(child, visit)
    seq = getattr(node, "seq", None)
    if seq is not None:
        for child in seq:
            _walk(child, visit)


def kernel_temporaries(func: Any) -> list[int]:
    """Byte sizes of the temporaries one kernel allocates (sblock alloc_buffers and Allocate nodes)."""
    sizes: list[int] = []

    def visit(node: Any) -> None:
        for buf in getattr(node, "alloc_buffers", None) or ():
            n = _buffer_bytes(buf)
            if n is not None:
                sizes.append(n)
        kind = type(node).__name__
        if kind == "Allocate" and hasattr(node, "extents"):
            n = 1
            for e in node.extents:
                n *= int(e.value) if hasattr(e, "value") else 0
            sizes.append(n * np.dtype(str(node.dtype)).itemsize)

    _walk(func.body, visit)
    return sizes


@dataclass(frozen=True)
class WorkspacePlan:
    size: int  # bytes of the workspace pool: the largest kernel's temporaries, held together
    stack_temporaries: int  # the largest kernel's temporaries small enough to live on the stack
    per_kernel: dict[str, int]
    ir_bound: int = 0  # the bound from the fused TIR, before lowering (>= size)

    def tightened(self, lowered: dict[str, int] | None) -> WorkspacePlan:
        """The plan sized by what the lowered kernels really allocate, never above the TIR bound."""
        if lowered is None or set(lowered) != set(self.per_kernel):
            return self
        per_kernel = {k: min(v, self.per_kernel[k]) for k, v in lowered.items()}
        return replace(self, size=max(per_kernel.values(), default=0), per_kernel=per_kernel)


def plan_workspace(program: Program) -> WorkspacePlan:
    """The workspace pool bound: kernels run one at a time and free what they allocate before returning,
    so the pool must hold the largest kernel's temporaries all at once (each aligned)."""
    per_kernel: dict[str, int] = {}
    stack = 0
    for gv, func in program.kernels.functions.items():
        temps = kernel_temporaries(func)
        per_kernel[gv.name_hint] = sum(align(n) + WORKSPACE_HEADER for n in temps if n > STACK_ALLOCA_MAX)
        stack = max(stack, sum(n for n in temps if n <= STACK_ALLOCA_MAX))
    bound = max(per_kernel.values(), default=0)
    return WorkspacePlan(size=bound, stack_temporaries=stack, per_kernel=per_kernel, ir_bound=bound)


_FUNC = re.compile(r"^TVM_DLL int32_t __tvm_ffi_(\w+)\(.*\{$", re.M)
_ALLOC = re.compile(r"TVMBackendAllocWorkspace\(([^;]*?)\)\)\);")
_CONST_SIZE = re.compile(r"^\s*\d+,\s*\w+,\s*\(uint64_t\)(\d+)ULL,")


def workspace_from_lowered(c_source: str) -> dict[str, int] | None:
    """Per-kernel workspace after TVM's TIR lowering, read from its C codegen output: the temporaries
    that survive lowering (fused intermediates are often inlined away). None when a size is not constant.
    """
    per_kernel: dict[str, int] = {}
    starts = [(m.start(), m.group(1)) for m in _FUNC.finditer(c_source)]
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(c_source)
        total = 0
        for call in _ALLOC.finditer(c_source, start, end):
            size = _CONST_SIZE.match(call.group(1))
            if size is None:
                return None
            total += align(int(size.group(1))) + WORKSPACE_HEADER
        per_kernel[name] = total
    return per_kernel


def check_plan(program: Program, plan: ArenaPlan) -> None:
    """Assert that no two tensors alive at the same step overlap (used by the tests and the build)."""
    ranges = live_ranges(program)
    names = list(plan.offsets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (fa, la), (fb, lb) = ranges[a], ranges[b]
            if la < fb or lb < fa:
                continue
            ea = plan.offsets[a] + program.tensors[a].nbytes
            eb = plan.offsets[b] + program.tensors[b].nbytes
            if plan.offsets[a] < eb and plan.offsets[b] < ea:
                raise AssertionError(f"arena tensors {a} and {b} are alive together and overlap")


__all__ = ["ArenaPlan", "WorkspacePlan", "check_plan", "live_ranges", "plan_arena", "plan_workspace"]
