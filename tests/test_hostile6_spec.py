"""Hostile-user probe 6, sweep files: two entries of one job key, inputs files that are no .npz, inputs
without a shape, graphs without outputs, a file stored before under another name, labels that read as
sweep ids, and files that are not UTF-8. Loader and `sweep plan` level: no Ray, no farm."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from db.store import ResultStore
from orchestrator.plan import plan_jobs
from orchestrator.spec import SpecError, load_spec, parse_spec
from tests.conftest import one_error_line, write_sweep
from tvmbench.cli import app
from workers import model_zoo

runner = CliRunner()
MLP = '[[models]]\npath = "m.onnx"\n'


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


@pytest.fixture
def mlp_dir(tmp_path: Path) -> Path:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "m.onnx")
    return tmp_path


def _relu(path: Path, value: onnx.ValueInfoProto, outputs: bool = True) -> Path:
    """A one-Relu model reading ``value``; without graph outputs when ``outputs`` is False."""
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", [value.name], ["y"])], "g", [value], [out] if outputs else [])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


# --- 1. two entries, one job key ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        ('[[targets]]\npreset = "host"\n[[targets]]\npreset = "host"\nname = "host2"\n', "targets[1] (host2)"),
        (
            '[[targets]]\nname = "a"\ntarget = { kind = "llvm" }\nboard_key = "host"\narch = "x86_64"\n'
            '[[targets]]\nname = "b"\ntarget = { kind = "llvm" }\nboard_key = "host"\narch = "x86_64"\n',
            "targets[1] (b)",
        ),
    ],
)
def test_two_targets_that_differ_only_in_name_are_refused(mlp_dir: Path, targets: str, expected: str) -> None:
    """They planned two jobs of one job key: `sweep run` built and stored one row for two and said
    "2 jobs (2 ok)". The loader refuses them as it refuses one model listed twice."""
    sweep = write_sweep(mlp_dir, MLP + targets)
    line = one_error_line(invoke("sweep", "plan", str(sweep)))
    assert f"{expected} is the same target as targets[0]" in line, line
    assert "job key" in line and "remove one" in line, line


def test_the_same_preset_with_another_board_key_is_another_target(mlp_dir: Path) -> None:
    spec = load_spec(write_sweep(mlp_dir, MLP + '[[targets]]\npreset = "host"\n[[targets]]\npreset = "host"\n'
                                 'name = "host2"\nboard_key = "host-b"\n'))  # fmt: skip
    assert [t.name for t in spec.targets] == ["host", "host2"]
    assert len({j.key for j in plan_jobs(spec)}) == len(plan_jobs(spec)) == 2


def test_plan_jobs_refuses_any_two_jobs_of_one_key(mlp_dir: Path) -> None:
    """Whatever the loader misses: two jobs of one key are refused before anything is recorded."""
    spec = load_spec(write_sweep(mlp_dir, MLP))
    twin = replace(spec.targets[0], name="twin")
    with pytest.raises(SpecError, match=r"two jobs of the sweep have one job key .*m host .*m twin"):
        plan_jobs(replace(spec, targets=(spec.targets[0], twin)))


# --- 2. an inputs file that is no .npz ----------------------------------------------------------------


def _inputs_sweep(directory: Path, file: str) -> Path:
    return write_sweep(directory, MLP + f'inputs_file = "{file}"\n')


def test_an_npy_inputs_file_says_to_write_an_npz(mlp_dir: Path) -> None:
    """A .npy made `sweep plan` die with a traceback (np.load gives it back as a bare array)."""
    np.save(mlp_dir / "plain.npy", np.zeros((1, 16), np.float32))
    line = one_error_line(invoke("sweep", "plan", str(_inputs_sweep(mlp_dir, "plain.npy"))))
    assert "is a .npy file" in line and "numpy.savez(path, name=array, ...)" in line, line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"hello, I am text\n", "not even a zip archive"),
        (b"", "not even a zip archive"),
        (b"\x80\x04\x95pickled", "not even a zip archive"),
    ],
)
def test_a_file_that_is_no_npz_never_suggests_allow_pickle(mlp_dir: Path, content: bytes, expected: str) -> None:
    """numpy's own message advised to "load it unsafely using the allow_pickle= keyword"."""
    (mlp_dir / "x.npz").write_bytes(content)
    line = one_error_line(invoke("sweep", "plan", str(_inputs_sweep(mlp_dir, "x.npz"))))
    assert "is not an .npz of arrays" in line and expected in line, line
    assert "pickle" not in line, line


def test_an_npz_of_python_objects_is_refused_without_unpickling(mlp_dir: Path) -> None:
    np.savez(mlp_dir / "obj.npz", x=np.array([{}], dtype=object))
    line = one_error_line(invoke("sweep", "plan", str(_inputs_sweep(mlp_dir, "obj.npz"))))
    assert "key 'x' is an array of Python objects" in line and "allow_pickle" not in line, line


# --- 3. an input without a shape ----------------------------------------------------------------------


def test_an_input_without_a_shape_needs_inputs_and_takes_any_rank(tmp_path: Path) -> None:
    """It was measured as a 0-d scalar, and inputs = { x = [2, 3] } was refused ("the model declares [])."""
    _relu(tmp_path / "ns.onnx", helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    model = '[[models]]\npath = "ns.onnx"\n'
    with pytest.raises(SpecError, match=r"input 'x' of ns.onnx declares no shape .*add inputs = \{ x = \[...\] \}"):
        parse_spec(model, base=tmp_path)
    spec = parse_spec(model + "inputs = { x = [2, 3] }\n", base=tmp_path)
    assert spec.models[0].inputs == (("x", (2, 3), "float32"),)
    assert parse_spec(model + "inputs = { x = [4] }\n", base=tmp_path).models[0].inputs[0][1] == (4,)


def test_a_true_scalar_input_is_still_a_scalar(tmp_path: Path) -> None:
    _relu(tmp_path / "s.onnx", helper.make_tensor_value_info("x", TensorProto.FLOAT, []))
    spec = parse_spec('[[models]]\npath = "s.onnx"\n', base=tmp_path)
    assert spec.models[0].inputs == (("x", (), "float32"),)
    with pytest.raises(SpecError, match=r"inputs.x = \[2\]: the model declares \[\]"):
        parse_spec('[[models]]\npath = "s.onnx"\ninputs = { x = [2] }\n', base=tmp_path)


# --- 4. a graph without outputs -----------------------------------------------------------------------


def test_a_graph_without_outputs_is_refused_at_load(tmp_path: Path) -> None:
    """It passed, and every job ended as a `model` row advising input_ranges."""
    _relu(tmp_path / "noout.onnx", helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]), outputs=False)
    line = one_error_line(invoke("sweep", "plan", str(write_sweep(tmp_path, '[[models]]\npath = "noout.onnx"\n'))))
    assert "noout.onnx: the graph declares no outputs" in line, line


# --- 5. the same content under another name -----------------------------------------------------------


def _store_alpha(directory: Path, db: Path) -> tuple[Any, Path]:
    """Sweep file alpha recorded in ``db``, and beta.toml: the same content under other names."""
    alpha = write_sweep(directory, 'name = "alpha"\n' + MLP + 'name = "m_alpha"\n', name="alpha.toml")
    beta = write_sweep(directory, 'name = "beta"\n' + MLP + 'name = "m_beta"\n', name="beta.toml")
    spec = load_spec(alpha)
    with_store = ResultStore(f"sqlite:///{db}")
    with_store.begin_sweep(spec.sweep_id, name=spec.name, label="", source=spec.source, source_path=spec.source_path,
                           jobs=plan_jobs(spec), model_sizes={}, tvm_version="0")  # fmt: skip
    with_store.close()
    assert load_spec(beta).sweep_id == spec.sweep_id
    return spec, beta


def test_plan_of_a_stored_content_under_another_name_says_whose_it_is(
    mlp_dir: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tvmbench.cli.common import console as cli_console

    monkeypatch.setattr(cli_console, "width", 400)
    db = mlp_dir / "r.db"
    spec, beta = _store_alpha(mlp_dir, db)
    result = invoke("sweep", "plan", str(beta), "--db", str(db))
    assert result.exit_code == 0, result.output
    assert f"this file's content is that of sweep {spec.sweep_id} (alpha)" in result.output, result.output
    assert "--label NAME" in result.output, result.output
    # The same file again: nothing to say.
    again = invoke("sweep", "plan", str(mlp_dir / "alpha.toml"), "--db", str(db))
    assert again.exit_code == 0 and "this file's content" not in again.output, again.output


def test_run_of_a_stored_content_under_another_name_heads_with_the_stored_name(
    mlp_dir: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header said "(beta)" over rows stored as alpha's, and `results list --sweep beta` found none."""
    from orchestrator import scheduler
    from orchestrator.scheduling.events import SweepOutcome
    from tvmbench.cli.common import console as cli_console

    db = mlp_dir / "r.db"
    spec, beta = _store_alpha(mlp_dir, db)

    def finished(spec: Any, store: ResultStore, *args: Any, **kwargs: Any) -> SweepOutcome:
        outcome = SweepOutcome(spec.sweep_id, new=False, jobs=1, already_final=1)
        outcome.statuses = Counter(ok=1)
        return outcome

    monkeypatch.setattr(scheduler, "execute_sweep", finished)
    monkeypatch.setattr(cli_console, "width", 400)
    result = invoke("sweep", "run", str(beta), "--db", str(db))
    assert result.exit_code == 0, result.output
    assert f"sweep {spec.sweep_id} (alpha)" in result.output and "(beta)" not in result.output, result.output
    assert "its results stay under the names written there" in result.output, result.output


# --- 6. labels and names that read as sweep ids -------------------------------------------------------


@pytest.mark.parametrize("label", ["141f", "141F88970AAE", "0000"])
def test_a_label_of_hex_digits_is_refused(mlp_dir: Path, label: str) -> None:
    """`results list --sweep 141f` answered for the sweep whose id starts so, not the one labelled 141f."""
    line = one_error_line(invoke("sweep", "plan", str(write_sweep(mlp_dir, MLP)), "--label", label))
    assert f"--label = {label!r} reads as a sweep id" in line and f'"run-{label}"' in line, line


def test_hex_names_and_file_labels_are_refused_other_labels_are_not(mlp_dir: Path) -> None:
    with pytest.raises(SpecError, match=r"^label = 'abcd' reads as a sweep id"):
        load_spec(write_sweep(mlp_dir, 'label = "abcd"\n' + MLP))
    with pytest.raises(SpecError, match=r"^name = 'beef' reads as a sweep id"):
        load_spec(write_sweep(mlp_dir, 'name = "beef"\n' + MLP))
    # A name taken from the file's name is the user's file name, not something written: 2024.toml loads.
    assert load_spec(write_sweep(mlp_dir, MLP, name="2024.toml")).name == "2024"
    for label in ("abc", "run-141f", "141g", "v2024"):
        assert load_spec(write_sweep(mlp_dir, MLP), label=label).label == label
    # A stored sweep is parsed again by `sweep resume`: what was accepted then still parses.
    assert parse_spec('name = "beef"\n' + MLP, base=mlp_dir).name == "beef"


# --- 7. a sweep file that is not UTF-8 ----------------------------------------------------------------


def test_a_latin1_sweep_file_says_where_its_first_bad_byte_is(mlp_dir: Path) -> None:
    path = mlp_dir / "latin.toml"
    path.write_bytes(('name = "t"\n' + MLP + 'name = "café"\n').encode("latin-1"))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value) == (
        f"{path}: not UTF-8 (byte 0xe9 at line 4, column 12); TOML files are UTF-8: save it as UTF-8 "
        "(from Latin-1: iconv -f latin1 -t utf-8)"
    )


def test_a_utf16_sweep_file_says_it_is_utf16(mlp_dir: Path) -> None:
    path = mlp_dir / "wide.toml"
    path.write_bytes(MLP.encode("utf-16"))
    line = one_error_line(invoke("sweep", "plan", str(path)))
    assert "not UTF-8 but UTF-16" in line and "TOML files are UTF-8" in line, line
