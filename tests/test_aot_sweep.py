"""aot-c through the whole pipeline: spec -> plan -> Ray builds -> the MCU agent behind a real tracker ->
QEMU -> ONNX Runtime check -> SQL, with instruction counts, flash and RAM stored."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from orchestrator.farm import LocalFarm
from orchestrator.plan import plan_jobs
from orchestrator.scheduler import run_sweep
from orchestrator.spec import SpecError, load_spec, parse_spec
from tests.conftest import write_sweep
from tvmbench.answers import query as reads
from workers import model_zoo
from workers.artifacts import ArtifactCache

needs_toolchain = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm (bash scripts/setup.sh --system)",
)

MCU_SWEEP = """
name = "mcu-test"
[[models]]
path = "{models}/tiny_cnn.onnx"
[[models]]
path = "{models}/two_outputs.onnx"
[[models]]
path = "{extra}/conv_gemm_32.onnx"
[[models]]
path = "{extra}/wide_gemm.onnx"
[[targets]]
preset = "cortex-m4"
[axes]
executor = ["aot-c"]
kernels = ["c", "llvm"]
[measure]
repeat = 2
session_timeout_s = 120
device_wait_s = 60
"""


def test_spec_pairs_microcontrollers_with_aot_only(tmp_path: Path, models_dir: Path) -> None:
    base = f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n'
    with pytest.raises(SpecError, match=r"aot-c.*needs a microcontroller target"):
        parse_spec(base + '[[targets]]\npreset = "host"\n[axes]\nexecutor = ["aot-c"]\n', base=tmp_path)
    with pytest.raises(SpecError, match=r'cortex-m4 is a microcontroller: add "aot-c"'):
        parse_spec(base + '[[targets]]\npreset = "cortex-m4"\n', base=tmp_path)
    with pytest.raises(SpecError, match=r"axes\.kernels: 'gcc' is not valid"):
        parse_spec(
            base + '[[targets]]\npreset = "cortex-m4"\n[axes]\nexecutor = ["aot-c"]\nkernels = ["gcc"]\n',
            base=tmp_path,
        )
    mixed = parse_spec(
        base + '[[targets]]\npreset = "host"\n[[targets]]\npreset = "cortex-m3"\n'
        '[axes]\nexecutor = ["vm-bytecode", "aot-c"]\nkernels = ["c", "llvm"]\n',
        base=tmp_path,
    )
    jobs = plan_jobs(mixed)
    assert sorted((j.target.name, j.executor, j.kernels) for j in jobs) == [
        ("cortex-m3", "aot-c", "c"),
        ("cortex-m3", "aot-c", "llvm"),
        ("host", "vm-bytecode", None),
    ]
    vm_job = next(j for j in jobs if j.executor == "vm-bytecode")
    assert "kernels" not in vm_job.build_config()  # VM jobs keep the identity they had before the axis
    assert len({j.key for j in jobs}) == 3


@pytest.fixture(scope="module")
def mcu_farm(tmp_path_factory: pytest.TempPathFactory):
    farm = LocalFarm.start(tmp_path_factory.mktemp("mcu-farm"), {"cortex-m4-emu": 1})
    yield farm
    farm.stop()


@needs_toolchain
@pytest.mark.slow
def test_mcu_sweep_ok_deterministic_and_too_large_refused(
    tmp_path: Path, models_dir: Path, store, ray_local, mcu_farm: LocalFarm
) -> None:
    extra = tmp_path / "models"
    extra.mkdir()
    onnx.save(model_zoo.conv_gemm_32(), extra / "conv_gemm_32.onnx")
    onnx.save(model_zoo.wide_gemm(), extra / "wide_gemm.onnx")
    path = write_sweep(tmp_path, MCU_SWEEP.format(models=models_dir, extra=extra))
    cache = ArtifactCache(tmp_path / "artifacts")

    outcome = run_sweep(load_spec(path), store, mcu_farm.tracker, cache)
    rows = reads.results(store, outcome.sweep_id)
    by = {(r["model"], r["kernels_path"]): r for r in rows}
    assert len(rows) == 8, rows
    for model in ("tiny_cnn", "two_outputs", "conv_gemm_32"):
        for kernels in ("c", "llvm"):
            row = by[(model, kernels)]
            assert row["status"] == "ok", row["error"]
            assert row["unit"] == "instructions" and row["median_ms"] is None and row["median"] > 0
            assert len(set(row["samples"])) == 1, "instruction counts under -icount must not vary"
            assert row["max_abs_err"] < 1e-4
            assert row["ram_bytes"] > 0 and row["flash_bytes"] > 0
    for kernels in ("c", "llvm"):
        big = by[("wide_gemm", kernels)]
        assert big["status"] == "build"
        assert "5242880" in big["error"] and "4194304" in big["error"], big["error"]
    # The kernel path is a real axis: LLVM's Cortex-M code runs fewer instructions than gcc on TVM's C.
    assert by[("tiny_cnn", "llvm")]["median"] < by[("tiny_cnn", "c")]["median"]
    # "Does it fit a 256 KB part?" is answerable from the builds table.
    assert by[("tiny_cnn", "c")]["flash_bytes"] < 256 * 1024 < by[("conv_gemm_32", "c")]["flash_bytes"]
    detail = reads.job_detail(store, by[("conv_gemm_32", "c")]["job_key"])
    assert detail["build"]["memory"]["workspace_bytes"] > 0 and detail["build"]["memory"]["weights_bytes"] > 288_000
    board = next(b for b in reads.boards(store) if b.key == "cortex-m4-emu")
    assert board.emulated and board.facts["mcu"]["qemu_machine"] == "mps2-an386"

    rerun = run_sweep(load_spec(path, label="rerun"), store, mcu_farm.tracker, cache)
    assert rerun.built == 2 and rerun.cached == 6  # only the refused builds are tried again
    again = {(r["model"], r["kernels_path"]): r for r in reads.results(store, rerun.sweep_id)}
    for key, row in by.items():
        if row["status"] == "ok":
            assert again[key]["status"] == "ok"
            assert again[key]["median"] == row["median"], f"{key}: instruction count changed on rerun"


@needs_toolchain
def test_mcu_agent_kills_a_hanging_board_at_the_deadline(tmp_path: Path, mcu_farm: LocalFarm) -> None:
    import json

    from tests.test_aot_standalone import hanging_firmware
    from workers.aot.runner import pack_inputs
    from workers.tracker_client import request_session

    session = request_session(mcu_farm.tracker, "cortex-m4-emu", deadline_s=60, session_timeout_s=60)
    run = session.remote.get_function("tvmbench.mcu.run")
    answer = json.loads(run(bytearray(hanging_firmware(tmp_path)), bytearray(pack_inputs([], 1)), 1, 2.0))
    assert answer["status"] == "timeout" and "killed" in answer["error"]
    assert answer["wall_s"] >= 2.0  # it ran to its deadline, then was killed (the line above)
