"""The "per-target-fold-bn-shuffle" pipeline: a channel shuffle read by the convolution after it, not copied.

On workers/model_zoo.shuffle_units (two ShuffleNet units with random weights, so a channel read in the
wrong order changes the output): the pass alone, against ONNX Runtime; and a tuned sweep through
`tvmbench sweep run` and its embedded farm, whose tuned program is checked against ONNX Runtime and whose
tasks include the shuffled convolutions and no shuffle.
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
name = "shuffle"
[[models]]
path = "{model}"
[axes]
executor = ["vm-compiled"]
pipeline = ["per-target-fold-bn-shuffle"]
tuning = [{trials}]
[tuning]
cost_model = "random"
num_trials_per_iter = 4
[measure]
number = 2
repeat = 3
"""


def invoke(*args: str) -> object:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_the_shuffles_are_read_through_by_the_convolutions_and_the_output_is_onnx_runtimes() -> None:
    import onnxruntime
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    from workers.channel_shuffle import fuse_channel_shuffle_into_conv

    proto = model_zoo.shuffle_units(seed=2)
    mod = from_onnx(proto, keep_params_in_input=False)
    fused = fuse_channel_shuffle_into_conv()(mod)
    assert mod.script().count("R.permute_dims") == 2 and fused.script().count("R.permute_dims") == 0
    assert sum(1 for gv in fused.get_global_vars() if gv.name_hint.startswith("conv2d_shuffled")) == 2
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype("float32")
    want = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    kernels = {}
    for pipeline in ("per-target-fold-bn", "per-target-fold-bn-shuffle"):
        lowered, got = lowered_and_output(proto, pipeline, x)
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max())), (pipeline, got, want)
        kernels[pipeline] = [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert any("transpose" in k for k in kernels["per-target-fold-bn"]), kernels
    shuffled = kernels["per-target-fold-bn-shuffle"]
    assert not any("transpose" in k for k in shuffled) and sum("conv2d_shuffled" in k for k in shuffled) == 2
    # The folded batch norm's bias add fuses into the shuffled convolution, as into a plain one.
    assert any(k.startswith("fused_conv2d_shuffled") and "add" in k for k in shuffled), shuffled


def test_a_module_without_a_channel_shuffle_is_left_as_it_is() -> None:
    import tvm_ffi
    from tvm.relax.frontend.onnx import from_onnx

    from workers.channel_shuffle import fuse_channel_shuffle_into_conv

    for proto in (model_zoo.grouped_convnet(), model_zoo.tiny_cnn()):
        mod = from_onnx(proto, keep_params_in_input=False)
        assert tvm_ffi.structural_equal(fuse_channel_shuffle_into_conv()(mod), mod), proto.graph.name


def test_a_tuned_sweep_tunes_the_shuffled_convolutions_and_stays_correct(
    tmp_path: Path, home: Path, ray_local: None
) -> None:
    model = tmp_path / "shuffle_units.onnx"
    onnx.save(model_zoo.shuffle_units(), model)
    plan = invoke("sweep", "plan", str(write_sweep(tmp_path, SWEEP.format(model=model, trials=16))), "--json")
    assert plan.exit_code == 0, plan.output
    (planned,) = json.loads(plan.stdout)["jobs"]
    tasks = [t["name"] for t in planned["tuning_plan"]["tasks"]]
    assert sum("conv2d_shuffled" in t for t in tasks) == 2 and not any("transpose" in t for t in tasks), tasks
    run = invoke("sweep", "run", str(write_sweep(tmp_path, SWEEP.format(model=model, trials=16))))
    assert run.exit_code == 0, run.output
    db = f"sqlite:///{home / 'results.db'}"
    (row,) = json.loads(invoke("results", "list", "--json", "--db", db).stdout)
    assert row["status"] == "ok" and row["max_abs_err"] <= 1e-4, (row["status"], row["error"], row["max_abs_err"])
    build = json.loads(invoke("results", "show", row["job_key"], "--json", "--db", db).stdout)["build"]
    assert "FuseChannelShuffleIntoConv" in build["pass_trace"]
    tuned = {t["name"]: t["trials"] for t in build["tuning"]["tasks"]}
    assert any("conv2d_shuffled" in name and trials > 0 for name, trials in tuned.items()), tuned
