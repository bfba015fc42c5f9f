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
a block of output channels, a vector. ConvertLayout is given a layout per convolution (its ``layout_cb``):
channels that the block does not divide get a smaller block of their own, all of them when fewer than the
block (a 3-channel stem reads ``NCHW3c`` and writes ``NCHW8c``: the feature map after it is blocked
without a layout transform, as TVM's x86 schedules did for the first convolution), else their greatest
common divisor with it (a 1000-class head under ``NCHW16c`` writes ``NCHW8c``). TVM's legalization
refuses a conv2d with a channel block ("cannot be legalized by TOPI at this moment"), so the converted
ones become ``topi.nn.conv2d_NCHWc`` here, before the pipeline; TOPI has no grouped NCHWc convolution, so
a grouped conv2d stays NCHW, between two layout transforms.
"""

from __future__ import annotations

import math
from typing import Any

from tvmbench.core.errors import one_line
from tvmbench.core.records import LAYOUTS, Job
from workers.build_common import relax_type

CONV2D = "relax.nn.conv2d"
# The channel block of each blocked layout (the floats of one vector register: NEON, AVX2, AVX-512).
BLOCKED: dict[str, int] = {"NCHW4c": 4, "NCHW8c": 8, "NCHW16c": 16}
# The feature map's and the kernel's layout of each op per layout (a blocked kernel: input-channel and
# output-channel blocks innermost, what topi.nn.conv2d_NCHWc reads). NHWC gives it to ConvertLayout as it
# is; a blocked layout's is what a conv2d gets where the block divides its channels (``_per_conv`` decides
# the others), and the provenance's ``desired``.
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
    """Counts of conv2d calls (all, those in ``layout`` or, for a blocked one, in any channel block, and the
    grouped ones in NCHW), other convolutions and transposes or layout transforms."""
    counts = {"conv2d": 0, "in_layout": 0, "grouped_nchw": 0, "other_convs": 0, "transposes": 0}
    for call in _op_calls(mod):
        name = call.op.name
        if name == CONV2D:
            data_layout = str(call.attrs.data_layout)
            counts["conv2d"] += 1
            counts["in_layout"] += int(data_layout == layout or (layout in BLOCKED and _is_blocked(call)))
            counts["grouped_nchw"] += int(data_layout == "NCHW" and int(call.attrs.groups) != 1)
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
        if layout in BLOCKED:
            out = relax.transform.ConvertLayout({}, _per_conv(BLOCKED[layout]))(mod)
        else:
            out = relax.transform.ConvertLayout(DESIRED[layout])(mod)
    except Exception as exc:  # an op whose layout inference fails: the build's error, naming the pass
        raise RuntimeError(f"ConvertLayout to {layout} failed: {one_line(exc)}") from None
    after = _census(out, layout)
    provenance.update(
        converted=True,
        desired=DESIRED[layout],
        convs_converted=after["in_layout"] - before["in_layout"],
        transposes_added=after["transposes"] - before["transposes"],
    )
    if layout in BLOCKED:
        provenance["grouped_kept"] = after["grouped_nchw"]
        provenance["other_blocks"] = _other_blocks(out, BLOCKED[layout])
        if after["in_layout"]:
            try:
                out = _legalize_blocked_convs(out)
            except Exception as exc:
                raise RuntimeError(
                    f"lowering the {layout} convolutions to topi.nn.conv2d_NCHWc failed: {one_line(exc)}; "
                    "build this model in NCHW or NHWC"
                ) from None
    return out, provenance


def _is_blocked(call: Any) -> bool:
    """Whether a conv2d call's feature map has a channel block (5 axes: "NCHW8c"), not 4 ("NCHW")."""
    return len(str(call.attrs.data_layout)) > 4


def channel_block(channels: int, block: int) -> int:
    """The channel block of a feature map of ``channels`` channels under a layout of ``block``: ``block``
    where it divides them, all of them where they are fewer, else their greatest common divisor."""
    return channels if channels < block else math.gcd(channels, block)


def _per_conv(block: int) -> Any:
    """ConvertLayout's ``layout_cb`` for a blocked layout: each conv2d's input and output channel blocks
    (``channel_block``); NCHW for a grouped one (TOPI has no grouped NCHWc) or one whose output block would
    be a single channel."""

    def desired(call: Any) -> dict[str, list[str]]:
        if call.op.name != CONV2D:
            return {}  # every other op follows its input's layout
        kernel = relax_type(call.args[1]).shape  # OIHW, as imported
        out_channels, in_per_group = int(kernel[0]), int(kernel[1])
        c_in, c_out = channel_block(in_per_group, block), channel_block(out_channels, block)
        if int(call.attrs.groups) != 1 or c_out == 1:
            return {CONV2D: ["NCHW", "OIHW"]}
        return {CONV2D: [f"NCHW{c_in}c", f"OIHW{c_in}i{c_out}o", f"NCHW{c_out}c"]}

    return desired


def _other_blocks(mod: Any, block: int) -> dict[str, int]:
    """How many conv2d calls run with channel blocks other than ``block``'s, per "in -> out" layout pair
    (a 3-channel stem: "NCHW3c -> NCHW8c")."""
    wanted = f"NCHW{block}c"
    pairs: dict[str, int] = {}
    for call in _op_calls(mod):
        if call.op.name == CONV2D and _is_blocked(call):
            data, out = str(call.attrs.data_layout), str(call.attrs.out_layout)
            if (data, out) != (wanted, wanted):
                pairs[f"{data} -> {out}"] = pairs.get(f"{data} -> {out}", 0) + 1
    return pairs


def _legalize_blocked_convs(mod: Any) -> Any:
    """``mod`` with its blocked conv2d calls lowered to ``topi.nn.conv2d_NCHWc`` (TVM's own legalization
    refuses a channel block) and every other op left for the pipeline."""
    import tvm
    from tvm import relax, topi

    def conv2d_nchwc(bb: Any, call: Any) -> Any:
        if not _is_blocked(call):  # as imported: the pipeline's LegalizeOps lowers it
            return call
        a = call.attrs
        return bb.call_te(
            topi.nn.conv2d_NCHWc, call.args[0], call.args[1], a.strides, a.padding, a.dilation,
            str(a.data_layout), str(a.out_layout), relax_type(call).dtype, primfunc_name_hint="conv2d_NCHWc",
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
            out = relax.op.divide(out, relax.const(len(fields.fields), relax_type(call).dtype))
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
