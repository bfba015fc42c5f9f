"""Small ONNX models with seeded random weights, built with onnx.helper.

They serve the examples (examples/models/*.onnx are written by ``python -m workers.model_zoo``), the
tests, and board health checks. Random weights matter: the models bundled with the onnx package have
constant-filled weights, on which every backend agrees, so they prove nothing about correctness.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.5) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes: list, inputs: list, outputs: list, inits: list, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tvmbench")
    model.ir_version = 8  # readable by every onnxruntime this project supports
    onnx.checker.check_model(model)
    return model


def tiny_mlp(seed: int = 0) -> onnx.ModelProto:
    """x[1,16] -> Gemm(32) -> Relu -> Gemm(10): the golden model of board health checks."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"]),
    ]
    inits = [_init(rng, "w1", (16, 32)), _init(rng, "b1", (32,)), _init(rng, "w2", (32, 10)), _init(rng, "b2", (10,))]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
        "tiny_mlp",
    )


def tiny_cnn(seed: int = 0, batch: int | str = 1) -> onnx.ModelProto:
    """x[N,3,16,16] -> conv/bn/relu -> residual conv + add -> maxpool -> flatten -> gemm -> softmax.

    ``batch`` may be a string to leave the batch dimension symbolic (a dim_param).
    """
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2w", "c2b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["res"]),
        helper.make_node("Relu", ["res"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    inits = [
        _init(rng, "c1w", (8, 3, 3, 3)),
        _init(rng, "c1b", (8,)),
        _init(rng, "bn_s", (8,)),
        _init(rng, "bn_b", (8,)),
        _init(rng, "bn_m", (8,), 0.1),
        numpy_helper.from_array((rng.random(8) + 0.5).astype(np.float32), "bn_v"),
        _init(rng, "c2w", (8, 8, 3, 3), 0.2),
        _init(rng, "c2b", (8,)),
        _init(rng, "gw", (8 * 8 * 8, 10), 0.05),
        _init(rng, "gb", (10,)),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        inits,
        "tiny_cnn",
    )


def two_outputs(seed: int = 0) -> onnx.ModelProto:
    """x[1,8] -> (Gemm -> Tanh, Gemm -> Sigmoid): a model with two outputs."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Gemm", ["x", "wa"], ["a"]),
        helper.make_node("Tanh", ["a"], ["ya"]),
        helper.make_node("Gemm", ["x", "wb"], ["b"]),
        helper.make_node("Sigmoid", ["b"], ["yb"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [
            helper.make_tensor_value_info("ya", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("yb", TensorProto.FLOAT, [1, 6]),
        ],
        [_init(rng, "wa", (8, 4)), _init(rng, "wb", (8, 6))],
        "two_outputs",
    )


def slow_matmul(n: int = 512, chain: int = 64, seed: int = 0) -> onnx.ModelProto:
    """A chain of n x n matmuls: seconds per run untuned, for timeout tests."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(chain):
        inits.append(_init(rng, f"w{i}", (n, n), 1.0 / np.sqrt(n)))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        prev = f"m{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        inits,
        "slow_matmul",
    )


def conv_gemm_32(seed: int = 0) -> onnx.ModelProto:
    """x[1,1,32,32] -> Conv(8, 3x3) -> Relu -> Flatten -> Gemm(7200 -> 10): 288 KB of weights, and a
    convolution whose temporaries need the AOT workspace allocator (microcontroller sweeps)."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["y"]),
    ]
    inits = [
        _init(rng, "cw", (8, 1, 3, 3)),
        _init(rng, "cb", (8,)),
        _init(rng, "gw", (8 * 30 * 30, 10), 0.02),
        _init(rng, "gb", (10,)),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
        "conv_gemm_32",
    )


def wide_gemm(n_in: int = 1024, n_out: int = 1280, seed: int = 0) -> onnx.ModelProto:
    """x[1,n_in] -> Gemm(n_out): 5 MB of weights by default, more than a 4 MB microcontroller holds."""
    rng = np.random.default_rng(seed)
    return _model(
        [helper.make_node("Gemm", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n_out])],
        [_init(rng, "w", (n_in, n_out), 0.03)],
        "wide_gemm",
    )


def small_convnet(seed: int = 0, size: int = 64, channels: int = 16) -> onnx.ModelProto:
    """x[1,3,size,size] -> Conv(channels, 3x3) -> Relu -> Conv(channels, 3x3) -> Relu -> GlobalAveragePool
    -> Flatten -> Gemm(10): convolutions where untuned TVM is slowest, the tuning tests' model."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2w", "c2b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["y"]),
    ]
    inits = [
        _init(rng, "c1w", (channels, 3, 3, 3)),
        _init(rng, "c1b", (channels,)),
        _init(rng, "c2w", (channels, channels, 3, 3), 0.2),
        _init(rng, "c2b", (channels,)),
        _init(rng, "gw", (channels, 10), 0.2),
        _init(rng, "gb", (10,)),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
        "small_convnet",
    )


def conv_bn(seed: int = 0, channels: int = 8) -> onnx.ModelProto:
    """x[1,3,16,16] -> Conv -> BatchNormalization -> Relu, twice -> GlobalAveragePool -> Flatten:
    convolutions followed by batch norms as in ResNet and ShuffleNet (the "per-target-fold-bn" pipeline's
    model). The first convolution has a bias, as light_shufflenet's stem (the importer puts its add between
    the convolution and the batch norm); the second has none, and its weights come from a ConstantOfShape
    node, as in the onnx package's light_* models (which the importer turns into a ``broadcast_to`` of a
    constant)."""
    rng = np.random.default_rng(seed)
    shape = numpy_helper.from_array(np.array([channels, channels, 3, 3], dtype=np.int64), "w1_shape")
    fill = numpy_helper.from_array(np.array([0.05], dtype=np.float32), "value")
    nodes = [helper.make_node("ConstantOfShape", ["w1_shape"], ["w1"], value=fill)]
    inits, x = [shape], "x"
    for i, c_in in enumerate((3, channels)):
        nodes += [
            helper.make_node("Conv", [x, f"w{i}", *(["cb0"] if i == 0 else [])], [f"c{i}"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"c{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"], [f"n{i}"]),
            helper.make_node("Relu", [f"n{i}"], [f"r{i}"]),
        ]
        inits += [
            *([_init(rng, f"w{i}", (channels, c_in, 3, 3), 0.3), _init(rng, "cb0", (channels,))] if i == 0 else []),
            _init(rng, f"s{i}", (channels,)),
            _init(rng, f"b{i}", (channels,)),
            _init(rng, f"m{i}", (channels,), 0.1),
            numpy_helper.from_array((rng.random(channels) + 0.5).astype(np.float32), f"v{i}"),
        ]
        x = f"r{i}"
    nodes += [helper.make_node("GlobalAveragePool", [x], ["p"]), helper.make_node("Flatten", ["p"], ["y"])]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels])],
        inits,
        "conv_bn",
    )


def merged_branches(seed: int = 0, channels: int = 8) -> onnx.ModelProto:
    """x[1,3,16,16] -> conv -> three branches merged by a variadic Sum, a Mean and a Concat, a Dropout ->
    GlobalAveragePool -> Flatten: the ops by which the onnx package's light models (a dropout in
    light_squeezenet, residual Sums in light_shufflenet and light_resnet50) merge their branches, which
    TVM's importer writes as ``nn.dropout`` and as a ``stack`` reduced over its new axis."""
    rng = np.random.default_rng(seed)
    conv = lambda i, x, c_in: helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1])  # noqa: E731
    nodes = [
        conv(0, "x", 3),
        helper.make_node("Relu", ["c0"], ["r0"]),
        conv(1, "r0", channels),
        conv(2, "r0", channels),
        helper.make_node("Sum", ["r0", "c1", "c2"], ["sum"]),
        helper.make_node("Mean", ["c1", "c2"], ["mean"]),
        helper.make_node("Concat", ["sum", "mean"], ["cat"], axis=1),
        helper.make_node("Dropout", ["cat"], ["drop"]),
        helper.make_node("GlobalAveragePool", ["drop"], ["p"]),
        helper.make_node("Flatten", ["p"], ["y"]),
    ]
    inits = []
    for i, c_in in enumerate((3, channels, channels)):
        inits += [_init(rng, f"w{i}", (channels, c_in, 3, 3), 0.3), _init(rng, f"b{i}", (channels,))]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * channels])],
        inits,
        "merged_branches",
    )


def grouped_convnet(seed: int = 0, channels: int = 16) -> onnx.ModelProto:
    """x[1,3,16,16] -> Conv(channels, 3x3) -> Relu -> Conv(channels, 3x3, group 2) -> Relu -> Conv(channels,
    1x1) -> MaxPool -> GlobalAveragePool -> Flatten: a stem whose 3 channels no block divides, a grouped
    convolution (ShuffleNet's kind) and a plain one, the three cases of the blocked layouts (NCHW8c...)."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
        helper.make_node("MaxPool", ["c2"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["m"], ["p"]),
        helper.make_node("Flatten", ["p"], ["y"]),
    ]
    inits = []
    for i, (c_in, k) in enumerate(((3, 3), (channels // 2, 3), (channels, 1))):
        inits += [_init(rng, f"w{i}", (channels, c_in, k, k), 0.3), _init(rng, f"b{i}", (channels,))]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels])],
        inits,
        "grouped_convnet",
    )


def shuffle_units(seed: int = 0, channels: int = 12, groups: int = 3) -> onnx.ModelProto:
    """x[1,3,16,16] -> Conv 1x1 -> Relu -> two ShuffleNet units (grouped 1x1 conv -> BN -> Relu -> channel
    shuffle -> depthwise 3x3 conv -> BN -> grouped 1x1 conv -> BN; the first adds its input, the second's
    depthwise conv has stride 2) -> GlobalAveragePool -> Flatten. Random weights and batch norms: unlike
    the onnx package's light models, whose constant weights make every channel alike, a shuffle read in
    the wrong order changes the output."""
    rng = np.random.default_rng(seed)
    c, g, side = channels, groups, 16
    # A 1x1 stem: the shuffled depthwise convolution is then the heaviest kernel, the first that a small
    # tuning budget (which goes by FLOPs) gives trials to.
    inits = [_init(rng, "w0", (c, 3, 1, 1), 0.3), _init(rng, "b0", (c,))]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"]),
        helper.make_node("Relu", ["c0"], ["u0"]),
    ]

    def conv_bn(name: str, src: str, shape: tuple[int, ...], **conv: Any) -> str:
        inits.append(_init(rng, f"{name}_w", shape, 0.3))
        stats = [_init(rng, f"{name}_gamma", (c,)), _init(rng, f"{name}_beta", (c,)), _init(rng, f"{name}_mean", (c,))]
        var = numpy_helper.from_array(rng.uniform(0.5, 1.5, size=c).astype(np.float32), f"{name}_var")
        inits.extend([*stats, var])
        nodes.append(helper.make_node("Conv", [src, f"{name}_w"], [f"{name}_c"], **conv))
        bn_inputs = [f"{name}_c", f"{name}_gamma", f"{name}_beta", f"{name}_mean", f"{name}_var"]
        nodes.append(helper.make_node("BatchNormalization", bn_inputs, [f"{name}_bn"]))
        return f"{name}_bn"

    for unit, stride in ((1, 1), (2, 2)):
        src = f"u{unit - 1}"
        pointwise = conv_bn(f"g{unit}a", src, (c, c // g, 1, 1), group=g)
        nodes.append(helper.make_node("Relu", [pointwise], [f"r{unit}"]))
        split = numpy_helper.from_array(np.array([1, g, c // g, side, side], dtype=np.int64), f"split{unit}")
        merge = numpy_helper.from_array(np.array([1, c, side, side], dtype=np.int64), f"merge{unit}")
        inits += [split, merge]
        nodes += [
            helper.make_node("Reshape", [f"r{unit}", f"split{unit}"], [f"s{unit}a"]),
            helper.make_node("Transpose", [f"s{unit}a"], [f"s{unit}b"], perm=[0, 2, 1, 3, 4]),
            helper.make_node("Reshape", [f"s{unit}b", f"merge{unit}"], [f"s{unit}"]),
        ]
        dw = conv_bn(f"d{unit}", f"s{unit}", (c, 1, 3, 3), group=c, pads=[1, 1, 1, 1], strides=[stride, stride])
        out = conv_bn(f"g{unit}b", dw, (c, c // g, 1, 1), group=g)
        if stride == 1:
            nodes.append(helper.make_node("Add", [out, src], [f"a{unit}"]))
            out = f"a{unit}"
        nodes.append(helper.make_node("Relu", [out], [f"u{unit}"]))
    nodes += [
        helper.make_node("GlobalAveragePool", ["u2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c])],
        inits,
        "shuffle_units",
    )


def fire_modules(seed: int = 0, side: int = 15) -> onnx.ModelProto:
    """x[1,3,side,side] -> Conv 3x3 -> Relu -> MaxPool -> three SqueezeNet fire modules (squeeze 1x1 ->
    Relu, expand 1x1 and 3x3 -> Relu each, Concat), a MaxPool after the second -> Dropout -> Conv 1x1 ->
    Relu -> GlobalAveragePool -> Flatten. Random weights: unlike light_squeezenet's constant ones, a
    concatenation's channel read from the wrong part or the wrong weight slice changes the output."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w0", (16, 3, 3, 3), 0.3), _init(rng, "b0", (16,))]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("MaxPool", ["r0"], ["f0"], kernel_shape=[3, 3], strides=[2, 2]),
    ]

    def conv_relu(name: str, src: str, shape: tuple[int, ...], **conv: Any) -> str:
        inits.extend([_init(rng, f"{name}_w", shape, 0.3), _init(rng, f"{name}_b", (shape[0],))])
        nodes.append(helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [f"{name}_c"], **conv))
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"]))
        return f"{name}_r"

    src, channels = "f0", 16
    for fire, (squeeze, expand) in enumerate(((8, 16), (8, 16), (16, 32)), start=1):
        s = conv_relu(f"fire{fire}_s", src, (squeeze, channels, 1, 1))
        e1 = conv_relu(f"fire{fire}_e1", s, (expand, squeeze, 1, 1))
        e3 = conv_relu(f"fire{fire}_e3", s, (expand, squeeze, 3, 3), pads=[1, 1, 1, 1])
        nodes.append(helper.make_node("Concat", [e1, e3], [f"fire{fire}"], axis=1))
        src, channels = f"fire{fire}", 2 * expand
        if fire == 2:
            nodes.append(helper.make_node("MaxPool", [src], ["pool2"], kernel_shape=[3, 3], strides=[2, 2]))
            src = "pool2"
    nodes.append(helper.make_node("Dropout", [src], ["drop"]))  # inference: the identity
    head = conv_relu("head", "drop", (10, channels, 1, 1))
    nodes += [
        helper.make_node("GlobalAveragePool", [head], ["p"]),
        helper.make_node("Flatten", ["p"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
        "fire_modules",
    )


def outer_product(n: int = 2048, seed: int = 0) -> onnx.ModelProto:
    """a[n,1] x b[1,n] -> Relu -> ReduceSum over columns -> y[n,1]: small inputs, outputs and weights
    (none), one n*n float32 intermediate (16 MB at n=2048). What the memory tests and benchmarks need: a
    peak that comes from an intermediate tensor, not from parameters."""
    del seed  # no weights: the inputs are seeded by the sweep
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["ab"]),
        helper.make_node("Relu", ["ab"], ["r"]),
        helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=1),
    ]
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, 1]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, n]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 1])],
        [axes],
        "outer_product",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the example models")
    parser.add_argument("out", type=Path, nargs="?", default=Path("examples/models"))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for name, model in (
        ("tiny_cnn", tiny_cnn()),
        ("tiny_mlp", tiny_mlp()),
        ("two_outputs", two_outputs()),
        ("conv_gemm_32", conv_gemm_32()),
    ):
        onnx.save(model, out / f"{name}.onnx")
        print(out / f"{name}.onnx")


if __name__ == "__main__":
    main()
