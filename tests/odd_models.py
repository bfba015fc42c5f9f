"""Odd but valid ONNX models a hostile user would try, built with onnx.helper (random weights).

Each one once broke a sweep or its verdict: an index input over a small table (ONNX Runtime refused the
default draw), an index that reaches the table through arithmetic (no graph inspection can bound it),
Log of random values (NaN on both sides), outputs of different ranks including a scalar, a bool input,
and float16 throughout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(nodes: list, inputs: list, outputs: list, inits: list, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tvmbench-tests")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _weights(name: str, shape: tuple[int, ...], dtype: type = np.float32, seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(dtype), name)


def gather_table(rows: int = 4) -> onnx.ModelProto:
    """ids int64[2,3] -> Gather over a rows x 8 table -> [2,3,8]: an embedding lookup."""
    return _model(
        [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 8])],
        [_weights("table", (rows, 8))],
        "gather_table",
    )


def gather_shifted(rows: int = 4) -> onnx.ModelProto:
    """ids + 2 indexes a rows-row table: the default draw [0, 9] is out of range, and nothing can tell."""
    return _model(
        [
            helper.make_node("Add", ["ids", "two"], ["shifted"]),
            helper.make_node("Gather", ["table", "shifted"], ["y"], axis=0),
        ],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])],
        [_weights("table", (rows, 8)), numpy_helper.from_array(np.array(2, np.int64), "two")],
        "gather_shifted",
    )


def log_nan() -> onnx.ModelProto:
    """x[4,4] -> Log: NaN wherever the seeded input is negative, on TVM and ONNX Runtime alike."""
    return _model(
        [helper.make_node("Log", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [],
        "log_nan",
    )


def two_ranks() -> onnx.ModelProto:
    """x[2,3] -> (x * w: [2,3], its sum: a scalar []): outputs of different shapes and ranks."""
    return _model(
        [
            helper.make_node("Mul", ["x", "w"], ["y"]),
            helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
        ],
        [_weights("w", (2, 3))],
        "two_ranks",
    )


def bool_input() -> onnx.ModelProto:
    """x float[6], keep bool[6] -> Where(keep, x, 0): a boolean input."""
    return _model(
        [helper.make_node("Where", ["keep", "x", "zero"], ["y"])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
            helper.make_tensor_value_info("keep", TensorProto.BOOL, [6]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        [numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
        "bool_input",
    )


def float16_mlp() -> onnx.ModelProto:
    """x float16[1,8] -> MatMul(w float16[8,4]) -> Relu: float16 input, weights and output."""
    return _model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4])],
        [_weights("w", (8, 4), np.float16)],
        "float16_mlp",
    )


ODD_MODELS = {
    "gather_table": gather_table,
    "gather_shifted": gather_shifted,
    "log_nan": log_nan,
    "two_ranks": two_ranks,
    "bool_input": bool_input,
    "float16_mlp": float16_mlp,
}


def write_odd_models(folder: Path) -> dict[str, Path]:
    """Write every odd model into ``folder``; name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, build in ODD_MODELS.items():
        paths[name] = folder / f"{name}.onnx"
        onnx.save(build(), paths[name])
    return paths
