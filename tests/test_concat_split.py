"""The "per-target-fold-bn-shuffle-concat" pipeline: a convolution of a concatenation summed over its parts.

On workers/model_zoo.fire_modules (three SqueezeNet fire modules with random weights, so a part read with
the wrong slice of the weights changes the output): the pass and the programs it gives in NCHW and in a
blocked layout, against ONNX Runtime; modules it must leave alone; and a real `tvmbench sweep run` whose
build converts the split convolutions to the layout (the rewrites run before the layout axis) and is checked
against ONNX Runtime on the embedded farm. The fold of batch norms gains the same order: it now applies to
a model converted to a blocked layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from typer.testing import CliRunner

from tests.conftest import lowered_and_output, write_sweep
from tvmbench.cli import app
from workers import model_zoo

SWEEP = """
name = "fire"
[[models]]
path = "{model}"
[axes]
executor = ["vm-compiled"]
pipeline = ["per-target", "per-target-fold-bn-shuffle-concat"]
layout = ["NCHW16c"]
[measure]
number = 2
repeat = 3
"""


def invoke(*args: str) -> object:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def kernels(lowered: object) -> list[str]:
    """The names of a lowered module's TIR functions."""
    import tvm

    return [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]  # type: ignore[attr-defined]


def test_the_convolutions_of_concatenations_are_summed_over_their_parts_and_the_output_is_onnx_runtimes() -> None:
    import onnxruntime
    from tvm.relax.frontend.onnx import from_onnx

    from workers.concat_split import split_conv_over_concat

    proto = model_zoo.fire_modules(seed=3)
    mod = from_onnx(proto, keep_params_in_input=False)
    split = split_conv_over_concat()(mod)
    # Three concatenations, each read by one convolution (the second through a max pool, the third through
    # the dropout): each convolution becomes two, the pool is taken of each part, and no concatenation is left.
    before, after = mod.script(), split.script()
    assert before.count("R.concat(") == 3 and after.count("R.concat(") == 0, after
    assert (before.count("R.nn.conv2d("), after.count("R.nn.conv2d(")) == (11, 14)
    assert (before.count("R.nn.max_pool2d("), after.count("R.nn.max_pool2d(")) == (2, 3)
    x = np.random.default_rng(1).standard_normal((1, 3, 15, 15)).astype("float32")
    want = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    for layout in ("NCHW", "NCHW8c"):
        names = {}
        for pipeline in ("per-target", "per-target-fold-bn-shuffle-concat"):
            lowered, got = lowered_and_output(proto, pipeline, x, layout)
            assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max())), (layout, pipeline)
            names[pipeline] = kernels(lowered)
        assert any("concatenate" in k for k in names["per-target"]), names
        summed = names["per-target-fold-bn-shuffle-concat"]
        assert not any("concatenate" in k for k in summed), summed
        # The partial sum is added in the next part's kernel, with the bias and the Relu after it.
        assert sum("add" in k and "relu" in k and k.count("add") >= 2 for k in summed) == 3, summed


def test_a_module_without_a_convolution_of_a_concatenation_is_left_as_it_is() -> None:
    import tvm_ffi
    from tvm.relax.frontend.onnx import from_onnx

    from workers.concat_split import split_conv_over_concat

    # merged_branches concatenates, but a pooling reads it: nothing to split.
    for proto in (model_zoo.tiny_cnn(), model_zoo.grouped_convnet(), model_zoo.merged_branches()):
        mod = from_onnx(proto, keep_params_in_input=False)
        assert tvm_ffi.structural_equal(split_conv_over_concat()(mod), mod), proto.graph.name


def test_the_fold_of_batch_norms_applies_under_a_converted_layout() -> None:
    import onnxruntime

    proto = model_zoo.conv_bn()
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    want = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    for layout in ("NCHW8c", "NHWC"):
        names = {}
        for pipeline in ("per-target", "per-target-fold-bn"):
            lowered, got = lowered_and_output(proto, pipeline, x, layout)
            assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max())), (layout, pipeline)
            names[pipeline] = kernels(lowered)
        assert any("batch_norm" in k for k in names["per-target"]), (layout, names)
        assert not any("batch_norm" in k for k in names["per-target-fold-bn"]), (layout, names)


def test_a_sweep_converts_the_split_convolutions_to_its_layout_and_stays_correct(
    tmp_path: Path, home: Path, ray_local: None
) -> None:
    model = tmp_path / "fire_modules.onnx"
    onnx.save(model_zoo.fire_modules(), model)
    run = invoke("sweep", "run", str(write_sweep(tmp_path, SWEEP.format(model=model))))
    assert run.exit_code == 0, run.output
    db = f"sqlite:///{home / 'results.db'}"
    rows = json.loads(invoke("results", "list", "--json", "--db", db).stdout)
    layouts = {}
    for row in rows:
        assert row["status"] == "ok" and row["max_abs_err"] <= 1e-4, (row["status"], row["error"], row["max_abs_err"])
        build = json.loads(invoke("results", "show", row["job_key"], "--json", "--db", db).stdout)["build"]
        layouts[row["pipeline"]] = (build["layout"]["convs"], build["layout"]["convs_converted"], build["pass_trace"])
    convs, converted, trace = layouts["per-target-fold-bn-shuffle-concat"]
    assert (convs, converted) == (14, 14) and "SplitConvOverConcat" in json.dumps(trace), layouts
    assert layouts["per-target"][:2] == (11, 11), layouts
