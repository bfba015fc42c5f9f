"""Real toolchains: TVM 0.26.0 provisioned in its own venv, a build in it, its artifact run by its own runtime.

The 0.26.0 environment is cached between runs in ~/.cache/tvmbench-test (TVMBENCH_TEST_CACHE overrides),
a TVMBENCH_HOME of its own, so only the first run provisions it (again when its pin in pins.py changes):
measured here, on 2 cores shared with other work, 95-117 s with the wheels in pip's cache, more when pip
downloads them (~100 MB). The first run of this module took 264 s, later ones 150-385 s (load average
10-15), all of it real TVM imports and builds in child processes: the add itself then takes seconds. The
tests that change a toolchain (remove it, break it) work on an interpreter toolchain on a hard-linked copy
of the cached venv, in a fresh TVMBENCH_HOME.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from orchestrator.plan import plan_jobs
from orchestrator.spec import parse_spec
from tests.conftest import TOOLCHAIN_CACHE, linked_venv_copy, one_error_line
from tvmbench.cli import app
from tvmbench.core.records import Job
from workers import model_zoo
from workers.toolchains import compat, probe, provision, registry
from workers.toolchains.build import build_in_toolchain, run_in_toolchain
from workers.toolchains.toolchain import Toolchain, ToolchainError

RELEASE = "0.26.0"
runner = CliRunner()


def invoke(*args: str) -> object:
    return runner.invoke(app, ["toolchains", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def tvm026(cached_home: Path) -> Toolchain:
    """TVM 0.26.0 added through the CLI (provisioned on the first run, found in the cache after)."""
    result = invoke("add", RELEASE, "--json")
    assert result.exit_code == 0, result.output
    toolchain = registry.find(RELEASE)
    assert toolchain is not None
    return toolchain


@pytest.fixture(scope="module")
def cnn_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Job, bytes]:
    models = tmp_path_factory.mktemp("models")
    onnx.save(model_zoo.tiny_cnn(), models / "tiny_cnn.onnx")
    text = "[[models]]\npath = 'tiny_cnn.onnx'\n[axes]\nexecutor = ['vm-bytecode']\nopt_level = [3]\n"
    (job,) = plan_jobs(parse_spec(text, base=models))
    return job, (models / "tiny_cnn.onnx").read_bytes()


def test_added_release_has_its_pinned_versions_and_passed_the_import_check(tvm026: Toolchain) -> None:
    assert (tvm026.name, tvm026.kind, tvm026.spec) == (RELEASE, "release", RELEASE)
    assert (tvm026.tvm_version, tvm026.ffi_version) == ("0.26.0", "0.1.14.post1")
    assert Path(tvm026.python).is_relative_to(TOOLCHAIN_CACHE / "toolchains" / RELEASE)
    assert any(Path(lib).name == "libtvm_runtime.so" for lib in tvm026.libraries)
    assert tvm026.provision_s is not None and tvm026.provision_s > 0
    facts = probe.import_check(tvm026.python)  # the environment imports the whole build path, today too
    assert facts["missing"] == [] and facts["tvm_version"] == "0.26.0"
    assert probe.check(tvm026) is None


def test_add_again_finds_it_and_list_shows_its_versions(tvm026: Toolchain) -> None:
    again = invoke("add", RELEASE)
    assert again.exit_code == 0, again.output
    assert "added already" in again.output
    rows = json.loads(invoke("list", "--json").stdout)
    by_name = {r["name"]: r for r in rows}
    assert rows[0]["name"] == "installed" and rows[0]["kind"] == "installed"
    assert (by_name[RELEASE]["tvm_version"], by_name[RELEASE]["ffi_version"]) == ("0.26.0", "0.1.14.post1")
    table = invoke("list", "--check", "--wide")
    assert table.exit_code == 0, table.output
    line = next(ln for ln in table.output.splitlines() if ln.startswith(RELEASE))
    assert "0.1.14.post1" in line and " ok " in f"{line} "


def test_a_build_in_026_runs_in_the_026_runtime_and_matches_onnxruntime(
    tvm026: Toolchain, cnn_job: tuple[Job, bytes]
) -> None:
    import onnxruntime

    job, model = cnn_job
    build, artifact = build_in_toolchain(tvm026, job, model)
    assert build.ok, build.error
    assert (build.tvm_version, build.ffi_version) == ("0.26.0", "0.1.14.post1")
    assert build.build_key == job.build_key("0.26.0") != job.build_key("0.27.0.post1")
    assert artifact is not None and artifact[:4] == b"\x7fELF" and len(artifact) == build.artifact_size
    assert build.kernel_count == 7 and "FuseOps" in build.pass_trace  # opt_level 3, per-target: fused
    assert "tirx.StmtSimplify" in build.pass_trace  # 0.26's name; 0.27 records s_tir.StmtSimplify
    assert "s_tir.StmtSimplify" in compat.normalized_trace(build.pass_trace)
    assert build.memory and build.memory.get("planned_bytes")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    outputs, facts = run_in_toolchain(tvm026, artifact, {"x": x})
    assert facts["tvm_version"] == "0.26.0" and facts["mean_ms"] > 0
    (expected,) = onnxruntime.InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(outputs[0], expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("args", "culprit"),
    [
        (["add", "0.99.0"], "TVM release 0.99.0 is not on the package index"),
        (["add", "0.25.0"], "TVM release 0.25.0 is not a version tvmbench pins: write 0.25.0.post1"),
        (["add", "/nonexistent/apache_tvm-0.26.0-cp39-abi3-linux_x86_64.whl"], "does not exist"),
        (["add", "--python", "/nonexistent/bin/python"], "interpreter /nonexistent/bin/python does not exist"),
        (["add", "not a release"], "'not a release' is neither a TVM release"),
        (["add"], "give one SPEC"),
        (["remove", "0.99.0"], "no toolchain '0.99.0'"),
        (["remove", "installed"], "the installed toolchain"),
    ],
)
def test_hostile_input_is_one_line_naming_it_exit_2(home: Path, args: list[str], culprit: str) -> None:
    line = one_error_line(invoke(*args))
    assert culprit in line, line
    assert not (home / "toolchains").exists() or not any((home / "toolchains").iterdir())


def test_a_file_that_is_not_a_wheel_and_a_wheel_of_another_package(home: Path, tmp_path: Path) -> None:
    fake = tmp_path / "apache_tvm-0.26.0-cp39-abi3-linux_x86_64.whl"
    fake.write_text("not a zip")
    assert "is not a wheel" in one_error_line(invoke("add", str(fake)))
    bare = tmp_path / "apache_tvm-0.26.0-py3-none-any.whl"
    with zipfile.ZipFile(bare, "w") as archive:
        archive.writestr("tvm/__init__.py", "")
    assert "no .dist-info/METADATA inside" in one_error_line(invoke("add", str(bare)))
    other = tmp_path / "six-1.0-py3-none-any.whl"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("six-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: six\nVersion: 1.0\n")
    assert f"wheel {other} is six, not apache-tvm" in one_error_line(invoke("add", str(other)))


def test_an_interpreter_without_tvm_is_one_line(home: Path) -> None:
    python = shutil.which("python3")
    assert python is not None
    line = one_error_line(invoke("add", "--python", python))
    assert f"interpreter {python} cannot import TVM" in line and "No module named 'tvm'" in line


@pytest.fixture
def broken_copy(tvm026: Toolchain, home: Path, tmp_path: Path) -> Iterator[Toolchain]:
    """An interpreter toolchain on a hard-linked copy of the 0.26.0 venv (cheap; the cache stays whole)."""
    python = linked_venv_copy(tvm026.python, tmp_path / "venv-0.26.0")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TVMBENCH_HOME", str(home))
        added = invoke("add", "--python", str(python), "--json")
        assert added.exit_code == 0, added.output
        toolchain = registry.find({"python": str(python)})
        assert toolchain is not None and toolchain.tvm_version == "0.26.0"
        yield toolchain


def test_a_broken_toolchain_is_one_line_from_check_and_a_build_row(
    broken_copy: Toolchain, cnn_job: tuple[Job, bytes]
) -> None:
    assert probe.check(broken_copy) is None
    runtime = next(Path(lib) for lib in broken_copy.libraries if Path(lib).name == "libtvm_runtime.so")
    runtime.unlink()  # only the copy's link: the cached venv keeps its file
    assert (
        TOOLCHAIN_CACHE / "toolchains" / RELEASE / runtime.relative_to(Path(broken_copy.python).parents[1])
    ).exists()
    problem = probe.check(broken_copy)
    assert problem is not None and "\n" not in problem
    assert f"toolchain {broken_copy.label} is broken: libtvm_runtime.so is gone" in problem
    job, model = cnn_job
    build, artifact = build_in_toolchain(broken_copy, job, model)
    assert (build.status, artifact) == ("build", None)
    assert build.error.startswith(f"toolchain {broken_copy.label}: the build failed: RuntimeError: ")
    assert "0.26.0" in build.error and "Cannot find library libtvm_runtime.so" in build.error
    assert build.tvm_version == "0.26.0" and build.build_key == job.build_key("0.26.0")
    listed = json.loads(invoke("list", "--json", "--check").stdout)
    assert next(r for r in listed if r["name"] == broken_copy.name)["status"] == problem


def test_remove_deletes_an_added_toolchain(broken_copy: Toolchain) -> None:
    result = invoke("remove", "--python", broken_copy.python)
    assert result.exit_code == 0, result.output
    assert registry.find({"python": broken_copy.python}) is None
    assert Path(broken_copy.python).exists()  # an interpreter itself is never touched
    assert "no toolchain" in one_error_line(invoke("remove", broken_copy.name))


def test_release_checks_without_provisioning(monkeypatch) -> None:
    assert provision.check_release("0.27.0.post1").ffi == "0.1.14.post1"
    assert provision.check_release("0.25.0.post1").ffi == "0.1.12"
    with pytest.raises(ToolchainError, match="not on the package index"):
        provision.check_release("0.1.0")
    # A shortened version names the pinned one (it is on the index too, so "not on the index" would mislead).
    for short in ("0.27", "0.27.0"):
        with pytest.raises(
            ToolchainError, match=r"TVM release 0\.27(\.0)? is not a version tvmbench pins: write 0\.27\.0\.post1"
        ):
            provision.check_release(short)
    # A release on the index that nobody pinned yet (none is today: each is a prefix of a pinned one).
    monkeypatch.setattr(provision, "index_versions", lambda: ["0.28.0", "0.27.0.post1"])
    with pytest.raises(ToolchainError, match=r"0\.28\.0 is on the package index but has no apache-tvm-ffi pin"):
        provision.check_release("0.28.0")


def test_a_childs_telling_line_from_tvms_multiline_errors_and_segfaults() -> None:
    missing = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "RuntimeError: Cannot find library libtvm_runtime.so; searched directories:\n  /usr/lib\n  /bin\n"
    )
    assert probe.last_line(missing) == "RuntimeError: Cannot find library libtvm_runtime.so; searched directories:"
    # What 0.27.0.post1 with apache-tvm-ffi 0.1.15.post2 printed here, in tvm.ir.save_json.
    segfault = (
        "!!!!!!! Segfault encountered !!!!!!!\n"
        '  File "./signal/../sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c", line 0, in 0x00007f6bfea5a04f\n'
        '  File "<unknown>", line 0, in tvm::ffi::ToJSONGraph(tvm::ffi::Any const&, tvm::ffi::Any const&)\n'
        '  File "Objects/call.c", line 214, in _PyObject_MakeTpCall\n'
    )
    assert probe.last_line(segfault) == "segfault in tvm::ffi::ToJSONGraph"
    assert probe.last_line("") == "no output"


def test_an_interpreter_whose_tvm_is_on_its_pythonpath_keeps_it(
    tvm026: Toolchain, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TVM source build is found through PYTHONPATH: the one at add is kept for its checks and builds."""
    venv = Path(tvm026.python).parents[1]
    config = dict(line.split(" = ", 1) for line in (venv / "pyvenv.cfg").read_text().splitlines() if " = " in line)
    base = config["executable"]  # the venv's own Python, which has no TVM of its own
    site = next((venv / "lib").glob("python3*/site-packages"))
    monkeypatch.setenv("PYTHONPATH", str(site))
    added = invoke("add", "--python", base, "--json")
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["tvm_version"] == "0.26.0"
    monkeypatch.delenv("PYTHONPATH")
    toolchain = registry.find({"python": base})
    assert toolchain is not None and toolchain.pythonpath == str(site)
    assert probe.check(toolchain) is None
