"""Target presets: every preset really builds a small model here, for the architecture it claims."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.scheduler import run_sweep
from orchestrator.spec import load_spec, parse_spec
from tests.conftest import write_sweep
from tvmbench.answers import query as reads
from tvmbench.cli import app
from tvmbench.core.records import Job, ModelRef
from workers.artifacts import ArtifactCache, elf_arch
from workers.executors.registry import build_job
from workers.executors.requests import BuildRequest
from workers.onnx_model import load_model
from workers.targets import PRESETS, presets_for, target_kind

REQUIRED = {"host", "rpi4", "arm64-emu", "rpi3", "armv7", "riscv64", "jetson-orin", "cuda-sm80"}


@pytest.fixture(scope="module")
def mlp(models_dir: Path) -> tuple[ModelRef, bytes]:
    path = models_dir / "tiny_mlp.onnx"
    loaded = load_model(path)
    ref = ModelRef(name="tiny_mlp", sha256=loaded.sha256, source=str(path), inputs=tuple(loaded.inputs))
    return ref, path.read_bytes()


def _job(model: ModelRef, preset: str, **target_changes) -> Job:
    target = replace(PRESETS[preset], **target_changes)
    return Job(model=model, target=target, executor="vm-bytecode", opt_level=2, pipeline="per-target")


def test_required_presets_exist_and_are_complete() -> None:
    assert set(PRESETS) >= REQUIRED
    for p in PRESETS.values():
        assert p.board_key and p.arch, p
        # TVM 0.27 rejects option strings: a preset is a dict or a tag.
        assert isinstance(p.tvm_target, dict) and ("kind" in p.tvm_target or set(p.tvm_target) == {"tag"}), p
        if p.cross_compiler:
            assert p.cross_compiler_package, p
    assert PRESETS["rpi3"].tvm_target["mfloat-abi"] == "hard"
    assert PRESETS["rpi3"].cross_compiler == "arm-linux-gnueabihf-gcc"
    assert PRESETS["rpi4"].tvm_target == {"tag": "raspberry-pi/4b-aarch64"}
    assert target_kind(PRESETS["jetson-orin"].tvm_target) == "cuda"
    assert target_kind(PRESETS["cuda-sm80"].tvm_target) == "cuda"


@pytest.mark.parametrize("preset", sorted(REQUIRED))
def test_preset_builds_for_its_architecture(preset: str, mlp: tuple[ModelRef, bytes]) -> None:
    model, data = mlp
    build, artifact = build_job(BuildRequest(_job(model, preset), data))
    assert build.status == "ok", build.error
    assert artifact is not None and elf_arch(artifact) == PRESETS[preset].arch


def test_missing_cross_compiler_is_a_build_error_naming_the_package(mlp: tuple[ModelRef, bytes]) -> None:
    model, data = mlp
    job = _job(model, "rpi4", cross_compiler="tvmbench-no-such-gcc", cross_compiler_package="gcc-tvmbench-test")
    build, artifact = build_job(BuildRequest(job, data))
    assert artifact is None
    assert build.status == "build"
    assert "tvmbench-no-such-gcc" in build.error and "apt-get install gcc-tvmbench-test" in build.error


def test_cross_compiler_without_its_c_library_names_the_package(
    mlp: tuple[ModelRef, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in for a cross gcc installed without recommends: it fails to link the way the real one does.
    fake = tmp_path / "bin" / "tvmbench-fake-gcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'ld: cannot find crti.o: No such file or directory' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    model, data = mlp
    job = _job(model, "rpi4", cross_compiler=fake.name, cross_compiler_package="gcc-x libc6-dev-x-cross")
    build, artifact = build_job(BuildRequest(job, data))
    assert artifact is None and build.status == "build"
    assert "C runtime is missing" in build.error and "apt-get install gcc-x libc6-dev-x-cross" in build.error


def test_user_defined_target_in_sweep_file(tmp_path: Path, models_dir: Path) -> None:
    text = f"""
[[models]]
path = "{models_dir}/tiny_mlp.onnx"
[[targets]]
name = "my-a72"
target = {{ kind = "llvm", mtriple = "aarch64-linux-gnu", mcpu = "cortex-a72" }}
board_key = "lab-pi"
arch = "aarch64"
cross_compiler = "aarch64-linux-gnu-gcc"
"""
    spec = parse_spec(text, base=tmp_path)
    (target,) = spec.targets
    assert target.board_key == "lab-pi" and target.tvm_target["mcpu"] == "cortex-a72"


def test_presets_for_prefers_the_board_key() -> None:
    assert presets_for("aarch64", "arm64-emu")[0] == "arm64-emu"
    assert set(presets_for("armv7l")) == {"rpi3", "armv7"}
    assert presets_for("sparc") == []


def test_targets_list_cli_shows_every_preset() -> None:
    result = CliRunner().invoke(app, ["targets", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["preset"]: r for r in json.loads(result.output)}
    assert set(rows) >= REQUIRED
    assert rows["rpi3"]["arch"] == "armv7l" and rows["riscv64"]["cross_compiler"] == "riscv64-linux-gnu-gcc"
    assert "libc6-dev-armhf-cross" in rows["rpi3"]["debian_packages"]


def test_cuda_build_without_gpu_waits_for_a_device(
    home: Path, models_dir: Path, ray_local: None, local_farm, store, tmp_path: Path
) -> None:
    """A CUDA job builds here and is recorded; with no cuda-sm80 board it stays pending-device."""
    path = write_sweep(
        tmp_path,
        f"""
name = "compile-only"
[[models]]
path = "{models_dir}/tiny_mlp.onnx"
[[targets]]
preset = "cuda-sm80"
[measure]
device_wait_s = 5
""",
    )
    spec = load_spec(path)
    outcome = run_sweep(spec, store, local_farm.tracker, ArtifactCache(home / "artifacts"))
    assert dict(outcome.statuses) == {"pending-device": 1}
    assert not outcome.complete
    (row,) = reads.results(store, spec.sweep_id)
    assert row["status"] == "pending-device"
    assert "cuda-sm80" in row["error"] and "sweep resume" in row["error"]
    build = reads.job_detail(store, row["job_key"], spec.sweep_id)["build"]
    assert build["status"] == "ok" and build["artifact_sha256"]
    assert ArtifactCache(home / "artifacts").has(build["artifact_sha256"])


def test_host_preset_builds_for_this_machines_cpu() -> None:
    from tvm.target import codegen

    cpu = codegen.llvm_get_system_cpu()
    expected = {"kind": "llvm", "mcpu": cpu} if cpu and cpu != "generic" else {"kind": "llvm"}
    assert PRESETS["host"].tvm_target == expected


def test_host_cpu_is_asked_once_per_machine_then_cached(tmp_path: Path, monkeypatch) -> None:
    from workers import host_cpu as targets  # where the host's CPU is asked and cached

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TVMBENCH_HOST_MCPU", raising=False)
    asked: list[int] = []
    monkeypatch.setattr(targets, "_ask_llvm_for_cpu", lambda: asked.append(1) or "cpu-x")
    assert targets.host_cpu() == "cpu-x" and targets.host_cpu() == "cpu-x"
    assert asked == [1]
    assert json.loads((tmp_path / "tvmbench" / "host-cpu.json").read_text()) == {targets._cpu_fingerprint(): "cpu-x"}
    monkeypatch.setenv("TVMBENCH_HOST_MCPU", "generic")
    assert targets.host_cpu() is None
    monkeypatch.setenv("TVMBENCH_HOST_MCPU", "skylake-avx512")
    assert targets.host_cpu() == "skylake-avx512"
