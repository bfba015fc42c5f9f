"""The "per-target-fold-bn" pipeline's first passes: batch norms after convolutions folded into them.

ONNX Runtime folds a batch norm that follows a convolution into the convolution's weights and a bias;
TVM's per-target pipeline does not, and a legalized batch norm is a kernel of its own (README, "Batch
norms folded into convolutions"). Used by the Relax VM builder's pipeline and by tuning's front half.
"""

from __future__ import annotations

from typing import Any


def fold_batch_norm_passes() -> list[Any]:
    """What "per-target-fold-bn" runs first: a batch norm right after a conv2d (OIHW weights, constants),
    with or without the convolution's bias add between them, becomes scaled weights and a bias add, and
    FoldConstant computes the scaled weights at build time.

    FoldConstant runs first too: the ONNX importer gives some weights as ``broadcast_to(constant)``
    (light_shufflenet's, light_resnet50's), which the fold's pattern (a constant weight) does not match:
    without it 0 of their 49 and 53 batch norms folded, with it 48 and 53. The 49th follows a convolution
    with a bias (the importer's ``add`` sits between them), which TVM's ``FoldBatchnormToConv2D`` does not
    match: ``FoldBatchnormAfterConvBias`` folds that one.
    """
    from tvm import relax

    t = relax.transform
    return [t.FoldConstant(), t.FoldBatchnormToConv2D(), fold_batch_norm_after_conv_bias(), t.FoldConstant()]


def fold_batch_norm_after_conv_bias() -> Any:
    """The pass ``FoldBatchnormAfterConvBias``: ``batch_norm(conv2d(x, W) + b)`` with constant W, b and batch
    norm parameters becomes ``conv2d(x, W * s) + (b * s + beta - mean * s)``, s = gamma / sqrt(var + eps).

    Only NCHW data with OIHW weights and the batch norm on axis 1 (what the ONNX importer gives); anything
    else is left as it is. The new constants are expressions of constants, for FoldConstant to compute.
    """
    from tvm import relax, tirx
    from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard

    from workers.build_common import relax_type

    data, weight, bias = wildcard(), is_const(), is_const()
    gamma, beta, mean, var = is_const(), is_const(), is_const(), is_const()
    conv = is_op("relax.nn.conv2d")(data, weight)
    biased = is_op("relax.add")(conv, bias)
    norm = is_op("relax.nn.batch_norm")(biased, gamma, beta, mean, var)
    pattern = TupleGetItemPattern(norm, 0)

    def rewrite(expr: Any, matches: Any) -> Any:
        conv_call, norm_call = matches[conv], matches[norm]
        attrs = conv_call.attrs
        channels = relax_type(matches[gamma]).shape[0]
        if (
            attrs.data_layout != "NCHW"
            or attrs.kernel_layout != "OIHW"
            or attrs.out_layout != "NCHW"
            or int(norm_call.attrs.axis) not in (1, -3)
            or len(relax_type(matches[bias]).shape) != 4  # the importer's bias: reshaped to [1, C, 1, 1]
        ):
            return expr
        eps = relax.prim_value(tirx.FloatImm("float32", float(norm_call.attrs.epsilon)))
        scale = relax.op.divide(matches[gamma], relax.op.sqrt(relax.op.add(matches[var], eps)))
        shift = relax.op.subtract(matches[beta], relax.op.multiply(matches[mean], scale))
        per_out = relax.op.reshape(scale, (channels, 1, 1, 1))
        per_channel = relax.op.reshape(scale, (1, channels, 1, 1))
        scaled = relax.Call(conv_call.op, (matches[data], relax.op.multiply(matches[weight], per_out)), attrs)
        new_bias = relax.op.add(
            relax.op.multiply(matches[bias], per_channel), relax.op.reshape(shift, (1, channels, 1, 1))
        )
        return relax.op.add(scaled, new_bias)

    @relax.transform.function_pass(opt_level=0, name="FoldBatchnormAfterConvBias")
    def fold(func: Any, _mod: Any, _ctx: Any) -> Any:
        return rewrite_call(pattern, rewrite, func)

    return fold
