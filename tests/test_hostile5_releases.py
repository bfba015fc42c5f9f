"""Hostile pass 5 on TVM releases, toolchains and the team cluster: what a new user met and what it does now.

Wheels pip would refuse, an ``add`` killed while pip runs, a toolchain removed while a sweep builds with it,
Ctrl-C between two provisionings, a submitted sweep whose models are symlinks or whose tvm axis names a
local wheel, a cluster head that goes away, and `results releases` where one release failed to import.
No release is provisioned here: the toolchains are records of this interpreter, pip is a stand-in script.
"""

from __future__ import annotations

import errno
import os
import pickle
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db import models as m
from db.store import ResultStore
from orchestrator import submit
from orchestrator import toolchains as axis
from orchestrator.farm import free_port
from orchestrator.spec import load_spec
from tests.conftest import one_error_line, write_sweep
from tests.synthetic import Result, add_sweep, noisy, row_by
from tvmbench.answers.releases import releases
from tvmbench.cli import app
from workers import model_zoo
from workers.toolchains import provision, registry
from workers.toolchains.toolchain import Toolchain, ToolchainError, installed, write_record

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
META = "Metadata-Version: 2.1\nName: apache-tvm\nVersion: 0.26.0\n"


def invoke(*args: str) -> object:
    return runner.invoke(app, ["toolchains", *args], catch_exceptions=False)


def _wheel(path: Path, metadata: str = META, wheel_file: bool = True) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("apache_tvm-0.26.0.dist-info/METADATA", metadata)
        if wheel_file:
            archive.writestr("apache_tvm-0.26.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


def _recorded(name: str = "0.26.0") -> Toolchain:
    """A release toolchain as ``add`` records it, on this interpreter (nothing is provisioned)."""
    toolchain = Toolchain(name, "release", name, sys.executable, name, "0.1.14.post1", provision_s=1.0)
    write_record(registry.directory(name), toolchain)
    return toolchain


@pytest.mark.parametrize(
    ("name", "make", "culprit"),
    [
        # A bad CRC (a damaged download) was a zipfile.BadZipFile traceback, exit 1.
        ("apache_tvm-0.26.0-py3-none-any.whl", "crc", "is damaged (BadZipFile: Bad CRC-32"),
        # pip's own refusals came after a venv was made for them.
        ("my wheel é.whl", "ok", "is not a wheel file name pip accepts"),
        ("apache_tvm-0.99.0-py3-none-any.whl", "ok", "its file name says version '0.99.0', its METADATA '0.26.0'"),
        ("apache_tvm-0.26.0-py3-none-any.whl", "no-wheel-file", "no .dist-info/WHEEL inside"),
    ],
)
def test_a_wheel_pip_would_refuse_is_one_line_before_any_venv(
    home: Path, tmp_path: Path, name: str, make: str, culprit: str
) -> None:
    path = _wheel(tmp_path / name, wheel_file=make != "no-wheel-file")
    if make == "crc":
        data = bytearray(path.read_bytes())
        at = data.find(b"Name: apache")
        data[at] = ord("X")  # the stored CRC no longer matches
        path.write_bytes(bytes(data))
    line = one_error_line(invoke("add", str(path)))
    assert culprit in line and str(path) in line, line
    assert not any(p.is_dir() for p in (home / "toolchains").glob("*")), "no venv was made"


def test_pip_dies_with_an_add_that_is_killed(tmp_path: Path) -> None:
    """`kill -9` of `toolchains add` left pip installing into the folder the next add was clearing."""
    fake = tmp_path / "python"  # the venv's python, as _pip_install runs it: it prints and lingers
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pip.pid'}\necho Collecting x\nexec sleep 60\n")
    fake.chmod(0o755)
    code = (
        "import sys; from pathlib import Path; from workers.toolchains import provision; "
        f"provision._pip_install(Path({str(fake)!r}), ['x'], 't', print)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    for line in parent.stdout:
        if "Collecting x" in line:
            break
    pip = int((tmp_path / "pip.pid").read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pip):
        time.sleep(0.05)
    assert not _alive(pip), "pip outlived the add that started it"


def _alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped by init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_folder_that_cannot_be_cleared_is_one_line_naming_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = registry.directory("0.26.0")
    (folder / "lib").mkdir(parents=True)

    def busy(path: Path, *args: object, **kwargs: object) -> None:  # what a live pip writing there gives
        raise OSError(errno.ENOTEMPTY, "Directory not empty", "_core")

    monkeypatch.setattr(provision.shutil, "rmtree", busy)
    with pytest.raises(ToolchainError) as raised:
        provision._make_venv(folder, "toolchain 0.26.0", lambda _line: None)
    message = str(raised.value)
    assert f"cannot clear what an unfinished add left in {folder}" in message and "delete the folder" in message


def test_remove_refuses_a_toolchain_a_sweep_holds_and_takes_it_once_let_go(home: Path) -> None:
    """Removed under a running sweep, every build left ended as a final `build` row blaming the release."""
    _recorded("0.26.0")
    held = axis.ensure(("0.26.0",), provision_missing=False)
    assert held["0.26.0"].tvm_version == "0.26.0"
    assert pickle.loads(pickle.dumps(held)) == dict(held)  # travels to Ray tasks as a plain dict
    line = one_error_line(invoke("remove", "0.26.0"))
    assert "toolchain 0.26.0 is in use" in line and "wait for it to end" in line, line
    assert registry.find("0.26.0") is not None
    # Another process sees the holder's pid.
    other = subprocess.run(
        [sys.executable, "-m", "tvmbench", "toolchains", "remove", "0.26.0"], cwd=ROOT, capture_output=True, text=True
    )
    assert other.returncode == 2 and f"in use by process {os.getpid()}" in other.stderr, other.stderr
    held.release()
    result = invoke("remove", "0.26.0")
    assert result.exit_code == 0, result.output
    assert registry.find("0.26.0") is None and not registry.directory("0.26.0").exists()


def test_remove_deletes_what_an_unfinished_add_left(home: Path) -> None:
    """A killed add leaves a venv without a record: `remove` said "no toolchain" and left ~450 MB."""
    leftover = registry.directory("0.26.0")
    (leftover / "lib" / "python3.11").mkdir(parents=True)
    result = invoke("remove", "0.26.0")
    assert result.exit_code == 0, result.output
    assert "what an unfinished add left" in result.output and not leftover.exists()
    assert "no toolchain '0.26.0'" in one_error_line(invoke("remove", "0.26.0"))


def test_adding_the_installed_release_provisions_nothing(home: Path) -> None:
    """`toolchains add 0.27.0.post1` (the TVM here) built a 451 MB venv that no sweep or farm would use."""
    here = installed().tvm_version
    result = invoke("add", here)
    assert result.exit_code == 0, result.output
    assert f"TVM {here} is the installed toolchain" in result.output and "nothing to add" in result.output
    assert not registry.directory(here).exists() and registry.find(here) is None


def test_ctrl_c_between_two_provisionings_says_what_is_kept(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def add(spec: str, progress: object) -> Toolchain:
        if spec == "0.25.0.post1":
            raise KeyboardInterrupt
        return _recorded(spec)

    monkeypatch.setattr(provision, "add", add)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        axis.ensure(("0.26.0", "0.25.0.post1"), progress=lines.append)
    assert lines[-1] == (
        "toolchain 0.25.0.post1: provisioning interrupted, nothing of it kept; 0.26.0 provisioned and kept; "
        "run the command again to provision the rest"
    )
    # The hold on 0.26.0 went with the interrupt, not with the traceback pytest keeps.
    assert registry.lock_holders(registry.lock_file("0.26.0"), include_self=True) == []


def test_adding_a_toolchain_a_sweep_of_this_process_holds_does_not_wait_for_itself(home: Path) -> None:
    """CI hung 20 minutes: a hold of 0.26.0 this process still had made `add` of it wait for its own lock."""
    recorded = _recorded("0.26.0")
    with axis.ensure(("0.26.0",), provision_missing=False):
        lines: list[str] = []
        assert provision.add("0.26.0", lines.append) == recorded  # added already: no lock taken
        assert lines == ["toolchain 0.26.0 is added already (TVM 0.26.0)"]
        # One that must be provisioned again (its pins changed) would wait: it is one line instead.
        write_record(
            registry.directory("0.26.0"),
            Toolchain("0.26.0", "release", "0.26.0", sys.executable, "0.26.0", "0.1.0", provision_s=1.0),
        )
        with pytest.raises(ToolchainError, match=r"^toolchain 0.26.0 is held by this process .* end that sweep"):
            provision.add("0.26.0")
    assert registry.lock_holders(registry.lock_file("0.26.0"), include_self=True) == []


SWEEP = """
name = "sym"
[[models]]
path = "models/cnn.onnx"
[axes]
executor = ["vm-compiled"]
"""


def test_submit_stages_a_symlinked_model_where_the_sweep_file_names_it(tmp_path: Path) -> None:
    """models/cnn.onnx -> ../../store/real.onnx was staged as store/real.onnx: the job failed on the cluster."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "real.onnx").write_bytes(model_zoo.tiny_cnn().SerializeToString())
    (tmp_path / "proj" / "models").mkdir(parents=True)
    sweep = write_sweep(tmp_path / "proj", SWEEP)
    (tmp_path / "proj" / "models" / "cnn.onnx").symlink_to("../../store/real.onnx")
    staged = tmp_path / "staged"
    inside = submit.stage_sweep(sweep, staged)
    assert (staged / inside).parent / "models" / "cnn.onnx" == staged / "models" / "cnn.onnx"
    assert not (staged / "models" / "cnn.onnx").is_symlink()
    assert load_spec(staged / inside).sweep_id == load_spec(sweep).sweep_id  # what the cluster will run


def test_submit_refuses_a_relative_wheel_or_interpreter_before_asking_the_cluster(tmp_path: Path) -> None:
    for entry in ('"dist/apache_tvm-0.26.0-py3-none-any.whl"', '{ python = "venv/bin/python" }'):
        text = SWEEP.replace("models/cnn.onnx", "m.onnx") + f"tvm = [{entry}]\n"
        sweep = write_sweep(tmp_path, text)
        (tmp_path / "m.onnx").write_bytes(model_zoo.tiny_cnn().SerializeToString())
        with pytest.raises(submit.SubmitError, match=r"axes\.tvm: the (wheel|interpreter) .* relative to the sweep"):
            # Nothing listens there: the line comes before the cluster is asked.
            submit.submit_sweep(sweep, ray_address=f"http://127.0.0.1:{free_port()}", db_url="postgresql://h/db")


def test_a_head_that_goes_away_mid_submit_is_not_a_refusal() -> None:
    import requests

    class Gone:
        def submit_job(self, **job: object) -> None:
            raise requests.exceptions.ConnectionError(
                "HTTPConnectionPool(host='127.0.0.1', port=8365): Max retries exceeded with url: /api/packages/x.zip"
            )

    job = {"runtime_env": {"env_vars": {"TVMBENCH_DB": "postgresql://u:secret@h/db"}}}
    with pytest.raises(submit.SubmitError) as raised:
        submit._submit_with_retry(Gone(), job, "http://127.0.0.1:8365")
    message = str(raised.value)
    assert "stopped answering while the job was submitted" in message and "refused" not in message
    assert "`ray status`" in message and "secret" not in message


def test_sweep_status_answers_from_the_database_when_the_cluster_is_gone(store: ResultStore) -> None:
    """`sweep status` of a submitted sweep was only "cannot reach the Ray dashboard", exit 1."""
    add_sweep(store, "gone00000001", [Result(samples=noisy(1.0)), Result(opt_level=3, samples=noisy(1.0))])
    status = submit.sweep_status("gone00000001", store=store, ray_address=f"http://127.0.0.1:{free_port()}")
    assert (status["jobs"], status["ok"], status["ray_status"]) == (2, 2, "UNREACHABLE")
    assert "cannot reach the Ray dashboard" in status["ray_message"]
    with pytest.raises(submit.SubmitError, match="cannot reach"):  # known nowhere: the cluster's line
        submit.sweep_status("nosuchsweep1", store=store, ray_address=f"http://127.0.0.1:{free_port()}")


def test_a_release_that_failed_to_import_has_no_pass_or_program_change(store: ResultStore) -> None:
    """0.25.0.post1 cannot import a model (no build, no passes): 0.26.0 read "0 -> 3155 passes; +76 (...)"
    and "program differs" against it."""
    trace = ["relax.FuseOps", "relax.LegalizeOps", "tirx.LowerIntrin"]
    add_sweep(
        store,
        "fail00000001",
        [
            Result(tvm="0.25.0.post1", status="model", error="OpNotImplemented: Dropout"),
            Result(tvm="0.26.0", samples=noisy(5.0, n=10), pass_trace=trace, kernel_count=7),
        ],
    )
    with store._sessions.begin() as s:  # an import that failed made no program and ran no pass, as for real
        build = s.query(m.Build).filter_by(status="model").one()
        build.fingerprint, build.pass_trace, build.pass_count = None, None, 0
    result = releases(store)
    fixed = row_by(result.rows, release="0.26.0")
    assert fixed["verdict"] == "fixed" and fixed["previous_status"] == "model"
    assert fixed["passes"] == "-" and fixed["passes_added"] == [] and fixed["same_fingerprint"] is None


def test_tuning_export_of_another_release_writes_its_records_as_stored(store: ResultStore, tmp_path: Path) -> None:
    """`tuning export --tvm-version 0.26.0` decoded 0.26.0's workloads with the installed TVM: a TypeError
    traceback ("Cannot convert from type `ir.Type` to `BigInt`") after the files were created."""
    from db import tuning_records
    from tvmbench.core.records import TuningScope

    scope = TuningScope({"kind": "llvm", "mcpu": "znver4"}, "host", "0.26.0")
    foreign_ir = "AiUBAAAAAAB7ImlyIjogIjAuMjYuMCJ9"  # no IR this TVM reads
    trace = [[["GetSBlock", [], ["conv", "main"], ["b0"]]], []]
    with store._sessions.begin() as s:
        workload = tuning_records.commit_workload(s, scope, "123", foreign_ir, model_name="tiny_cnn")
        for seconds in (2e-5, 1e-5, 1e10):
            tuning_records.commit_record(s, workload, [trace, [seconds], scope.target, [["TENSOR", "float32", [1]]]])
    out = tmp_path / "export"
    result = runner.invoke(
        app, ["tuning", "export", str(out), "--tvm-version", "0.26.0", "--top", "1", "--db", store.url]
    )
    assert result.exit_code == 0, result.output
    assert "exported 1 record(s)" in result.output and "TVM 0.26.0" in result.output
    workloads = (out / "database_workload.json").read_text().splitlines()
    records = (out / "database_tuning_record.json").read_text().splitlines()
    assert workloads == ['["123","' + foreign_ir + '"]'], workloads
    assert len(records) == 1 and records[0].startswith("[0,[") and "1e-05" in records[0], records
    again = runner.invoke(app, ["tuning", "export", str(out), "--tvm-version", "0.26.0", "--append", "--db", store.url])
    assert again.exit_code == 0, again.output
    assert (out / "database_workload.json").read_text().splitlines() == workloads  # one workload, still index 0
    # The top-1 record is in the file already: the append adds the other two, not all three again.
    assert len((out / "database_tuning_record.json").read_text().splitlines()) == 3


def test_two_toolchains_of_one_release_are_both_answered(store: ResultStore) -> None:
    """`tvm = ["0.26.0", { python = ".../bin/python" }]` builds a configuration twice under TVM 0.26.0: `results
    releases` kept one of the two and dropped the other without a word."""
    from datetime import timedelta

    from tests.synthetic import T0

    add_sweep(store, "pypi00000001", [Result(tvm="0.26.0", samples=noisy(5.0, n=10, seed=1))])
    own = [Result(tvm="0.26.0", samples=noisy(5.0, n=10, seed=2))]
    add_sweep(store, "mine00000001", own, created_at=T0 + timedelta(hours=1))
    with store._sessions.begin() as s:
        for job in s.query(m.Job):
            text = "0.26.0" if job.sweep_id.startswith("pypi") else "python:/opt/tvm/bin/python"
            job.config = {**job.config, "toolchain": text}
    result = releases(store)
    digest = registry.spec_of({"python": "/opt/tvm/bin/python"}).name("0.26.0").rsplit("-", 1)[-1]
    assert result.releases == ["0.26.0", f"0.26.0 (python {digest})"]
    assert [r["sweep_id"] for r in result.rows] == ["pypi00000001", "mine00000001"]
    assert result.rows[1]["previous"] == "0.26.0" and result.rows[1]["verdict"] == "same"
