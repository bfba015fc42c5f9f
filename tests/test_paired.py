"""benchmarks/paired.py: a program and ONNX Runtime timed in turn, in one process and in several fresh ones.

A fresh process draws its speed (docs/tuning-log.md, round 10), so the paired figures are taken over
several: each process's medians, the median of their ratios and the ratios' range. On a real exported
program (tiny_cnn, untuned) and real ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from benchmarks.paired import BASELINE, paired_rows
from workers import model_zoo


def exported_program(proto: onnx.ModelProto, path: Path) -> Path:
    """``proto`` built for the host as the VM builder exports it (untuned), at ``path``."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    target = tvm.target.Target({"kind": "llvm"})
    with target, tvm.transform.PassContext(opt_level=3):
        relax.build(from_onnx(proto, keep_params_in_input=False), target).export_library(str(path))
    return path


def test_the_rounds_run_in_fresh_processes_and_the_ratio_is_the_median_of_theirs(tmp_path: Path) -> None:
    proto = model_zoo.tiny_cnn()
    model = tmp_path / "tiny_cnn.onnx"
    onnx.save(proto, model)
    programs = {"tiny untuned": exported_program(proto, tmp_path / "tiny.so")}
    sweep_ms = {BASELINE: 1.0, "tiny untuned": 2.0}
    for processes in (1, 2):
        rows = {r["config"]: r for r in paired_rows("tiny_cnn", model, programs, sweep_ms, 2, 3, processes)}
        assert set(rows) == {BASELINE, "tiny untuned"} and rows["tiny untuned"]["sweep_median_ms"] == 2.0
        base, program = rows[BASELINE], rows["tiny untuned"]
        assert base["x_ort"] == 1.0 and program["median_ms"] > 0 and program["processes"] == processes
        lo, hi = program["ci"]
        assert lo <= program["median_ms"] <= hi
        if processes == 1:
            assert program["x_ort_range"] is None
        else:  # a ratio per process: the median lies within their range, the baseline's are all 1
            assert base["x_ort_range"] == (1.0, 1.0)
            assert program["x_ort_range"][0] <= program["x_ort"] <= program["x_ort_range"][1]
