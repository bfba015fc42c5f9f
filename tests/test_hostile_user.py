"""What a hostile new user tried (issue 11), each provoked for real: odd inputs, NaN verdicts, Rich markup in
user text, misleading messages, read-only databases, lookups that find nothing. No Ray here; the real
sweeps of the odd models are in tests/test_hostile_sweep.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from orchestrator.spec import load_spec
from tests import odd_models
from tests.conftest import write_sweep
from tests.test_store_backends import MODEL, begin, make_jobs, ok_run
from tvmbench.cli import app
from workers import model_zoo
from workers.onnx_model import seeded_inputs
from workers.reference import compare, reference_outputs

runner = CliRunner()
TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))


def invoke(*args: str):
    return runner.invoke(app, list(args))


def one_error_line(result) -> str:
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


# --- 2. NaN and inf verdicts -----------------------------------------------------------------------


def test_nan_and_inf_at_the_same_positions_match() -> None:
    ref = np.array([np.nan, 1.0, np.inf, -np.inf], np.float32)
    assert compare([ref.copy()], [ref], 1e-4, 1e-3) == (0.0, 0.0, None)
    near = ref.copy()
    near[1] = 1.0000001
    _, _, problem = compare([near], [ref], 1e-4, 1e-3)
    assert problem is None


@pytest.mark.parametrize(
    ("out", "ours", "theirs"),
    [
        ([np.nan, 1.0, 2.0], "1 non-finite (1 NaN, 0 inf)", "0 non-finite"),  # NaN where ORT has a number
        ([1.0, 1.0, 2.0], "0 non-finite", "1 non-finite (1 NaN, 0 inf)"),  # a number where ORT has NaN
        ([np.inf, 1.0, 2.0], "1 non-finite (0 NaN, 1 inf)", "0 non-finite"),
    ],
)
def test_non_finite_mismatch_counts_both_sides(out: list[float], ours: str, theirs: str) -> None:
    ref = np.array([1.0, 1.0, 2.0], np.float32) if "NaN" not in theirs else np.array([np.nan, 1.0, 2.0], np.float32)
    _, _, problem = compare([np.array(out, np.float32)], [ref], 1e-4, 1e-3)
    assert problem is not None and f"this run has {ours}" in problem and f"ONNX Runtime {theirs}" in problem, problem


def test_inf_of_the_other_sign_is_wrong() -> None:
    _, _, problem = compare([np.array([np.inf])], [np.array([-np.inf])], 1e-4, 1e-3)
    assert problem is not None and "non-finite values differ at 1 position" in problem, problem


def test_log_model_nan_positions_agree_with_onnxruntime(tmp_path: Path) -> None:
    """The issue's case: Log of random inputs gives NaN in the same places on both sides: no problem."""
    data = odd_models.log_nan().SerializeToString()
    inputs = seeded_inputs((("x", (4, 4), "float32"),), 0)
    ref = reference_outputs(data, inputs)
    assert np.isnan(ref[0]).sum() > 0  # the case really has NaN
    with np.errstate(invalid="ignore"):
        ours = [np.log(inputs["x"])]  # what a correct backend computes
    assert compare(ours, ref, 1e-4, 1e-3)[2] is None


def test_outputs_that_cannot_be_compared_are_a_problem_not_a_crash() -> None:
    _, _, problem = compare([np.array(["a", "b"])], [np.array([1.0, 2.0])], 1e-4, 1e-3)
    assert problem is not None and "cannot be compared" in problem


# --- 1. inputs: Gather bounds, input_ranges, .npz ---------------------------------------------------


def _models(tmp_path: Path) -> dict[str, Path]:
    return odd_models.write_odd_models(tmp_path / "models")


def test_gather_indices_are_drawn_inside_the_table(tmp_path: Path) -> None:
    paths = _models(tmp_path)
    onnx.save(odd_models.gather_table(rows=50), tmp_path / "models" / "big.onnx")
    spec = load_spec(
        write_sweep(tmp_path, '[[models]]\npath = "models/gather_table.onnx"\n[[models]]\npath = "models/big.onnx"\n')
    )
    small, big = spec.models
    assert small.value_ranges == (("ids", 0, 3),)
    assert big.value_ranges == ()  # a table larger than the default draw changes nothing (same job keys)
    inputs = seeded_inputs(small.inputs, 0, {"ids": (0, 3)})
    assert inputs["ids"].min() >= 0 and inputs["ids"].max() <= 3
    reference_outputs(paths["gather_table"].read_bytes(), inputs)  # ONNX Runtime accepts them


def test_input_ranges_in_the_sweep_file_are_used_and_change_the_job(tmp_path: Path) -> None:
    _models(tmp_path)
    plain = load_spec(write_sweep(tmp_path, '[[models]]\npath = "models/gather_shifted.onnx"\n', "a.toml"))
    ranged = load_spec(
        write_sweep(tmp_path, '[[models]]\npath = "models/gather_shifted.onnx"\ninput_ranges = { ids = [0, 1] }\n')
    )
    assert ranged.models[0].value_ranges == (("ids", 0, 1),)
    assert ranged.sweep_id != plain.sweep_id
    data = (tmp_path / "models" / "gather_shifted.onnx").read_bytes()
    reference_outputs(data, seeded_inputs(ranged.models[0].inputs, 0, {"ids": (0, 1)}))


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("input_ranges = { nope = [0, 1] }", "input_ranges: model gather_shifted.onnx has no input 'nope'"),
        ("input_ranges = { ids = [3, 1] }", "input_ranges.ids = [3, 1]: expected [low, high], two integers"),
        ("input_ranges = { ids = [0.5, 1] }", "two integers"),
        ("input_ranges = { ids = 3 }", "input_ranges.ids = 3"),
        ('inputs_file = "nothere.npz"', "inputs file"),
        ('inputs_file = "inputs.npz"\ninput_ranges = { ids = [0, 1] }', "not both"),
    ],
)
def test_bad_input_ranges_name_the_key(tmp_path: Path, home: Path, entry: str, expected: str) -> None:
    _models(tmp_path)
    np.savez(tmp_path / "inputs.npz", ids=np.zeros(3, np.int64))
    sweep = write_sweep(tmp_path, f'[[models]]\npath = "models/gather_shifted.onnx"\n{entry}\n')
    result = invoke("sweep", "plan", str(sweep))
    assert result.exit_code == 2 and expected in one_error_line(result), result.output


@pytest.mark.parametrize(
    ("model", "bounds"),
    [("log_nan", "[-inf, inf]"), ("log_nan", "[0, inf]"), ("log_nan", "[-1e308, 1e308]"), ("float16_mlp", "[0, 1e10]")],
)
def test_float_input_ranges_must_be_finite_in_the_inputs_type(
    tmp_path: Path, home: Path, model: str, bounds: str
) -> None:
    # Before: planned, then every job a `model` row blaming ONNX Runtime (an OverflowError in the draw), or
    # float16 inputs of inf.
    _models(tmp_path)
    sweep = write_sweep(tmp_path, f'[[models]]\npath = "models/{model}.onnx"\ninput_ranges = {{ x = {bounds} }}\n')
    result = invoke("sweep", "plan", str(sweep))
    line = one_error_line(result)
    assert result.exit_code == 2 and "models[0].input_ranges.x = " in line and "give finite bounds" in line, line


@pytest.mark.parametrize(
    ("arrays", "expected"),
    [
        ({"ids": np.zeros(3, np.int32)}, "key 'ids' is int32, the model's input is int64"),
        ({"ids": np.zeros((1, 3), np.int64)}, "key 'ids' has shape [1, 3], the model's input is [3]"),
        ({"ids": np.zeros(3, np.int64), "extra": np.zeros(1)}, "key 'extra' is not an input of the model"),
        ({"other": np.zeros(3, np.int64)}, "key 'other' is not an input"),
    ],
)
def test_inputs_file_is_validated(tmp_path: Path, home: Path, arrays: dict, expected: str) -> None:
    _models(tmp_path)
    np.savez(tmp_path / "inputs.npz", **arrays)
    sweep = write_sweep(tmp_path, '[[models]]\npath = "models/gather_shifted.onnx"\ninputs_file = "inputs.npz"\n')
    result = invoke("sweep", "plan", str(sweep))
    assert result.exit_code == 2 and expected in one_error_line(result), result.output


def test_inputs_file_missing_key_and_not_npz(tmp_path: Path, home: Path) -> None:
    _models(tmp_path)
    np.savez(tmp_path / "inputs.npz", x=np.zeros(6, np.float32))  # bool_input also needs "keep"
    sweep = write_sweep(tmp_path, '[[models]]\npath = "models/bool_input.onnx"\ninputs_file = "inputs.npz"\n')
    assert "no array for input 'keep'" in one_error_line(invoke("sweep", "plan", str(sweep)))
    (tmp_path / "inputs.npz").write_bytes(b"not a zip")
    assert "is not an .npz of arrays" in one_error_line(invoke("sweep", "plan", str(sweep)))


def test_a_valid_inputs_file_sets_the_job(tmp_path: Path, home: Path) -> None:
    _models(tmp_path)
    np.savez(tmp_path / "inputs.npz", ids=np.array([0, 1, 0], np.int64))
    spec = load_spec(
        write_sweep(tmp_path, '[[models]]\npath = "models/gather_shifted.onnx"\ninputs_file = "inputs.npz"\n')
    )
    assert spec.models[0].inputs_file_sha256 and spec.input_files[spec.models[0].inputs_file_sha256].is_file()


# --- 3. user text is never Rich markup ----------------------------------------------------------------


def test_section_names_survive_in_messages(tmp_path: Path, home: Path) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    axes = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n[axes]\nfrobnicate = 1\n')))
    assert "error: [axes]: unknown key 'frobnicate'" in one_error_line(axes)
    empty = invoke("sweep", "plan", str(write_sweep(tmp_path, 'name = "x"\n')))
    assert "add at least one [[models]] table" in one_error_line(empty)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('[[models]]\npath = "we[/x]ird.onnx"\n', "we[/x]ird.onnx does not exist"),
        ('[[models]]\npath = "m.onnx"\n[[targets]]\npreset = "[/x]"\n', "preset = '[/x]' is unknown"),
        ('[[models]]\npath = "m.onnx"\n[axes]\nexecutor = ["[/x]"]\n', "'[/x]' is not valid"),
        ('[[models]]\npath = "m.onnx"\ninputs = { "[/x]" = [1] }\n', "has no input '[/x]'"),
        ('[[models]]\npath = "m.onnx"\n[axes]\n"[/x]" = 1\n', "unknown key '[/x]'"),
    ],
)
def test_markup_in_sweep_files_prints_literally(tmp_path: Path, home: Path, entry: str, expected: str) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, entry)))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2 and expected in one_error_line(result), result.output


def test_markup_in_names_and_ids_prints_literally(tmp_path: Path, home: Path) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    plan = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\nname = "[/x][red]m"\n')))
    assert plan.exit_code == 0 and "[/x][red]m" in plan.output, plan.output
    assert "[/x].toml: no such sweep file" in one_error_line(invoke("sweep", "plan", str(tmp_path / "[/x].toml")))
    for args in (
        ("results", "show", "[/x]"),
        ("sweep", "resume", "[/x]"),
        ("sweep", "cancel", "[/x]"),
        ("farm", "reset", "[/x]"),
        ("results", "best", "--sweep", "[/x]"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2 and "'[/x]'" in one_error_line(result), (args, result.output)


def test_markup_in_stored_results_prints_literally(tmp_path: Path) -> None:
    """Errors and names that come back from the database (a model called "[bold]...", an error with "[/]")."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = ResultStore(url)
    jobs = make_jobs(replace(MODEL, name="[/x]tiny"))
    begin(store, "markupsweep1", jobs)
    store.finish_job("markupsweep1", jobs[0].key, "build", "LLVM said [/x] and [bold]no[/bold]")
    store.record_run("markupsweep1", ok_run(jobs[1], board="[/x]@127.0.0.1:1"), final=True)
    store.close()
    listed = invoke("results", "list", "--db", url)
    assert listed.exit_code == 0 and "LLVM said [/x] and [bold]no[/bold]" in listed.output, listed.output
    shown = invoke("results", "show", jobs[0].key[:12], "--db", url)
    assert shown.exit_code == 0 and "[bold]no[/bold]" in shown.output, shown.output
    best = invoke("results", "best", "--db", url)
    assert best.exit_code == 0 and "[/x]tiny on host" in best.output, best.output


def test_control_characters_in_stored_results_print_escaped(tmp_path: Path) -> None:
    """An error quoting a name with an escape sequence (stored before intake refused such names, or by
    another tool): the terminal gets ``\\x1b``, never the ESC itself, in tables, `results show` and errors."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = ResultStore(url)
    jobs = make_jobs(replace(MODEL, name="tiny\x1b[31m"))
    begin(store, "ctrlsweep001", jobs)
    store.finish_job("ctrlsweep001", jobs[0].key, "build", "no input x\x1b]0;PWNED\x07 in the graph")
    store.record_run("ctrlsweep001", ok_run(jobs[1]), final=True)
    store.close()
    for args in (("results", "list"), ("results", "show", jobs[0].key[:12]), ("results", "best")):
        result = invoke(*args, "--db", url)
        assert result.exit_code == 0 and "\x1b" not in result.output and "\x07" not in result.output, result.output
        assert "tiny\\x1b[31m" in result.output, result.output
    shown = invoke("results", "show", jobs[0].key[:12], "--db", url)
    assert "no input x\\x1b]0;PWNED" in shown.output, shown.output  # (rich drops the BEL itself)
    missing = invoke("results", "list", "--sweep", "no\x1bsuch", "--db", url)
    assert missing.exit_code == 2 and "no\\x1bsuch" in one_error_line(missing), missing.output


# --- 6. messages that mislead ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.mkdir(), "is a directory, not a file"),
        (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a file"),
        (lambda p: p.symlink_to(p.parent / "gone.onnx"), "is a symlink to nothing"),
        (lambda p: None, "does not exist"),
    ],
)
def test_model_path_says_what_it_is(tmp_path: Path, home: Path, make, expected: str) -> None:
    make(tmp_path / "m.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n')))
    assert result.exit_code == 2 and expected in one_error_line(result), result.output


def test_dev_zero_as_model_is_a_character_device(tmp_path: Path, home: Path) -> None:
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "/dev/zero"\n')))
    assert result.exit_code == 2 and "/dev/zero is a character device, not a file" in one_error_line(result)


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc")
def test_a_regular_file_that_refuses_reads_is_named_not_an_output_error(tmp_path: Path, home: Path) -> None:
    # /proc/self/mem is a regular file whose first page is unmapped: reading it is EIO, like a failing disk.
    model = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "/proc/self/mem"\n')))
    line = one_error_line(model)
    assert model.exit_code == 2 and "model file /proc/self/mem cannot be read (Input/output error)" in line, line
    sweep = invoke("sweep", "plan", "/proc/self/mem")
    line = one_error_line(sweep)
    assert sweep.exit_code == 2 and "/proc/self/mem: cannot be read (Input/output error)" in line, line


def test_symlinked_external_data_inside_the_folder_says_symlink(tmp_path: Path, home: Path) -> None:
    from tests.test_hostile_input import _external

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "real.bin").write_bytes(b"\0" * 64)
    (folder / "weights.bin").symlink_to(folder / "real.bin")
    onnx.save(_external("weights.bin"), folder / "m.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "models/m.onnx"\n')))
    assert result.exit_code == 2 and "which is a symlink; refused, unread" in one_error_line(result), result.output


def test_db_that_is_a_directory_fails_at_once(tmp_path: Path, home: Path, monkeypatch) -> None:
    import db.store

    backoffs: list[float] = []  # the write retries' sleeps: a directory must fail before any of them
    monkeypatch.setattr(db.store.time, "sleep", backoffs.append)
    result = invoke("results", "sweeps", "--db", f"sqlite:///{tmp_path}")
    line = one_error_line(result)
    assert result.exit_code == 2 and f"{tmp_path} is a directory" in line and "results.db" in line, line
    assert backoffs == [], "the open was retried"
    device = one_error_line(invoke("results", "sweeps", "--db", "/dev/null"))
    assert "/dev/null is a character device" in device and "/dev/null/" not in device, device
    missing = invoke("results", "sweeps", "--db", f"sqlite:///{tmp_path}/no/such/r.db")
    assert "folder" in one_error_line(missing) and "does not exist" in missing.output


def _read_only_mount_works() -> bool:
    if not shutil.which("unshare") or not sys.platform.startswith("linux"):
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs `unshare -m` (a private mount namespace)")
def test_a_database_on_a_read_only_mount_can_be_queried(tmp_path: Path) -> None:
    """Read-only commands open SQLite read-only; writes still fail with a clear error, not silently."""
    src, mnt = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    mnt.mkdir()
    url = f"sqlite:///{src / 'r.db'}"
    store = ResultStore(url)
    jobs = make_jobs()
    begin(store, "rosweep00001", jobs)
    store.record_run("rosweep00001", ok_run(jobs[0]), final=True)
    store.close()
    # A clean copy, as a database shipped to a read-only share looks (no -wal / -shm beside it).
    ro_url = f"sqlite:///{mnt / 'r.db'}"
    script = (
        f"mount --bind {src} {mnt} && mount -o remount,bind,ro {mnt} && "
        f"{TVMBENCH} results sweeps --db {ro_url} && {TVMBENCH} results list --db {ro_url} && "
        f"{TVMBENCH} results best --db {ro_url} && {TVMBENCH} results show {jobs[0].key[:12]} --db {ro_url} && "
        f"(touch {mnt}/probe 2>/dev/null && echo WRITABLE || echo READONLY)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "READONLY" in done.stdout and "rosweep00001" in done.stdout and "tiny" in done.stdout, done.stdout


def test_a_read_only_database_refuses_writes_clearly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    ResultStore(url).close()
    store = ResultStore(url, read_only=True)
    assert store.read_only
    with pytest.raises(Exception, match=r"readonly|read-only|attempt to write"):
        begin(store, "x" * 12, make_jobs())
    store.close()


# --- 8. small ones ----------------------------------------------------------------------------------


def test_not_found_is_exit_2_for_every_lookup(home: Path) -> None:
    for args in (
        ("results", "show", "nosuchjob"),
        ("sweep", "resume", "nosuchsweep"),
        ("sweep", "cancel", "nosuchsweep"),
        ("sweep", "status", "nosuchsweep"),
        ("farm", "reset", "nosuchboard"),
        ("results", "best", "--sweep", "nosuchsweep"),
        ("results", "compare", "nosuch1", "nosuch2"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)


def test_plan_says_a_sweep_without_targets_uses_host(tmp_path: Path, home: Path) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n')))
    assert result.exit_code == 0 and "no [[targets]] in the sweep file: using the preset `host`" in result.output
    with_target = write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n[[targets]]\npreset = "host"\n', "t.toml")
    assert "no [[targets]]" not in invoke("sweep", "plan", str(with_target)).output


def test_zero_sized_input_is_named_as_such(tmp_path: Path, home: Path) -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n')))
    assert result.exit_code == 2 and "zero-size dimension" in one_error_line(result), result.output


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('name = ""\n[[models]]\npath = "m.onnx"\n', "name = '' is blank"),
        ('name = "' + "n" * 101 + '"\n[[models]]\npath = "m.onnx"\n', "name is 101 characters long; at most 100"),
        ('label = "' + "l" * 500 + '"\n[[models]]\npath = "m.onnx"\n', "label is 500 characters long"),
        ('[[models]]\npath = "m.onnx"\nname = "  "\n', "models[0].name = '  ' is blank"),
        ('[[models]]\npath = "m.onnx"\n[[targets]]\nname = ""\ntarget = { kind = "llvm" }\narch = "x86_64"\n',
         "targets[0].name = '' is blank"),
        ('[[models]]\npath = "m.onnx"\n[[targets]]\nname = "t"\ntarget = { kind = "llvm" }\nboard_key = ""\n'
         'arch = "x86_64"\n', "targets[0].board_key = '' cannot be a tracker key"),
        ('[[models]]\npath = "m.onnx"\n[[targets]]\npreset = "host"\nboard_key = "rack:3"\n',
         "targets[0].board_key = 'rack:3' cannot be a tracker key"),
        ('[[models]]\npath = "m.onnx"\n[[targets]]\nname = "my board"\ntarget = { kind = "llvm" }\n'
         'arch = "x86_64"\n', "targets[0].board_key = 'my board' cannot be a tracker key"),
    ],
)  # fmt: skip
def test_names_and_board_keys_people_cannot_use_are_refused(
    tmp_path: Path, home: Path, entry: str, expected: str
) -> None:
    """A blank name listed as nothing, a 5,000-character one heading every table, a board key with ':' or a
    space (TVM matches keys up to ':'): refused when the sweep file is read, naming the key."""
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, entry)))
    assert result.exit_code == 2 and expected in one_error_line(result), result.output


@pytest.mark.parametrize("boards", [-1, 65, 10**6, True, 2.5])
def test_the_python_api_bounds_the_boards_it_starts(tmp_path: Path, home: Path, boards: object) -> None:
    """`tvmbench.run(path, boards=10**6)` would have started a million board agents (the CLI bounds --boards)."""
    import tvmbench
    from orchestrator.farm import FarmError

    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    path = write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n')
    with pytest.raises(FarmError, match=r"give a number of host boards from 0 to 64"):
        tvmbench.run(path, boards=boards, db=str(tmp_path / "r.db"))  # type: ignore[arg-type]
    assert not (tmp_path / "r.db").exists()  # refused before anything was opened


def test_a_long_label_on_the_command_line_and_a_bad_farm_key_are_refused(tmp_path: Path, home: Path) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    path = str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n'))
    result = invoke("sweep", "plan", path, "--label", "x" * 300)
    assert result.exit_code == 2 and "--label is 300 characters long" in one_error_line(result)
    assert invoke("sweep", "plan", path, "--label", "nightly").exit_code == 0
    added = invoke("farm", "add", "--key", "a:b")
    assert added.exit_code == 2 and "--key = 'a:b' cannot be a tracker key" in one_error_line(added)
    imported = invoke("tuning", "import", str(tmp_path), "--board-key", "rack 3", "--db", f"sqlite:///{tmp_path}/t.db")
    assert imported.exit_code == 2 and "--board-key = 'rack 3' cannot be" in one_error_line(imported)
    assert not (tmp_path / "t.db").exists()  # refused before the database was made
    exported = invoke("tuning", "export", str(tmp_path / "out"), "--top", "0")
    assert exported.exit_code == 2 and "--top 0 would export nothing" in one_error_line(exported)


def _io_model(inputs: list, outputs: list, nodes: list) -> onnx.ModelProto:
    from onnx import helper

    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("strings", "input 's' is a tensor of strings"),
        ("complex", "input 'x' is a tensor of complex64"),
        ("sequence", "output 'z' is a sequence (such as a classifier's ZipMap output)"),
    ],
)
def test_inputs_and_outputs_that_are_no_numeric_tensors_are_refused(
    tmp_path: Path, home: Path, kind: str, expected: str
) -> None:
    """A string input (TVM's importer said "unknown dtype `object`", and the ONNX Runtime job was an `infra`
    failure charged to the board), a complex one, a sequence output: refused at intake, naming it."""
    from onnx import TensorProto, helper

    tensor = helper.make_tensor_value_info
    model = {
        "strings": lambda: _io_model([tensor("s", TensorProto.STRING, [2])], [tensor("t", TensorProto.STRING, [2])],
                                     [helper.make_node("Identity", ["s"], ["t"])]),
        "complex": lambda: _io_model([tensor("x", TensorProto.COMPLEX64, [2])],
                                     [tensor("y", TensorProto.COMPLEX64, [2])],
                                     [helper.make_node("Identity", ["x"], ["y"])]),
        "sequence": lambda: _io_model(
            [tensor("x", TensorProto.FLOAT, [2])],
            [tensor("y", TensorProto.FLOAT, [2]), helper.make_tensor_sequence_value_info("z", TensorProto.FLOAT, None)],
            [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("SequenceConstruct", ["x"], ["z"])],
        ),
    }[kind]()  # fmt: skip
    onnx.save(model, tmp_path / "m.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n')))
    line = one_error_line(result)
    assert result.exit_code == 2 and expected in line and "numeric tensors" in line, result.output


def _reference_line(name: str, nodes: list, output: str, *opsets: tuple[str, int]) -> str:
    """``reference_problem``'s line for a float[1,4] -> float[1,4] graph ONNX Runtime refuses."""
    from onnx import TensorProto, helper

    from workers.reference import reference_problem

    tensor = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [tensor("x", TensorProto.FLOAT, [1, 4])], [tensor(output, TensorProto.FLOAT, [1, 4])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in [("", 17), *opsets]])
    model.ir_version = 8
    inputs = {"x": np.ones((1, 4), np.float32)}
    with pytest.raises(Exception) as raised:
        reference_outputs(model.SerializeToString(), inputs)
    return reference_problem(name, inputs, raised.value, "seeded")


def test_an_operator_onnx_runtime_lacks_is_not_blamed_on_the_inputs() -> None:
    """A custom-domain operator: ONNX Runtime has no kernel, so no input_ranges hint (it cannot help)."""
    from onnx import helper

    custom = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")
    line = _reference_line("custom", [custom], "y", ("com.example", 1))
    assert "Frobnicate" in line and "no kernel for an operator" in line and "input_ranges" not in line, line


def test_a_model_onnx_runtime_cannot_load_is_not_blamed_on_the_inputs() -> None:
    """A graph with a cycle loads nowhere: the line says the model is invalid, not to change input_ranges."""
    from onnx import helper

    cycle = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    line = _reference_line("cyclic", cycle, "a")
    assert line.startswith("ONNX Runtime cannot load model cyclic: ") and "the model itself is invalid" in line, line
    assert "input_ranges" not in line, line


# --- more of the same kind ------------------------------------------------------------------------------


def test_terminal_escapes_in_names_are_refused(tmp_path: Path, home: Path) -> None:
    """A name with ESC [ ... would recolour or retitle the terminal of whoever lists the results."""
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    sweep = write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\nname = "\\u001b[31mred"\n')
    line = one_error_line(invoke("sweep", "plan", str(sweep)))
    assert "models[0].name" in line and "control character U+001B" in line and "\x1b" not in line, line
    good = write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n', "good.toml")
    labelled = invoke("sweep", "plan", str(good), "--label", "\x1b]0;owned\x07")
    assert labelled.exit_code == 2 and "--label" in one_error_line(labelled)


def test_a_huge_sparse_model_file_is_refused_unread(tmp_path: Path, home: Path, monkeypatch) -> None:
    with open(tmp_path / "m.onnx", "wb") as f:
        f.truncate(3 << 30)  # sparse: no disk used, but 3 GiB to read
    read: list[Path] = []  # unread: no byte of it is loaded (reading 3 GiB would take seconds and memory)
    real_read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self) or real_read_bytes(self))
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n')))
    assert "is 3.0 GiB, over the 2 GiB a protobuf ONNX file can hold" in one_error_line(result)
    assert tmp_path / "m.onnx" not in read, read


def test_the_same_model_twice_under_two_names_is_refused(tmp_path: Path, home: Path) -> None:
    """Two entries, one file: their jobs would share one key (one row for two planned jobs)."""
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    (tmp_path / "copy.onnx").write_bytes((tmp_path / "m.onnx").read_bytes())
    twice = '[[models]]\npath = "m.onnx"\nname = "a"\n[[models]]\npath = "copy.onnx"\nname = "b"\n'
    line = one_error_line(invoke("sweep", "plan", str(write_sweep(tmp_path, twice))))
    assert "models[1] (b) is the same model as models[0] (a)" in line, line
    odd_models.write_odd_models(tmp_path / "models")
    ranged = (
        '[[models]]\npath = "models/gather_table.onnx"\nname = "a"\n'
        '[[models]]\npath = "models/gather_table.onnx"\nname = "b"\ninput_ranges = { ids = [0, 1] }\n'
    )
    assert invoke("sweep", "plan", str(write_sweep(tmp_path, ranged, "r.toml"))).exit_code == 0


def test_board_counts_are_bounded(tmp_path: Path, home: Path) -> None:
    """`--boards 100000` would start that many agent processes on this machine."""
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    sweep = str(write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\n'))
    for args in (("sweep", "run", sweep, "--boards", "100000"), ("farm", "up", "--boards", "-1")):
        result = invoke(*args)
        assert result.exit_code == 2 and "--boards" in result.output, (args, result.output)
    assert not (home / "farm.json").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = " + "[" * 3000 + "]" * 3000, "nested too deeply"),
        (
            '[[models]]\npath = "m.onnx"\n[measure]\nnumber = 99999999999999\n',
            "measure.number = 99999999999999: at most",
        ),
        ('[[models]]\npath = "m.onnx"\n[measure]\nsession_timeout_s = 1e308\n', "session_timeout_s = 1e+308: at most"),
        ('[[models]]\npath = "m.onnx"\n[measure]\ndevice_wait_s = inf\n', "device_wait_s = inf: at most"),
        ('[[models]]\npath = "m.onnx"\n[tolerance]\natol = nan\n', "tolerance.atol = nan: give a number"),
        ('[[models]]\npath = "m.onnx"\n[tolerance]\natol = inf\n', "tolerance.atol = inf: give a finite number"),
    ],
)
def test_sweep_files_that_never_end_or_never_parse(tmp_path: Path, home: Path, text: str, expected: str) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, text)))
    assert result.exit_code == 2 and expected in one_error_line(result), result.output


def _stored_sweep(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = ResultStore(url)
    jobs = make_jobs()
    begin(store, "optsweep0001", jobs)
    store.record_run("optsweep0001", ok_run(jobs[0]), final=True)
    store.close()
    return url


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("results", "best", "--confidence", "2"), "--confidence 2: must be above 0 and below 1"),
        (("results", "best", "--confidence", "nan"), "--confidence nan: must be a finite number"),
        (("results", "compare", "optsweep0001", "optsweep0001", "--alpha", "5"), "--alpha 5: must be above 0"),
        (("results", "compare", "optsweep0001", "optsweep0001", "--threshold", "-1"), "--threshold -1: must be at"),
        (("results", "regressions", "--lookback", "0"), "--lookback 0: must be at least 3"),
        (("results", "regressions", "--z", "-1"), "--z -1: must be above 0"),
        (("report", "optsweep0001", "-o", "/"), "-o / is a directory"),
        (("results", "history", "optsweep", "--lookback", "0"), "--lookback 0: must be at least 3"),
        (("results", "query", "--limit", "0"), "--limit 0: must be at least 1"),
        (("results", "query", "--limit", "-1", "--json"), "--limit -1: must be at least 1"),
        (("results", "query", "--since", "yesterday"), "--since 'yesterday' is not an ISO date/time"),
        (("results", "show", "x", "--top", "-3"), "--top -3: must be at least 0"),
        (("sweep", "cancel", "optsweep0001", "--wait", "nan"), "--wait nan: must be a finite number"),
        (("results", "compare", "optsweep0001", "optsweep0001", "--threshold", "inf"), "--threshold inf: must be a"),
        (("results", "regressions", "--z", "inf"), "--z inf: must be a finite number"),
        (("results", "query", "--max-memory-mb", "nan"), "--max-memory-mb nan: give the board's memory"),
        (("report", "optsweep0001", "--png", "sweep.toml"), "--png sweep.toml is a file, not a folder"),
    ],
)
def test_answer_options_out_of_range_are_one_line(
    tmp_path: Path, args: tuple[str, ...], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweep.toml").touch()  # a file where --png wants a folder
    result = invoke(*args, "--db", _stored_sweep(tmp_path))
    assert result.exit_code == 2 and expected in one_error_line(result), result.output


def test_a_limit_beyond_sqls_integers_is_every_row(tmp_path: Path) -> None:
    db = _stored_sweep(tmp_path)
    every = invoke("results", "query", "--json", "--db", db)
    huge = invoke("results", "query", "--limit", str(10**20), "--json", "--db", db)
    assert huge.exit_code == 0 and every.exit_code == 0, huge.output
    assert json.loads(huge.output) == json.loads(every.output) and json.loads(every.output)


def test_a_report_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    result = invoke("report", "optsweep0001", "-o", "/dev/full", "--db", _stored_sweep(tmp_path))
    assert result.exit_code == 1 and "cannot write the report to /dev/full" in one_error_line(result), result.output


# --- found on the second pass: addresses, ports and database URLs ---------------------------------


# "a" * 64: a DNS label longer than 63 characters, which the resolver refuses (UnicodeError, not OSError).
@pytest.mark.parametrize(
    "address", ["notanaddr", "127.0.0.1:", ":9190", "127.0.0.1:99999", "127.0.0.1:0", "a" * 64 + ":9190", "a..b:9190"]
)
@pytest.mark.parametrize("command", [("farm", "list"), ("sweep", "resume", "deadbeef")])
def test_a_malformed_tracker_address_is_one_line(home: Path, command: tuple[str, ...], address: str) -> None:
    result = invoke(*command, "--tracker", address)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert repr(address) in line and "HOST:PORT" in line, line


def test_a_malformed_tracker_in_the_environment_names_the_variable(home: Path, monkeypatch) -> None:
    monkeypatch.setenv("TVMBENCH_TRACKER", "localhost")
    result = invoke("farm", "list")
    assert result.exit_code == 2 and "TVMBENCH_TRACKER" in one_error_line(result)


@pytest.mark.parametrize(("command", "port"), [(("serve",), "99999"), (("serve",), "-5"), (("farm", "up"), "70000")])
def test_a_port_out_of_range_is_one_line(home: Path, command: tuple[str, ...], port: str) -> None:
    result = invoke(*command, "--port", port)
    assert result.exit_code == 2
    assert f"--port {port}: must be at least 0 and below 65536" in one_error_line(result)


@pytest.mark.parametrize(
    ("url", "expected"),
    [("mysql://user@host/db", "'mysql' databases are not supported"), ("results#1.db", "is not a database URL")],
)
def test_an_unsupported_database_url_says_what_is_supported(home: Path, url: str, expected: str) -> None:
    result = invoke("results", "list", "--db", url)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert expected in line and "sqlite:///" in line and "postgresql+psycopg://" in line, line


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file:r?mode=memory&uri=true"])
def test_an_in_memory_database_is_refused_before_a_sweep_runs_into_it(tmp_path: Path, home: Path, url: str) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "mlp.onnx")
    sweep = write_sweep(tmp_path, '[[models]]\npath = "mlp.onnx"\n[[targets]]\npreset = "host"\n')
    for args in (("sweep", "run", str(sweep)), ("results", "list")):
        result = invoke(*args, "--db", url)
        line = one_error_line(result)
        assert "an in-memory SQLite database keeps nothing after this command" in line, line
        assert "sqlite:///results.db" in line, line


def test_a_sqlite_files_path_is_a_database(home: Path, tmp_path: Path, monkeypatch) -> None:
    """--db results.db, ~/r.db, TVMBENCH_DB=path and tvmbench.open(path): the SQLite file, made absolute."""
    import tvmbench

    url = _stored_sweep(tmp_path)
    monkeypatch.chdir(tmp_path)
    by_url = invoke("results", "list", "--db", url, "--json")
    assert by_url.exit_code == 0 and '"optsweep0001"' in by_url.output, by_url.output
    assert invoke("results", "list", "--db", "r.db", "--json").output == by_url.output
    monkeypatch.setenv("HOME", str(tmp_path))
    assert invoke("results", "list", "--db", "~/r.db", "--json").output == by_url.output
    monkeypatch.setenv("TVMBENCH_DB", "r.db")
    assert invoke("results", "list", "--json").output == by_url.output
    results = tvmbench.open("r.db")
    try:
        assert results.store.url == f"sqlite:///{tmp_path / 'r.db'}"
        assert set(results.query()["sweep_id"]) == {"optsweep0001"}
    finally:
        results.close()


@pytest.mark.parametrize("command", [("results", "list"), ("farm", "list"), ("sweep", "status", "x")])
def test_tvmbench_home_that_is_a_file_is_one_line(tmp_path: Path, monkeypatch, command: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder")
    monkeypatch.setenv("TVMBENCH_HOME", str(home))
    monkeypatch.delenv("TVMBENCH_DB", raising=False)
    result = invoke(*command)
    assert result.exit_code == 2
    assert f"TVMBENCH_HOME {home} is a file, not a folder" in one_error_line(result)


# --- found on the third pass: names the file system refuses, models no one can load -----------------


@pytest.mark.parametrize("where", ["sweep file", "model path", "inputs_file", "report -o"])
def test_a_path_longer_than_the_file_system_allows_is_one_line_exit_2(tmp_path: Path, home: Path, where: str) -> None:
    # A name over 255 bytes makes stat() raise ENAMETOOLONG, which Path.is_file() does not swallow; the
    # entry point (tvmbench/cli/main.py) turns it into one line, wherever the path was given.
    long = "a" * 300
    if where == "sweep file":
        args = ["sweep", "plan", str(tmp_path / f"{long}.toml")]
    elif where == "report -o":
        args = ["report", "optsweep0001", "-o", str(tmp_path / f"{long}.html"), "--db", _stored_sweep(tmp_path)]
    else:
        entry = f'path = "{long}.onnx"' if where == "model path" else f'onnx = "squeezenet"\ninputs_file = "{long}"'
        args = ["sweep", "plan", str(write_sweep(tmp_path, f"[[models]]\n{entry}\n"))]
    done = subprocess.run([TVMBENCH, *args], capture_output=True, text=True, timeout=300)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: ") and "File name too long; give a shorter path" in lines[0], lines
    assert " characters): " in lines[0] and len(lines[0]) < 200, lines  # the name shortened, its length given


@pytest.mark.parametrize("command", ["status", "resume", "cancel"])
def test_a_sweep_name_where_an_id_is_needed_says_the_ids(tmp_path: Path, command: str) -> None:
    # `results ... --sweep` takes names, the commands that act on a sweep take ids: the line says which.
    result = invoke("sweep", command, "t", "--db", _stored_sweep(tmp_path))  # "t" is the stored sweep's name
    line = one_error_line(result)
    assert result.exit_code == 2 and "that is the name of sweep(s) optsweep0001" in line and "give an id" in line


@pytest.mark.parametrize(
    "args",
    [("results", "list", "--sweep", ""), ("results", "show", " "), ("sweep", "status", ""), ("farm", "reset", "")],
)
def test_a_blank_id_is_refused_not_a_prefix_of_everything(tmp_path: Path, args: tuple[str, ...]) -> None:
    # With one sweep stored, "" was the unique prefix of its id: `results list --sweep ""` listed it.
    result = invoke(*args, "--db", _stored_sweep(tmp_path))
    assert result.exit_code == 2 and "is blank: give an id" in one_error_line(result), result.output


def test_an_empty_tvmbench_home_is_the_default_not_the_current_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    from db.engine import default_home

    monkeypatch.setenv("TVMBENCH_HOME", "")
    assert default_home() == Path.home() / ".tvmbench"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("cycle", "depend on each other in a cycle"),
        ("undefined input", "reads 'ghost', which no input, initializer or node defines"),
        ("dangling output", "output 'nowhere' is produced by no node"),
    ],
)
def test_a_graph_no_runtime_can_load_is_refused_at_intake(tmp_path: Path, home: Path, kind: str, expected: str) -> None:
    """A cycle or a name nothing defines is refused when the sweep file is read, not after planning at the
    reference step (ONNX Runtime's load error there); nodes merely listed out of order still plan."""
    from onnx import TensorProto, helper

    nodes = {
        "cycle": [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
        "undefined input": [helper.make_node("Add", ["x", "ghost"], ["a"])],
        "dangling output": [helper.make_node("Relu", ["x"], ["a"])],
        "out of order": [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Neg", ["x"], ["b"])],
    }
    output = {"dangling output": "nowhere"}.get(kind, "a")
    tensor = helper.make_tensor_value_info
    for name, graph_nodes, out in ((kind, nodes[kind], output), ("out of order", nodes["out of order"], "a")):
        graph = helper.make_graph(
            graph_nodes, "g", [tensor("x", TensorProto.FLOAT, [1, 4])], [tensor(out, TensorProto.FLOAT, [1, 4])]
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, tmp_path / f"{name.replace(' ', '_')}.onnx")
    result = invoke(
        "sweep", "plan", str(write_sweep(tmp_path, f'[[models]]\npath = "{kind.replace(" ", "_")}.onnx"\n'))
    )
    line = one_error_line(result)
    assert result.exit_code == 2 and expected in line and "the model is invalid" in line, result.output
    ordered = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "out_of_order.onnx"\n', "o.toml")))
    assert ordered.exit_code == 0, ordered.output


def test_bidi_controls_in_names_are_refused(tmp_path: Path, home: Path) -> None:
    """U+202E (category Cf, not Cc) in a name reversed the rest of its row, figures included, in a bidi-aware
    terminal; the tables escape it, and sweep files and model intake now refuse it like a control character."""
    from onnx import TensorProto, helper

    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    sweep = write_sweep(tmp_path, '[[models]]\npath = "m.onnx"\nname = "m\\u202eode"\n')
    line = one_error_line(invoke("sweep", "plan", str(sweep)))
    assert "models[0].name" in line and "the bidi control U+202E" in line and "\u202e" not in line, line
    tensor = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x\u2067"], ["y"])],
        "g",
        [tensor("x\u2067", TensorProto.FLOAT, [1, 4])],
        [tensor("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "bidi.onnx")
    result = invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "bidi.onnx"\n', "b.toml")))
    line = one_error_line(result)
    assert result.exit_code == 2 and "the bidi control U+2067" in line and "\u2067" not in line, line


def test_a_long_note_is_one_line_in_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    """A progress note (e.g. that the sweep file changed since the sweep ran) was cut at 200 columns in a pipe."""
    from tvmbench.cli.common import note

    note("the sweep file changed since the sweep ran " * 12)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) > 400, err
