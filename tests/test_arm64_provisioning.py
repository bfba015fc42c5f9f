"""The arm64-emu tests provision their board instead of skipping: ``provisioned_arm64_root`` (tests/conftest.py)
skips only where qemu-aarch64 is absent, and a provisioning that fails fails the test, naming the cause.

Provisioning runs the real infra/farm/arm64-emu/provision.sh, on a PATH that lacks what the case needs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import QEMU_AARCH64, provisioned_arm64_root


def _path_with(tmp_path: Path, tools: list[str]) -> str:
    """A PATH holding only ``tools`` (links to this machine's), so that everything else is missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} not on this machine")
        os.symlink(found, bin_dir / tool)
    return str(bin_dir)


def test_without_qemu_the_board_tests_skip_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _path_with(tmp_path, ["bash"]))
    with pytest.raises(pytest.skip.Exception, match=QEMU_AARCH64):
        provisioned_arm64_root(tmp_path / "root", tmp_path / "provision.log")


def test_a_provisioning_that_fails_fails_the_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # qemu is there, debootstrap is not: the machine can emulate but the board cannot be set up.
    monkeypatch.setenv("PATH", _path_with(tmp_path, ["bash", "id", "cat", QEMU_AARCH64]))
    with pytest.raises(pytest.fail.Exception) as failed:
        provisioned_arm64_root(tmp_path / "root", tmp_path / "provision.log")
    assert "debootstrap not found" in str(failed.value), failed.value
    assert str(tmp_path / "provision.log") in str(failed.value)
    assert not (tmp_path / "root").exists()


def test_a_provisioned_root_is_reused(tmp_path: Path) -> None:
    """A root stamped with the script's pins is taken as it is (no debootstrap, no network)."""
    script = (Path(__file__).parent.parent / "infra" / "farm" / "arm64-emu" / "provision.sh").read_text()
    pins = " ".join(
        line.split("=", 1)[1].strip('"')
        for line in script.splitlines()
        if line.startswith(("SUITE=", "TVM_PIN=", "FFI_PIN=", "NUMPY_PIN="))
    )
    root = tmp_path / "root"
    root.mkdir()
    (root / ".tvmbench-provisioned").write_text(pins + "\n")
    if shutil.which(QEMU_AARCH64) is None:
        pytest.skip(f"{QEMU_AARCH64} not installed")
    assert provisioned_arm64_root(root, tmp_path / "provision.log") == root
    assert "is provisioned" in (tmp_path / "provision.log").read_text()
