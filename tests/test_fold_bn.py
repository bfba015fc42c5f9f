"""The "per-target-fold-bn" pipeline: batch norms after convolutions folded into them, checked for real.

A conv -> batch norm -> relu net (workers/model_zoo.conv_bn) swept with both per-target pipelines through
`tvmbench sweep run` and its embedded farm: both programs are checked against ONNX Runtime, and the folded
one has no batch-norm kernel. `sweep plan` of a tuned job lists its tuning tasks: none is a batch norm.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from tests.conftest import write_sweep
from tvmbench.cli import app
from workers import model_zoo

SWEEP = """
name = "fold-bn"
[[models]]
path = "{model}"
[axes]
executor = ["vm-bytecode", "onnxruntime"]
opt_level = [2]
pipeline = ["per-target", "per-target-fold-bn"]
{extra}
[measure]
number = 3
repeat = 5
"""


def invoke(*args: str) -> object:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fold-bn") / "conv_bn.onnx"
    onnx.save(model_zoo.conv_bn(), path)
    return path


@pytest.fixture(scope="module")
def swept(model: Path, tmp_path_factory: pytest.TempPathFactory, ray_local: None) -> Iterator[dict[str, dict]]:
    """pipeline -> the results row of its vm-bytecode job (and "onnxruntime" -> the baseline's)."""
    home = tmp_path_factory.mktemp("fold-bn-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TVMBENCH_HOME", str(home))
        patch.delenv("TVMBENCH_DB", raising=False)
        patch.delenv("TVMBENCH_TRACKER", raising=False)
        run = invoke("sweep", "run", str(write_sweep(home, SWEEP.format(model=model, extra=""))))
        assert run.exit_code == 0, run.output
        db = f"sqlite:///{home / 'results.db'}"
        rows = json.loads(invoke("results", "list", "--json", "--db", db).stdout)
        by = {r["pipeline"] if r["executor"] == "vm-bytecode" else r["executor"]: r for r in rows}
        details = {
            k: json.loads(invoke("results", "show", r["job_key"], "--json", "--db", db).stdout) for k, r in by.items()
        }
        yield {k: {**r, "detail": details[k]} for k, r in by.items()}


def test_both_pipelines_are_correct_against_onnx_runtime(swept: dict[str, dict]) -> None:
    assert sorted(swept) == ["onnxruntime", "per-target", "per-target-fold-bn"]
    assert all(r["status"] == "ok" for r in swept.values()), {k: (r["status"], r["error"]) for k, r in swept.items()}
    assert swept["per-target-fold-bn"]["max_abs_err"] <= 1e-4


def test_the_folded_program_has_no_batch_norm_kernel(swept: dict[str, dict]) -> None:
    plain, folded = (swept[p]["detail"]["build"] for p in ("per-target", "per-target-fold-bn"))
    assert "FoldBatchnormToConv2D" in folded["pass_trace"] and "FoldBatchnormToConv2D" not in plain["pass_trace"]
    # Each batch norm was a kernel of its own (its legalized form returns a tuple, so the convolution before
    # it does not fuse with it); folded, what is left of it (a bias add) fuses into the convolution.
    assert folded["kernel_count"] < plain["kernel_count"], (folded["kernel_count"], plain["kernel_count"])
    assert folded["fingerprint"] != plain["fingerprint"]


def test_a_tuned_job_under_the_fold_tunes_no_batch_norm(model: Path, tmp_path: Path, home: Path) -> None:
    text = SWEEP.format(model=model, extra="tuning = [8]").replace('"vm-bytecode", "onnxruntime"', '"vm-bytecode"')
    plan = invoke("sweep", "plan", str(write_sweep(tmp_path, text)), "--json")
    assert plan.exit_code == 0, plan.output
    tasks = {j["pipeline"]: [t["name"] for t in j["tuning_plan"]["tasks"]] for j in json.loads(plan.stdout)["jobs"]}
    assert any("batch_norm" in name for name in tasks["per-target"]), tasks
    assert tasks["per-target-fold-bn"] and not any("batch_norm" in name for name in tasks["per-target-fold-bn"])


def test_broadcast_weights_and_a_biased_convolution_fold_too() -> None:
    """The importer gives ConstantOfShape weights (the onnx package's light models) as broadcast_to(const),
    and a convolution's bias as an add between it and the batch norm: TVM's pass alone folds neither."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from workers.fold_bn import fold_batch_norm_passes

    mod = from_onnx(model_zoo.conv_bn(), keep_params_in_input=False)
    assert "R.broadcast_to" in mod.script() and mod.script().count("R.nn.batch_norm") == 2
    assert relax.transform.FoldBatchnormToConv2D()(mod).script().count("R.nn.batch_norm") == 2  # TVM's pass alone
    folded = tvm.transform.Sequential(fold_batch_norm_passes())(mod)
    assert folded.script().count("R.nn.batch_norm") == 0 and folded.script().count("R.nn.conv2d") == 2


def test_the_folded_biased_convolution_computes_what_onnx_runtime_does() -> None:
    """The fold's arithmetic (scaled weights, the bias scaled and shifted) on random weights, on this machine."""
    import numpy as np
    import onnxruntime
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from workers.fold_bn import fold_batch_norm_after_conv_bias

    proto = model_zoo.conv_bn(seed=3)
    mod = tvm.transform.Sequential([relax.transform.FoldConstant(), fold_batch_norm_after_conv_bias()])(
        from_onnx(proto, keep_params_in_input=False)
    )
    assert mod.script().count("R.nn.batch_norm") == 1  # the biased one folded, the other left to TVM's pass
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype("float32")
    want = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max())), np.abs(got - want).max()
