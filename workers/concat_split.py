"""Concatenations read in parts by the convolution after them instead of copied: SqueezeNet's fire modules.

A fire module concatenates its two expand convolutions' outputs along the channels, and the next module's
squeeze convolution (after a max pool every few modules, after a dropout at the head) reads the
concatenation. TVM lowers a concatenate to a kernel that copies both maps into a third, the largest
feature maps of the model: in light_squeezenet's tuned program the four concatenation kernels ran 2.5-4.3x
slower than alone (docs/tuning-log.md, round 8), and each one evicts what the next kernel reads. A
convolution is linear in its input channels: ``conv2d(concat(a, b), W) = conv2d(a, W[:, :Ca]) +
conv2d(b, W[:, Ca:])``. ``SplitConvOverConcat`` writes it that way: a convolution per part, each partial
sum added in the next part's kernel (FuseOps fuses the ``add``, and the bias and activation after it,
into that convolution), and the concatenation is gone where nothing else reads it. A max pool is per
channel, so one between them is taken of each part (a pooled map is a quarter of the copy it replaces);
an inference dropout is the identity. The sums run in another order than one convolution's: the outputs
differ from ONNX Runtime's by rounding, which the build's output check bounds as for any program.
"""

from __future__ import annotations

from typing import Any

from workers.build_common import constant_array, relax_type, rewrite_relax_functions, static_shape

PASS_NAME = "SplitConvOverConcat"
CHANNEL_AXES = (1, -3)  # NCHW's channel axis, as the importer writes a concatenation's


def concat_parts(data: Any, lookup: Any) -> tuple[list[Any], list[Any]] | None:
    """(the maps whose channel concatenation ``data`` reads, the max pools between, innermost first), or
    None where ``data`` is not such a concatenation.

    ``data`` is a concatenate along NCHW's channels of 4-D maps with static shapes, or a max pool (NCHW) or
    an inference dropout (the identity) of one. ``lookup`` maps a Relax variable to the expression bound to
    it (None where it is not a binding).
    """
    from tvm import relax

    def bound(expr: Any) -> Any:
        value = lookup(expr) if isinstance(expr, relax.Var) else None
        return expr if value is None else value

    pools: list[Any] = []
    expr = bound(data)
    while True:
        dropout = bound(expr.tuple_value) if isinstance(expr, relax.TupleGetItem) and expr.index == 0 else None
        if dropout is not None and _op_name(dropout) == "relax.nn.dropout":
            expr = bound(dropout.args[0])
        elif _op_name(expr) == "relax.nn.max_pool2d" and str(expr.attrs.layout) == str(expr.attrs.out_layout) == "NCHW":
            pools.insert(0, expr)
            expr = bound(expr.args[0])
        else:
            break
    if _op_name(expr) != "relax.concat" or expr.attrs.axis is None or int(expr.attrs.axis) not in CHANNEL_AXES:
        return None
    fields = bound(expr.args[0])
    if not isinstance(fields, relax.Tuple) or len(fields.fields) < 2:
        return None
    if any(s is None or len(s) != 4 for s in (static_shape(f) for f in fields.fields)):
        return None
    return list(fields.fields), pools


def _op_name(expr: Any) -> str | None:
    """The operator's name of a Relax call of an operator, else None."""
    import tvm
    from tvm import relax

    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return str(expr.op.name)
    return None


def split_conv_over_concat() -> Any:
    """The module pass ``SplitConvOverConcat``: a conv2d (NCHW data, OIHW constant weights, one group) whose
    data is a channel concatenation (``concat_parts``) becomes one conv2d per part over its slice of the
    weights, summed. The concatenation stays where something else reads it. Run after FoldConstant (the
    weights must be constants) and before LegalizeOps; a module without such a convolution comes back as
    it was."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Split(PyExprMutator):
        def __init__(self, mod: Any) -> None:
            super().__init__(mod)
            self.split = 0

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if _op_name(call) != "relax.nn.conv2d":
                return call
            weights = constant_array(call.args[1])
            if weights is None:
                return call
            attrs = call.attrs
            if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
                return call
            found = concat_parts(call.args[0], self.lookup_binding) if int(attrs.groups) == 1 else None
            if found is None:
                return call
            parts, pools = found
            channels = [static_shape(p)[1] for p in parts]  # type: ignore[index]
            if sum(channels) != weights.shape[1]:
                return call
            out_dtype = attrs.out_dtype if str(attrs.out_dtype) else None
            convs, start = [], 0
            for part, width in zip(parts, channels, strict=True):
                for pool in pools:
                    part = self.builder_.emit(relax.Call(pool.op, [part], pool.attrs))
                piece = relax.const(weights[:, start : start + width].copy(), relax_type(call.args[1]).dtype)
                start += width
                convs.append(self.builder_.emit(relax.op.nn.conv2d(
                    part, piece, attrs.strides, attrs.padding, attrs.dilation, 1, "NCHW", "OIHW", "NCHW", out_dtype
                )))  # fmt: skip
            # Each partial sum is added by the next part's convolution (FuseOps: a conv2d then its add).
            total = convs[0]
            for conv in convs[1:-1]:
                total = self.builder_.emit(relax.op.add(total, conv))
            self.split += 1
            return relax.op.add(total, convs[-1])

    @tvm.transform.module_pass(opt_level=0, name=PASS_NAME)
    def split(mod: Any, _ctx: Any) -> Any:
        splitter = Split(mod)
        return rewrite_relax_functions(mod, splitter, lambda: splitter.split > 0)

    return split
