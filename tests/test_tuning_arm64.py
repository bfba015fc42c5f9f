"""Tuning a cross target: candidates cross-compiled to aarch64 .so files and timed on the emulated board.

The board has no compiler, so a candidate exported as MetaSchedule's default .tar could not load there;
every trial that loads and runs proves the .so path. The board root is the ``arm64_root`` fixture of
tests/conftest.py (provisioned into TVMBENCH_ARM64_CACHE, default ~/.cache/tvmbench/arm64-emu, if it is not).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest
from sqlalchemy import select

from db import models as m
from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.scheduler import run_sweep
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.answers import query
from workers import model_zoo
from workers.artifacts import ArtifactCache

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    # The cross compiler is a tool of this machine, known at collection; the board is provisioned by the
    # arm64_root fixture when the test runs (it skips only without qemu, and fails if provisioning fails).
    pytest.mark.skipif(
        shutil.which("aarch64-linux-gnu-gcc") is None,
        reason="tuning for aarch64 cross-compiles candidates: needs gcc-aarch64-linux-gnu (scripts/setup.sh --system)",
    ),
]


def test_emulated_aarch64_board_tunes_a_tiny_model(tmp_path: Path, ray_local: None, arm64_root: Path) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "tiny_mlp.onnx")
    sweep = write_sweep(
        tmp_path,
        f'[[models]]\npath = "{tmp_path}/tiny_mlp.onnx"\n[[targets]]\npreset = "arm64-emu"\n'
        "[axes]\ntuning = [4]\n[tuning]\nnum_trials_per_iter = 4\nrunner_timeout_s = 120\n"
        "[measure]\nnumber = 2\nrepeat = 2\n",
    )
    farm = LocalFarm.start(tmp_path / "farm", {"arm64-emu": 1}, board_roots={"arm64-emu": str(arm64_root)})
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        spec = load_spec(sweep)
        outcome = run_sweep(spec, store, farm.tracker, ArtifactCache(tmp_path / "artifacts"), health_checks=False)
        assert dict(outcome.statuses) == {"ok": 1}, query.results(store, spec.sweep_id)
        with store._sessions() as s:
            build = s.scalars(select(m.Build)).one()
            assert build.artifact_arch == "aarch64"
            tuning = build.tuning
        assert tuning["trials_run"] == 4, tuning
        # Every candidate loaded on the aarch64 board: none failed as a wrong-architecture "build".
        assert not tuning["failed_trials"].get("build"), tuning
        assert any(t["records_found"] for t in tuning["tasks"]), tuning["tasks"]
    finally:
        store.close()
        farm.stop()
