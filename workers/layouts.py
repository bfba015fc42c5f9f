"""The layout axis: a Relax module's 2-D convolutions converted to another data layout before the pipeline.

``relax.transform.ConvertLayout`` takes desired layouts only for convolution-like ops: in 0.27 pooling,
batch norm, resize and the elementwise ops have no desired layout of their own (naming
``relax.nn.max_pool2d`` fails its ``NoDesiredLayout`` check) and follow the layout of their input
instead, so converting conv2d carries the pooling and the elementwise chain around it along. Where the
layout changes back (the model's NCHW input and outputs, a flatten, a conv1d/conv3d), the pass inserts
``permute_dims``; on weights those are constants, folded by the pipelines that fold (per-target), and run
per inference by those that do not (generic). The model's interface stays NCHW, so the outputs are still
checked against ONNX Runtime's.

Two ops as TVM's ONNX importer writes them break ConvertLayout's layout inference (0.27): ``Dropout``
becomes ``nn.dropout``, which returns a tuple ("Expected nested to match tuple"), and ``Sum``/``Min``/
``Max``/``Mean`` of several tensors become a ``stack`` along a new axis and a reduction over it, whose
5-D layout the pass cannot derive from a 4-D one ("can't find S in source layout ABCDE"). Every light
model of the onnx package has one or the other (light_squeezenet a dropout, light_shufflenet and
light_resnet50 their residual sums), so before the pass the dropout's output is its input (inference:
the identity) and a stacked reduction is the same ops pairwise (``add``, ``minimum``, ``maximum``; a mean
divides the sum), which is what the importer itself writes where a shape is not static. The provenance
counts both (``rewritten``).

"NCHW" leaves the module as imported. A model without a conv2d comes out unchanged under any
layout: its provenance says ``convs_converted: 0`` and its program is the NCHW program (one fingerprint,
measured once).

The blocked layouts (``NCHW4c``, ``NCHW8c``, ``NCHW16c``) split the channels into blocks of one vector
register's floats (4 for NEON, 8 for AVX2, 16 for AVX-512), the layout x86 and Arm CPU libraries run
convolutions in (ONNX Runtime's NCHWc kernels, oneDNN): the innermost loop of a convolution then runs over
a block of output channels, a vector. ConvertLayout converts a conv2d whose channels are a multiple of the
block and leaves the others (a 3-channel stem, a 1000-class head) as imported. TVM's legalization refuses
a conv2d with a channel block ("cannot be legalized by TOPI at this moment"), so the converted ones become
``topi.nn.conv2d_NCHWc`` here, before the pipeline; TOPI has no grouped NCHWc convolution, so a grouped
conv2d the pass converted goes back to NCHW between two layout transforms.
"""

from __future__ import annotations

from typing import Any

from tvmbench.core.errors import one_line
from tvmbench.core.records import LAYOUTS, Job

CONV2D = "relax.nn.conv2d"
# The channel block of each blocked layout (the floats of one vector register: NEON, AVX2, AVX-512).
BLOCKED: dict[str, int] = {"NCHW4c": 4, "NCHW8c": 8, "NCHW16c": 16}
# What ConvertLayout is given per layout: the feature map's and the kernel's layout of each op (a blocked
# kernel: input-channel and output-channel blocks innermost, what topi.nn.conv2d_NCHWc reads).
DESIRED: dict[str, dict[str, list[str]]] = {
    "NHWC": {CONV2D: ["NHWC", "OHWI"]},
    **{name: {CONV2D: [name, f"OIHW{b}i{b}o"]} for name, b in BLOCKED.items()},
}
# Convolutions the axis leaves as they are (counted, so the provenance says what stayed NCHW).
OTHER_CONVS = ("relax.nn.conv1d", "relax.nn.conv3d", "relax.nn.conv2d_transpose", "relax.nn.conv1d_transpose")
# What the pass adds where the layout changes: transposes (NHWC), layout transforms (blocked layouts).
TRANSPOSES = ("relax.permute_dims", "relax.layout_transform")


def _op_calls(mod: Any) -> list[Any]:
    """Every call of a Relax operator in ``mod``'s Relax functions (post order)."""
    import tvm
    from tvm import relax

    calls: list[Any] = []

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            calls.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return calls


def _census(mod: Any, layout: str) -> dict[str, int]:
    """Counts of conv2d calls (all, and those in ``layout``), other convolutions and transposes or layout
    transforms."""
    counts = {"conv2d": 0, "in_layout": 0, "other_convs": 0, "transposes": 0}
    for call in _op_calls(mod):
        name = call.op.name
        if name == CONV2D:
            counts["conv2d"] += 1
            counts["in_layout"] += int(str(call.attrs.data_layout) == layout)
        elif name in OTHER_CONVS:
            counts["other_convs"] += 1
        elif name in TRANSPOSES:
            counts["transposes"] += 1
    return counts


def convert(mod: Any, layout: str) -> tuple[Any, dict[str, Any]]:
    """(module in ``layout``, the conversion's provenance); ValueError for a layout not in LAYOUTS.

    Call inside the job's PassContext: ConvertLayout (opt_level 0, so it runs at every opt_level) then
    shows in the build's pass trace. "NCHW" returns ``mod`` itself and runs no pass.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    before = _census(mod, layout)
    provenance: dict[str, Any] = {
        "layout": layout,
        "converted": False,
        "desired": None,
        "convs": before["conv2d"],
        "convs_converted": 0,
        "other_convs": before["other_convs"],
        "transposes_added": 0,
        "rewritten": {},
    }
    if layout not in DESIRED:  # the imported layout: nothing to do
        return mod, provenance
    from tvm import relax

    if before["conv2d"]:
        mod, provenance["rewritten"] = layout_friendly(mod)
    try:
        out = relax.transform.ConvertLayout(DESIRED[layout])(mod)
        if layout in BLOCKED:
            out, provenance["grouped_kept"] = _grouped_back_to_nchw(out, BLOCKED[layout])
    except Exception as exc:  # an op whose layout inference fails: the build's error, naming the pass
        raise RuntimeError(f"ConvertLayout to {layout} failed: {one_line(exc)}") from None
    after = _census(out, layout)
    provenance.update(
        converted=True,
        desired=DESIRED[layout],
        convs_converted=after["in_layout"] - before["in_layout"],
        transposes_added=after["transposes"] - before["transposes"],
    )
    if layout in BLOCKED and after["in_layout"]:
        out = _legalize_blocked_convs(out)
    return out, provenance


def _is_blocked(call: Any) -> bool:
    """Whether a conv2d call's feature map has a channel block (5 axes: "NCHW8c"), not 4 ("NCHW")."""
    return len(str(call.attrs.data_layout)) > 4


def _grouped_back_to_nchw(mod: Any, block: int) -> tuple[Any, int]:
    """``mod`` with each grouped conv2d in a blocked layout written as layout transforms around the NCHW
    conv2d (TOPI's NCHWc convolution has no groups); how many there were."""
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard
    from tvm.relax.op import _ffi_api
    from tvm.tirx import IndexMap

    count = 0
    data, weight = wildcard(), wildcard()
    conv = is_op(CONV2D)(data, weight)

    def unblocked(call: Any, matched: dict[Any, Any]) -> Any:
        nonlocal count
        if int(call.attrs.groups) == 1 or not _is_blocked(call):
            return call
        count += 1
        to_nchw = relax.op.layout_transform(matched[data], lambda n, c, h, w, cb: (n, c * block + cb, h, w))
        to_oihw = relax.op.layout_transform(
            matched[weight], lambda o, i, h, w, ib, ob: (o * block + ob, i * block + ib, h, w)
        )
        a = call.attrs
        plain = relax.op.nn.conv2d(to_nchw, to_oihw, a.strides, a.padding, a.dilation, a.groups, "NCHW", "OIHW", "NCHW")
        # relax.op.layout_transform reads its input's dtype, which a call not yet normalised lacks: the op itself.
        blocked = IndexMap.from_func(lambda n, c, h, w: (n, c // block, h, w, c % block), index_dtype="int64")
        return _ffi_api.layout_transform(plain, blocked, None)

    out = mod.clone()
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gvar] = rewrite_call(conv, unblocked, func)
    return (out, count) if count else (mod, 0)


def _legalize_blocked_convs(mod: Any) -> Any:
    """``mod`` with its blocked conv2d calls lowered to ``topi.nn.conv2d_NCHWc`` (TVM's own legalization
    refuses a channel block) and every other op left for the pipeline."""
    import tvm
    from tvm import relax, topi

    def conv2d_nchwc(bb: Any, call: Any) -> Any:
        if not _is_blocked(call):  # as imported: the pipeline's LegalizeOps lowers it
            return call
        a = call.attrs
        dtype = (call.ty if hasattr(call, "ty") else call.struct_info).dtype  # 0.27 renamed struct_info
        return bb.call_te(
            topi.nn.conv2d_NCHWc, call.args[0], call.args[1], a.strides, a.padding, a.dilation,
            str(a.data_layout), str(a.out_layout), dtype, primfunc_name_hint="conv2d_NCHWc",
        )  # fmt: skip

    others = {call.op.name for call in _op_calls(mod)} - {CONV2D}
    legalize = relax.transform.LegalizeOps({CONV2D: conv2d_nchwc}, skip_ops=sorted(others))
    with tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm"):  # asked for, never read
        return legalize(mod)


def layout_friendly(mod: Any) -> tuple[Any, dict[str, int]]:
    """``mod`` with the ops ConvertLayout cannot infer a layout through written as equivalent ones (see the
    module docstring); the count of each rewrite (none: ``mod`` itself)."""
    from tvm import relax
    from tvm.relax.dpl import is_op, is_tuple_get_item, rewrite_call, wildcard

    pairwise = {"relax.sum": relax.op.add, "relax.mean": relax.op.add, "relax.min": relax.op.minimum,
                "relax.max": relax.op.maximum}  # fmt: skip
    counts = {"dropout": 0, "stacked_reductions": 0}
    kept = wildcard()
    dropout = is_tuple_get_item(is_op("relax.nn.dropout")(kept), 0)
    tensors = wildcard()
    stacked = is_op("relax.stack")(tensors)
    reduction = is_op("relax.sum")(stacked)
    for name in ("relax.mean", "relax.min", "relax.max"):
        reduction |= is_op(name)(stacked)

    def without_dropout(_call: Any, matched: dict[Any, Any]) -> Any:
        counts["dropout"] += 1
        return matched[kept]

    def reduced_pairwise(call: Any, matched: dict[Any, Any]) -> Any:
        fields, axis = matched[tensors], call.attrs.axis
        new_axis = int(matched[stacked].attrs.axis)
        if (
            not isinstance(fields, relax.Tuple)
            or axis is None
            or [int(a) for a in axis] != [new_axis]
            or call.attrs.keepdims
        ):
            return call
        out = fields.fields[0]
        for field in fields.fields[1:]:
            out = pairwise[call.op.name](out, field)
        if call.op.name == "relax.mean":
            dtype = (call.ty if hasattr(call, "ty") else call.struct_info).dtype  # 0.27 renamed struct_info
            out = relax.op.divide(out, relax.const(len(fields.fields), dtype))
        counts["stacked_reductions"] += 1
        return out

    out = mod.clone()  # the module itself stays as imported (the NCHW job's program)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gvar] = rewrite_call(reduction, reduced_pairwise, rewrite_call(dropout, without_dropout, func))
    if not any(counts.values()):
        return mod, {}
    return relax.transform.DeadCodeElimination()(out), {k: v for k, v in counts.items() if v}


def for_job(job: Job, mod: Any) -> tuple[Any, dict[str, Any] | None]:
    """``convert`` for the job's layout; the module unchanged and None for a job without the axis."""
    if job.layout is None:
        return mod, None
    return convert(mod, job.layout)
