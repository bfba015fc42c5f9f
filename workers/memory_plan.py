"""The static memory of a Relax build: planned intermediate storage and parameter bytes.

TVM 0.27 has no runtime memory statistics; what it offers is ``relax.analysis.estimate_memory_usage``,
a text report that is only meaningful right after ``StaticPlanBlockMemory`` (later passes lower the
allocations to VM builtins it does not count). So a pass instrument takes the report, and counts the
constants, at that point of the build's own pipeline, and the text is parsed here.

The report counts Relax-level storage only. A fused kernel keeps its own intermediates (FuseTIR turns
``matmul -> relu`` into one PrimFunc with the matmul result as an ``alloc_buffer``), allocated as
workspace while that kernel runs: measured here, a 2048x2048 outer product peaked at twice the plan
on the board for that reason. So the largest per-kernel scratch is counted too.
"""

from __future__ import annotations

import re
from typing import Any

from workers.build_common import constant_array

PLAN_PASS = "StaticPlanBlockMemory"
_GB = 2**30
_WITHOUT = re.compile(
    r"Without memory planning, there are (\d+) constant-size memory allocation\(s\) with total size "
    r"([0-9.eE+-]+) GB(?:, and (\d+) dynamic-size allocation\(s\))?"
)
_WITH = re.compile(
    r"With memory planning, there are (\d+) constant-size memory allocation\(s\) with total size ([0-9.eE+-]+) GB"
)


def parse_estimate(text: str) -> dict[str, Any]:
    """Totals over all functions of an ``estimate_memory_usage`` report.

    The report prints GB to 4 significant digits, so the byte counts are good to about 0.05 %.
    Raises ValueError when the text has no figures (a changed TVM format must not read as zero).
    """
    without, planned = _WITHOUT.findall(text), _WITH.findall(text)
    if not without or not planned:
        raise ValueError(f"unrecognised estimate_memory_usage report: {text[:200]!r}")
    return {
        "planned_bytes": round(sum(float(size) for _, size in planned) * _GB),
        "planned_allocations": sum(int(n) for n, _ in planned),
        "unplanned_bytes": round(sum(float(size) for _, size, _ in without) * _GB),
        "dynamic_allocations": sum(int(d or 0) for _, _, d in without),
    }


def constant_bytes(mod: Any) -> int:
    """Bytes of the constants (the weights, with keep_params_in_input=False) in the module's Relax functions."""
    from tvm import relax

    total = 0

    def visit(expr: Any) -> None:
        nonlocal total
        value = constant_array(expr)
        if value is not None:
            total += int(value.nbytes)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return total


_CHILDREN = ("body", "block", "seq", "then_case", "else_case", "init")


def kernel_scratch_bytes(func: Any) -> int:
    """Bytes of the global-scope buffers a TIR PrimFunc allocates for itself (its intermediates)."""
    import tvm

    total = 0
    stack = [func.body]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if isinstance(node, list | tuple) or type(node).__name__ == "Array":
            stack.extend(node)
            continue
        for buf in getattr(node, "alloc_buffers", None) or ():
            if buf.scope() in ("global", ""):  # "local"/"shared" live in registers, stack or on-chip
                count = 1
                for dim in buf.shape:
                    count *= int(dim)
                total += count * tvm.runtime.DataType(buf.dtype).bits // 8
        stack.extend(getattr(node, name, None) for name in _CHILDREN)
    return total


def max_kernel_scratch(mod: Any) -> int:
    """The largest scratch of any one kernel: workspaces are freed when their kernel returns."""
    from tvm import tirx

    sizes = [kernel_scratch_bytes(f) for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    return max(sizes, default=0)


def memory_plan_probe() -> Any:
    """A PassContext instrument that, after StaticPlanBlockMemory, keeps the estimate, the constant bytes
    and the largest kernel scratch.

    ``probe.result()`` is the build's ``memory`` dict, or None when the pass did not run.
    """
    import tvm
    from tvm import relax

    @tvm.instrument.pass_instrument
    class MemoryPlanProbe:
        def __init__(self) -> None:
            self.text: str | None = None
            self.params: int | None = None
            self.scratch: int | None = None

        def run_after_pass(self, mod: Any, info: Any) -> None:
            if info.name == PLAN_PASS and self.text is None:
                self.text = relax.analysis.estimate_memory_usage(mod)
                self.params = constant_bytes(mod)
                self.scratch = max_kernel_scratch(mod)

        def result(self) -> dict[str, Any] | None:
            if self.text is None or self.params is None:
                return None
            plan = parse_estimate(self.text)
            scratch = self.scratch or 0
            return {
                "kind": "relax-static-plan",
                **plan,
                "params_bytes": self.params,
                "kernel_scratch_bytes": scratch,
                # What the program needs before the runtime's own overhead: weights, planned storage and
                # the largest kernel's own intermediates.
                "ram_bytes": self.params + plan["planned_bytes"] + scratch,
            }

    return MemoryPlanProbe()
