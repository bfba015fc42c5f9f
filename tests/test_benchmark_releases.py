"""benchmarks/releases.py writes sweep files that `tvmbench sweep plan` accepts (no builds, no runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import releases as bench

TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))


def plan(path: Path, home: Path) -> dict:
    env = {**os.environ, "TVMBENCH_HOME": str(home)}
    proc = subprocess.run([TVMBENCH, "sweep", "plan", str(path), "--json"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_quick_sweep_plans_every_release_and_both_vm_executors(tmp_path: Path) -> None:
    args = bench.parse_args(["--quick", "--workdir", str(tmp_path), "--o3-only", "tiny_cnn", "--per-release"])
    paths = bench.write_sweeps(args)
    # --per-release: one file per release, per opt_level group
    assert [p.name for p in paths] == [
        f"releases-benchmark{group}-{r}.toml" for group in ("", "-o3") for r in bench.RELEASES
    ]
    jobs = [j for p in paths for j in plan(p, tmp_path / "home")["jobs"]]
    # 2 tiny models x 3 releases x 2 executors x opt_level 3: each combination exactly once
    combos = {(j["model"], j["tvm_version"], j["executor"], j["opt_level"]) for j in jobs}
    assert len(jobs) == len(combos) == 12
    assert {j["tvm_version"] for j in jobs} == set(bench.RELEASES)
    assert {j["opt_level"] for j in jobs} == {3}
    assert {j["model"] for j in jobs} == set(bench.QUICK_MODELS)


def test_full_matrix_sends_o3_only_models_to_their_own_sweep(tmp_path: Path) -> None:
    args = bench.parse_args(["--workdir", str(tmp_path), "--o3-only", "light_resnet50", "--releases", "0.26.0"])
    full, o3 = (plan(p, tmp_path / "home")["jobs"] for p in bench.write_sweeps(args))
    assert {(j["model"], j["opt_level"]) for j in full} == {
        (m, o) for m in ("light_squeezenet", "light_shufflenet") for o in (0, 3)
    }
    assert {(j["model"], j["opt_level"]) for j in o3} == {("light_resnet50", 3)}


def test_o3_only_must_name_a_model_of_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--workdir", str(tmp_path), "--o3-only", "light_vgg19"])
    assert exc.value.code == 2
    assert "--o3-only light_vgg19: not among --models" in capsys.readouterr().err


def test_by_default_every_release_is_in_one_sweep(tmp_path: Path) -> None:
    args = bench.parse_args(["--quick", "--workdir", str(tmp_path)])
    (path,) = bench.write_sweeps(args)
    jobs = plan(path, tmp_path / "home")["jobs"]
    assert {j["tvm_version"] for j in jobs} == set(bench.RELEASES)
    assert len(jobs) == 12


def test_again_needs_per_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--quick", "--workdir", str(tmp_path), "--again"])
    assert exc.value.code == 2
    assert "give --per-release too" in capsys.readouterr().err
