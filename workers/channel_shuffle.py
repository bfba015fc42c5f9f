"""Channel shuffles read by the convolution after them instead of copied: ShuffleNet's reshape-transpose-reshape.

ShuffleNet interleaves its channel groups between grouped convolutions with ``reshape`` to (N, g, C/g, H,
W), ``transpose`` (0, 2, 1, 3, 4) and ``reshape`` back. TVM lowers that to a kernel that copies the whole
feature map (FuseOps fuses an injective op into the elementwise ops after it, never into the input of a
convolution), and MetaSchedule schedules a plain copy worse than it is untuned (docs/tuning-log.md): in
light_shufflenet's tuned program the 16 shuffles were a fifth of the time. A permutation of channels needs
no copy: the convolution that reads the shuffled map can read channel ``perm(c)`` of the map as it was.
``FuseChannelShuffleIntoConv`` gives such a conv2d a kernel of its own whose data is read through the
permutation (one TIR function: the shuffle's block inlined into the padding's), which the tuning stage
extracts and tunes like any convolution.
"""

from __future__ import annotations

from typing import Any

from workers.build_common import relax_type, rewrite_relax_functions, static_shape

PASS_NAME = "FuseChannelShuffleIntoConv"


def shuffle_groups(shuffled: Any, lookup: Any) -> tuple[Any, tuple[int, ...], int] | None:
    """(the map before the shuffle, its shape, the group count g) where ``shuffled`` is a channel shuffle,
    else None.

    A channel shuffle here is ``reshape(permute_dims(reshape(x, (N, g, C/g, H, W)), [0, 2, 1, 3, 4]),
    (N, C, H, W))`` with x of shape (N, C, H, W), what the ONNX importer gives for ShuffleNet's.
    ``lookup`` maps a Relax variable to the expression bound to it (None where it is not a binding).
    """
    import tvm
    from tvm import relax

    def call_of(expr: Any, op_name: str) -> Any:
        bound = lookup(expr) if isinstance(expr, relax.Var) else expr
        if isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op) and bound.op.name == op_name:
            return bound
        return None

    merged = call_of(shuffled, "relax.reshape")
    transposed = call_of(merged.args[0], "relax.permute_dims") if merged is not None else None
    split = call_of(transposed.args[0], "relax.reshape") if transposed is not None else None
    if split is None:
        return None
    axes = transposed.attrs.axes
    if axes is None or [int(a) for a in axes] != [0, 2, 1, 3, 4]:
        return None
    source = split.args[0]
    before, parts, after = static_shape(source), static_shape(split), static_shape(merged)
    if before is None or parts is None or after is None or len(before) != 4 or before != after:
        return None
    n, channels, height, width = before
    if len(parts) != 5 or parts[0] != n or parts[3:] != (height, width) or parts[1] * parts[2] != channels:
        return None
    return source, before, parts[1]


def shuffled_conv2d_func(call: Any, data_shape: tuple[int, ...], weight_shape: tuple[int, ...], groups: int) -> Any:
    """The TIR function of ``conv2d(shuffle(x), w)`` with the shuffle read through its index, not copied.

    ``groups`` is the shuffle's g: channel c of the shuffled map is channel (c mod g) * C/g + c div g of x.
    The convolution is TOPI's ``nn.conv``, what LegalizeOps gives the conv2d itself.
    """
    from tvm import s_tir, te, topi

    attrs = call.attrs
    channels = data_shape[1]
    per_group = channels // groups
    out_dtype = attrs.out_dtype if str(attrs.out_dtype) else None
    x = te.placeholder(data_shape, dtype=relax_type(call.args[0]).dtype, name="data")
    w = te.placeholder(weight_shape, dtype=relax_type(call.args[1]).dtype, name="weight")
    shuffled = te.compute(
        x.shape,
        lambda n, c, h, v: x[n, (c % groups) * per_group + c // groups, h, v],
        name="channel_shuffle",
        tag="injective",
    )
    out = topi.nn.conv(
        shuffled,
        w,
        stride=[int(s) for s in attrs.strides],
        padding=[int(p) for p in attrs.padding],
        dilation=[int(d) for d in attrs.dilation],
        groups=int(attrs.groups),
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_dtype=out_dtype,
    )
    func = te.create_prim_func([x, w, out], index_dtype_override="int64")  # Relax's shapes are int64, as call_te
    sch = s_tir.Schedule(func)
    sch.compute_inline(sch.get_sblock("channel_shuffle"))
    # No global symbol: a private function, as call_te's are (AttachGlobalSymbol names it at the end).
    return sch.mod["main"].without_attr("global_symbol")


def fuse_channel_shuffle_into_conv() -> Any:
    """The module pass ``FuseChannelShuffleIntoConv``: a conv2d (NCHW data, OIHW weights) whose data is a
    channel shuffle becomes a ``call_tir`` of a kernel that reads the unshuffled map through the
    permutation. The shuffle itself stays where something else reads it, and goes where nothing does.
    Run before LegalizeOps; a module without a shuffle comes back as it was."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Fuse(PyExprMutator):
        def __init__(self, mod: Any) -> None:
            super().__init__(mod)
            self.fused = 0

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
                return call
            attrs = call.attrs
            if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
                return call
            found = shuffle_groups(call.args[0], self.lookup_binding)
            weight_shape = static_shape(call.args[1])
            if found is None or weight_shape is None:
                return call
            source, data_shape, groups = found
            func = shuffled_conv2d_func(call, data_shape, weight_shape, groups)
            gvar = self.builder_.add_func(func, "conv2d_shuffled")
            self.fused += 1
            return relax.call_tir(gvar, [source, call.args[1]], relax_type(call))

    @tvm.transform.module_pass(opt_level=0, name=PASS_NAME)
    def fuse(mod: Any, _ctx: Any) -> Any:
        fuser = Fuse(mod)
        return rewrite_relax_functions(mod, fuser, lambda: fuser.fused > 0)

    return fuse
