"""Hostile and broken input: each is refused at intake with one line (exit 2), or ends as one `model` row.

Nothing outside the model's folder may be read: an audit hook records every file Python opens while a
sweep file is loaded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from tests.conftest import write_sweep
from tvmbench.cli import app
from workers import model_zoo

_OPENED: list[str] | None = None  # while a list, the audit hook records opened paths into it


def _audit(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


def _raw(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    """A model built without the checker, so that it may be as broken as the test needs."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vi(name: str, dims: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _external(location: str) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        weight.external_data.add(key=key, value=value)
    return _raw([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [4, 4])], [_vi("y", [4, 4])], [weight])


def _declared_only(name: str, dims: list[int]) -> onnx.TensorProto:
    """A float tensor that declares ``dims`` but carries no data."""
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT)
    tensor.dims.extend(dims)
    return tensor


def _write_model(folder: Path, model: onnx.ModelProto | bytes, name: str = "m.onnx") -> Path:
    path = folder / name
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    return path


def _plan(tmp_path: Path, sweep_text: str) -> tuple[int, str, list[str]]:
    """Run `tvmbench sweep plan` on a sweep file; returns (exit code, output, files opened under tmp_path's parent)."""
    global _OPENED
    sweep = write_sweep(tmp_path, sweep_text)
    _OPENED = []
    try:
        result = CliRunner().invoke(app, ["sweep", "plan", str(sweep)])
    finally:
        opened, _OPENED = _OPENED, None
    return result.exit_code, result.output, opened


CASES = {
    "truncated": (lambda: model_zoo.tiny_cnn().SerializeToString()[:5000], "is not an ONNX model"),
    "not-onnx": (lambda: b"#!/bin/sh\necho this is not a model\n" * 10, "is not an ONNX model"),
    "unknown-operator": (
        lambda: _raw([helper.make_node("FooBar", ["x"], ["y"])], [_vi("x", [1, 4])], [_vi("y", [1, 4])]),
        "operator 'FooBar'",
    ),
    "future-opset": (
        lambda: _raw([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 4])], [_vi("y", [1, 4])], opset=99),
        "opset 99",
    ),
    "external-data-traversal": (lambda: _external("../../etc/passwd"), "outside the model's folder"),
    "external-data-absolute": (lambda: _external("/etc/passwd"), "outside the model's folder"),
    # stat() of a 5000-character name raises ENAMETOOLONG: still the one refusal, the name shortened.
    "external-data-long-name": (lambda: _external("a" * 5000), "(5000 characters)', which cannot be resolved"),
    # An input named with an escape sequence would retitle the terminal of whoever lists the results.
    "control-character-in-a-name": (
        lambda: _raw(
            [helper.make_node("Relu", ["x\x1b]0;PWNED\x07"], ["y"])],
            [_vi("x\x1b]0;PWNED\x07", [1, 4])],
            [_vi("y", [1, 4])],
        ),
        "input 'x\\x1b]0;PWNED\\x07' contains the control character U+001B",
    ),
    # numpy has bfloat16 only through ml_dtypes, and ONNX Runtime's Python API takes no input of it.
    "bfloat16-input": (
        lambda: _raw(
            [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
            [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 4])],
            [_vi("y", [1, 4])],
        ),
        "input 'x' is a tensor of bfloat16",
    ),
    "huge-input": (
        lambda: _raw([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [50000, 50000])], [_vi("y", [50000, 50000])]),
        "9.3 GiB",
    ),
    "huge-output": (  # a 1x1 input expanded to 100000x100000: 37 GiB declared by the output alone
        lambda: _raw(
            [helper.make_node("Expand", ["x", "s"], ["y"])],
            [_vi("x", [1, 1])],
            [_vi("y", [100000, 100000])],
            [numpy_helper.from_array(np.array([100000, 100000], np.int64), "s")],
        ),
        "output 'y' declares 37.3 GiB",
    ),
    "huge-inputs-together": (  # three inputs of 0.75 GiB each: none alone over the limit
        lambda: _raw(
            [helper.make_node("Sum", ["a", "b", "c"], ["y"])],
            [_vi(n, [200_000_000]) for n in "abc"],
            [_vi("y", [1])],
        ),
        "its inputs declare 2.2 GiB together",
    ),
    "huge-initializer": (
        lambda: _raw(
            [helper.make_node("Add", ["x", "w"], ["y"])],
            [_vi("x", [1])],
            [_vi("y", [1])],
            [_declared_only("w", [100000, 100000])],
        ),
        "initializer 'w'",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_model_is_refused_at_intake(case: str, tmp_path: Path, home: Path) -> None:
    make, expected = CASES[case]
    folder = tmp_path / "models"
    folder.mkdir()
    _write_model(folder, make())
    code, output, opened = _plan(tmp_path, '[[models]]\npath = "models/m.onnx"\n')
    assert code == 2, output
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and "m.onnx" in lines[0] and expected in lines[0], output
    assert not any(p.endswith("passwd") for p in opened), opened


def test_external_data_symlink_out_of_folder_is_refused_unread(tmp_path: Path, home: Path) -> None:
    secret = tmp_path / "secret.bin"  # outside the model's folder
    secret.write_bytes(b"\0" * 64)
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "weights.bin").symlink_to(secret)
    _write_model(folder, _external("weights.bin"))
    code, output, opened = _plan(tmp_path, '[[models]]\npath = "models/m.onnx"\n')
    assert code == 2 and "outside the model's folder" in output, output
    assert str(secret) not in opened and str(folder / "weights.bin") not in opened, opened


def test_external_data_in_a_symlink_loop_is_refused_unread(tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "loop").symlink_to("loop")  # resolve() raises RuntimeError on it, not OSError
    _write_model(folder, _external("loop"))
    code, output, opened = _plan(tmp_path, '[[models]]\npath = "models/m.onnx"\n')
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "'loop'" in lines[0], output
    assert str(folder / "loop") not in opened, opened


def test_external_data_inside_folder_is_refused_with_the_fix(tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"\0" * 64)
    _write_model(folder, _external("weights.bin"))
    code, output, opened = _plan(tmp_path, '[[models]]\npath = "models/m.onnx"\n')
    assert code == 2 and "save_as_external_data=False" in output, output
    assert str(folder / "weights.bin") not in opened


_M = '[[models]]\npath = "models/m.onnx"\ninputs = { x = [1, 3, 16, 16] }\n'


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        (f'{_M}[axes]\nopt_level = ["two"]\n', "axes.opt_level"),
        (f'{_M}[measure]\nrepeat = "5"\n', "measure.repeat"),
        (f"{_M}[measure]\nsession_timeout_s = true\n", "measure.session_timeout_s"),
        ('models = "models/m.onnx"\n', "models"),
        ("[[models]]\npath = 3\n", "models[0].path"),
        ('[[models]]\npath = "models/m.onnx"\ninputs = { x = [1000000, 3, 16, 16] }\n', "2.9 GiB per input"),
        ("[[models]\n", "not valid TOML"),
    ],
)
def test_sweep_file_with_wrong_types_is_refused(text: str, culprit: str, tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    onnx.save(model_zoo.tiny_cnn(batch="N"), folder / "m.onnx")
    code, output, _ = _plan(tmp_path, text)
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and culprit in lines[0], output


def test_operator_tvm_cannot_import_ends_as_one_model_row(tmp_path: Path, store) -> None:
    """An operator ONNX defines but TVM's importer lacks passes intake and ends as a `model` build."""
    from orchestrator.plan import plan_jobs
    from orchestrator.spec import load_spec
    from workers.executors.registry import build_job
    from workers.executors.requests import BuildRequest

    folder = tmp_path / "models"
    folder.mkdir()
    model = _raw([helper.make_node("Det", ["x"], ["y"])], [_vi("x", [3, 3])], [_vi("y", [])])
    onnx.checker.check_model(model)
    path = _write_model(folder, model)
    spec = load_spec(write_sweep(tmp_path, '[[models]]\npath = "models/m.onnx"\n'))
    [job] = plan_jobs(spec)
    store.begin_sweep(
        spec.sweep_id,
        name=spec.name,
        label="",
        source=spec.source,
        source_path=spec.source_path,
        jobs=[job],
        model_sizes={job.model.sha256: path.stat().st_size},
        tvm_version="0.27",
    )
    build, data = build_job(BuildRequest(job, path.read_bytes()))
    assert build.status == "model" and data is None and "Det" in (build.error or ""), build
    store.save_build(job, build)
    assert store.get_build(build.build_key).status == "model"
