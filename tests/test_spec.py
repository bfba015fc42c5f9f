"""Sweep-file validation: every mistake is one line naming the key or path and what to write."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.spec import SpecError, load_spec, parse_spec, sweep_text
from tests.conftest import write_sweep
from workers import model_zoo

M = "[[models]]\npath = 'tiny_cnn.onnx'\n"
GOOD = """
name = "t"
[[models]]
path = "{model}"
[[targets]]
preset = "host"
[axes]
executor = ["vm-bytecode", "vm-compiled"]
opt_level = [0, 2]
"""


def _parse(text: str, base: Path) -> object:
    return parse_spec(text, base=base, source_path="sweep.toml")


def test_valid_spec_resolves_models_targets_and_axes(models_dir: Path) -> None:
    spec = _parse(GOOD.format(model="tiny_cnn.onnx"), models_dir)
    assert [m.name for m in spec.models] == ["tiny_cnn"]
    assert spec.models[0].inputs == (("x", (1, 3, 16, 16), "float32"),)
    assert spec.targets[0].board_key == "host"
    assert spec.executors == ("vm-bytecode", "vm-compiled")
    assert spec.opt_levels == (0, 2)
    assert spec.pipelines == ("per-target",)


def test_a_sweep_file_saved_with_a_byte_order_mark_is_the_same_sweep(models_dir: Path) -> None:
    text = GOOD.format(model="tiny_cnn.onnx").replace("\n", "\r\n")  # as a Windows editor saves it
    plain, marked = models_dir / "plain.toml", models_dir / "marked.toml"
    plain.write_bytes(text.encode())
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())  # UTF-8's byte-order mark
    assert load_spec(marked).sweep_id == load_spec(plain).sweep_id
    # What `sweep resume` and `sweep submit` read again is the same text, the mark left out.
    assert load_spec(marked).source == sweep_text(marked) == text.replace("\r\n", "\n")


def test_bundled_model_by_name(tmp_path: Path) -> None:
    spec = _parse('[[models]]\nonnx = "squeezenet"\n', tmp_path)
    assert spec.models[0].source == "onnx:light_squeezenet"
    assert spec.models[0].inputs[0][1] == (1, 3, 224, 224)  # the weight inputs of opset 9 are skipped


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (M + "shape = 1\n", "models[0]: unknown key 'shape'"),
        (
            M + "[axes]\nopt_level = [5]\n",
            "axes.opt_level: 5 is not valid; use integers 0 to 3",
        ),
        (M + "[axes]\nopt_level = [true]\n", "axes.opt_level: true is not valid"),
        (M + "[axes]\nexecutor = 'graph'\n", 'use "vm-bytecode" or "vm-compiled"'),
        (
            M + "[axes]\nexecutors = ['vm-bytecode']\n",
            "[axes]: unknown key 'executors'",
        ),
        (
            M + "[measure]\nrepeat = 'three'\n",
            "measure.repeat = 'three': expected a non-negative integer",
        ),
        (M + "[measure]\nrepeat = 0\n", "measure.repeat = 0: must be positive"),
        (M + "[tolerance]\natol = -1\n", "tolerance.atol = -1: must be non-negative"),
        ("[[models]]\npath = 'missing.onnx'\n", "missing.onnx does not exist"),
        ("[[models]]\nonnx = 'nope'\n", "onnx = 'nope' is not a model bundled with the onnx package"),
        # A bundled name is a name: a path out of the onnx package's folder is not one of them.
        (
            "[[models]]\nonnx = '../light/light_squeezenet'\n",
            "onnx = '../light/light_squeezenet' is not a model bundled with the onnx package",
        ),
        ("[[models]]\npath = 'a.onnx'\nonnx = 'squeezenet'\n", "give exactly one of path"),
        (
            M + "[[targets]]\npreset = 'pdp11'\n",
            "targets[0].preset = 'pdp11' is unknown",
        ),
        (M + "[[targets]]\nname = 'x'\n", 'give preset = "host", or name'),
        # A preset's overrides are typed like a target table's own keys.
        (M + "[[targets]]\npreset = 'host'\nname = 5\n", "targets[0].name = 5: expected a string"),
        (M + "[[targets]]\npreset = 'host'\nboard_key = 5\n", "targets[0].board_key = 5: expected a tracker key"),
        (M + "[[targets]]\npreset = 'host'\ntarget = 'llvm'\n", "targets[0].target = 'llvm': expected a TVM target"),
        (M + "[[targets]]\npreset = 'host'\nemulated = 'yes'\n", "targets[0].emulated = 'yes': expected true or"),
        (M + "[[targets]]\npreset = 'host'\narch = 5\n", "targets[0].arch = 5: expected a machine name"),
        (M + "[[targets]]\npreset = 'host'\ncross_compiler = [1]\n", "targets[0].cross_compiler = [1]: expected"),
        (
            M + "[[targets]]\nname = 'mine'\ntarget = { kind = 'llvm' }\nboard_key = 'host'\n",
            "targets[0]: add arch = \"aarch64\" (the board's `uname -m`) to target 'mine'",
        ),
        ("models = 3\n", "models: add at least one [[models]] table"),
        ("name = [1]\n[[models]]\npath = 'tiny_cnn.onnx'\n", "name = [1]: expected a string"),
        ("colour = 'red'\n", "sweep file: unknown key 'colour'"),
        ("[[models]\n", "not valid TOML"),
    ],
)
def test_invalid_specs_name_the_culprit(models_dir: Path, text: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        _parse(text, models_dir)
    message = str(info.value)
    assert expected in message, message
    assert "\n" not in message


def test_not_onnx_and_symbolic_dims(tmp_path: Path) -> None:
    (tmp_path / "notes.onnx").write_text("this is not a protobuf")
    with pytest.raises(SpecError, match="is not an ONNX model"):
        _parse("[[models]]\npath = 'notes.onnx'\n", tmp_path)

    import onnx

    onnx.save(model_zoo.tiny_cnn(batch="N"), tmp_path / "dyn.onnx")
    with pytest.raises(SpecError, match=r"input 'x' of dyn.onnx has symbolic dims \['N', 3, 16, 16\]; add inputs"):
        _parse("[[models]]\npath = 'dyn.onnx'\n", tmp_path)
    spec = _parse("[[models]]\npath = 'dyn.onnx'\ninputs = { x = [2, 3, 16, 16] }\n", tmp_path)
    assert spec.models[0].inputs[0][1] == (2, 3, 16, 16)
    with pytest.raises(SpecError, match=r"inputs.x = \[2, 3, 8, 8\]: the model declares"):
        _parse("[[models]]\npath = 'dyn.onnx'\ninputs = { x = [2, 3, 8, 8] }\n", tmp_path)
    with pytest.raises(SpecError, match="has no input 'y'"):
        _parse("[[models]]\npath = 'dyn.onnx'\ninputs = { y = [1] }\n", tmp_path)


def test_custom_target_table(models_dir: Path) -> None:
    spec = _parse(
        M + "[[targets]]\nname = 'my-arm'\n"
        "target = { kind = 'llvm', mtriple = 'aarch64-linux-gnu' }\narch = 'aarch64'\n"
        "cross_compiler = 'aarch64-linux-gnu-gcc'\n",
        models_dir,
    )
    target = spec.targets[0]
    assert (target.name, target.board_key, target.arch) == ("my-arm", "my-arm", "aarch64")
    assert target.tvm_target == {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}


def test_sweep_id_is_a_content_hash(models_dir: Path, tmp_path: Path) -> None:
    text = GOOD.format(model=models_dir / "tiny_cnn.onnx")
    a = load_spec(write_sweep(tmp_path, text, "a.toml"))
    b = load_spec(write_sweep(tmp_path, "# a comment changes nothing\n" + text, "b.toml"))
    assert a.sweep_id == b.sweep_id
    assert load_spec(tmp_path / "a.toml", label="again").sweep_id != a.sweep_id
    c = load_spec(write_sweep(tmp_path, text.replace("[0, 2]", "[0, 3]"), "c.toml"))
    assert c.sweep_id != a.sweep_id


def test_missing_sweep_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such sweep file"):
        load_spec(tmp_path / "nope.toml")


def test_a_matrix_over_the_job_cap_is_refused_at_load_and_one_at_it_loads(models_dir: Path) -> None:
    from orchestrator.plan import plan_jobs
    from orchestrator.spec.matrix import MAX_JOBS

    def sweep(budgets: int) -> str:  # two executors x ``budgets`` tuning budgets
        tuning = ", ".join(str(b) for b in range(budgets))
        return M + f"[axes]\nexecutor = ['vm-bytecode', 'vm-compiled']\ntuning = [{tuning}]\n"

    with pytest.raises(SpecError) as info:
        _parse(sweep(MAX_JOBS // 2 + 1), models_dir)
    assert str(info.value) == (
        f"[axes]: the sweep makes more than {MAX_JOBS:,} jobs (2 executor x {MAX_JOBS // 2 + 1} tuning); "
        "split it into several sweeps or narrow an axis"
    )
    assert len(plan_jobs(_parse(sweep(MAX_JOBS // 2), models_dir))) == MAX_JOBS
