"""The board agent's functions: facts and the per-kernel profile; stock RPC servers still work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.farm import LocalFarm
from orchestrator.scheduler import run_sweep
from orchestrator.spec import SpecError, load_spec, parse_spec
from tests.conftest import write_sweep
from tvmbench.answers import query as reads
from tvmbench.answers import why
from workers.artifacts import ArtifactCache

SWEEP = """
name = "profile"
[[models]]
path = "{models}/tiny_cnn.onnx"
[[targets]]
preset = "host"
[[targets]]
preset = "host"
name = "host-stock"
board_key = "stock"
[axes]
executor = ["vm-bytecode", "vm-compiled", "onnxruntime"]
[measure]
number = 2
repeat = 2
profile = true
"""


def test_profile_and_onnxruntime_baseline_on_agent_and_stock_server(
    home: Path, models_dir: Path, ray_local: None, local_farm: LocalFarm, stock_board: str, store, tmp_path: Path
) -> None:
    spec = load_spec(write_sweep(tmp_path, SWEEP.format(models=models_dir)))
    assert spec.measure.profile is True
    outcome = run_sweep(spec, store, local_farm.tracker, ArtifactCache(home / "artifacts"))
    assert dict(outcome.statuses) == {"ok": 5, "build": 1}, reads.results(store, spec.sweep_id)
    runs, rows = {}, {}
    for row in reads.results(store, spec.sweep_id):
        detail = reads.job_detail(store, row["job_key"], spec.sweep_id)
        runs[(row["target"], row["executor"])] = (detail["runs"][-1]["kernel_profile"], detail["build"])
        rows[(row["target"], row["executor"])] = row

    # The baseline: ONNX Runtime run on the board by the agent, checked and timed, with no TVM build.
    ort = rows[("host", "onnxruntime")]
    assert ort["status"] == "ok" and ort["median_ms"] > 0 and ort["max_abs_err"] <= 1e-5
    assert len(ort["samples"]) == 2
    assert runs[("host", "onnxruntime")][1]["kernel_count"] is None  # nothing was compiled
    assert runs[("host", "onnxruntime")][0]["available"] is False
    stock_ort = rows[("host-stock", "onnxruntime")]
    assert stock_ort["status"] == "build" and "board_agent.py" in stock_ort["error"]

    profile, build = runs[("host", "vm-bytecode")]
    assert profile["available"] is True
    kernels = {k["name"] for k in profile["kernels"] if k["kind"] == "kernel"}
    # One entry per distinct compiled kernel the VM called (builtins apart), the fused conv among them.
    assert 0 < len(kernels) <= build["kernel_count"]
    assert any(name.startswith("fused_conv2d") for name in kernels)
    assert any(k["kind"] == "builtin" for k in profile["kernels"])
    assert all(k["total_ms"] >= 0 and k["calls_per_run"] >= 1 for k in profile["kernels"])
    tir_total = sum(k["total_ms"] for k in profile["kernels"])
    assert 0 < tir_total <= profile["run_ms"] * 1.5
    # `results show` and the job page read the agent's own format: every call, slowest first, in ms.
    shown = why.normalise_profile(profile)
    assert len(shown) == len(profile["kernels"]) and shown[0][1] == max(k["total_ms"] for k in profile["kernels"])

    compiled, _ = runs[("host", "vm-compiled")]
    assert compiled["available"] is False and "vm-compiled" in compiled["reason"]

    for executor in ("vm-bytecode", "vm-compiled"):
        assert rows[("host-stock", executor)]["status"] == "ok"
        stock, _ = runs[("host-stock", executor)]
        assert stock["available"] is False and "stock TVM RPC server" in stock["reason"]


def test_profile_must_be_a_boolean(tmp_path: Path, models_dir: Path) -> None:
    text = f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n[measure]\nprofile = 1\n'
    with pytest.raises(SpecError, match=r"measure\.profile = 1: expected true or false"):
        parse_spec(text, base=tmp_path)


def test_unprovisioned_emulated_board_says_how_to_provision(tmp_path: Path) -> None:
    import shutil

    from orchestrator.farm import FarmError, board_command

    with pytest.raises(FarmError) as raised:
        board_command("arm64-emu", "127.0.0.1:1", "127.0.0.1", 2, root=tmp_path / "nothing-here")
    if shutil.which("qemu-aarch64-static") is None:
        assert "apt-get install qemu-user-static" in str(raised.value)
    else:
        assert "not provisioned" in str(raised.value) and "provision.sh" in str(raised.value)
    # A native key runs the agent with this interpreter.
    assert board_command("host", "127.0.0.1:1", "127.0.0.1", 2)[0] == sys.executable
