"""Plan: a pure, deterministic expansion of the sweep matrix into keyed jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.plan import plan_jobs
from orchestrator.spec import parse_spec

TEXT = """
[[models]]
path = "tiny_cnn.onnx"
[[models]]
path = "tiny_mlp.onnx"
[axes]
executor = ["vm-bytecode", "vm-compiled"]
opt_level = [0, 1, 2]
pipeline = ["per-target", "generic"]
"""


def test_matrix_size_and_unique_keys(models_dir: Path) -> None:
    jobs = plan_jobs(parse_spec(TEXT, base=models_dir))
    assert len(jobs) == 2 * 2 * 3 * 2
    assert len({j.key for j in jobs}) == len(jobs)
    assert len({j.build_key("v") for j in jobs}) == len(jobs)


def test_keys_are_stable_across_processes(models_dir: Path) -> None:
    """The same file gives the same keys in a fresh interpreter (no hash randomisation, no ordering luck)."""
    here = [j.key for j in plan_jobs(parse_spec(TEXT, base=models_dir))]
    code = (
        "import json, sys; from pathlib import Path; from orchestrator.plan import plan_jobs; "
        "from orchestrator.spec import parse_spec; "
        f"print(json.dumps([j.key for j in plan_jobs(parse_spec(sys.stdin.read(), base=Path({str(models_dir)!r})))]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=TEXT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(out.stdout) == here


def test_measure_settings_change_job_key_but_not_build_key(models_dir: Path) -> None:
    a = plan_jobs(parse_spec(TEXT, base=models_dir))
    b = plan_jobs(parse_spec(TEXT + "[measure]\nrepeat = 7\n", base=models_dir))
    assert [j.key for j in a] != [j.key for j in b]
    assert [j.build_key("v") for j in a] == [j.build_key("v") for j in b]
    assert a[0].build_key("0.27") != a[0].build_key("0.28")  # a TVM upgrade builds anew


def test_job_keys_are_the_canonical_hashes_of_their_configuration(models_dir: Path) -> None:
    """Keys are computed from cached parts (10,000-job plans): they must stay the documented hashes."""
    from tvmbench.core.records import canonical_hash

    text = (
        f"[[models]]\npath = '{models_dir}/tiny_cnn.onnx'\n[[targets]]\npreset = 'host'\n[[targets]]\n"
        "preset = 'cortex-m4'\n[axes]\nexecutor = ['vm-bytecode', 'aot-c']\nopt_level = [0, 3]\n"
        "kernels = ['c', 'llvm']\n"
    )
    jobs = plan_jobs(parse_spec(text, base=models_dir))
    assert len(jobs) == 6
    for job in jobs:
        assert job.key == canonical_hash({**job.build_config(), "board_key": job.target.board_key,
                                          "measure": job.measure.identity(), **job.model.input_values()})  # fmt: skip
        assert job.build_key("0.27") == canonical_hash({**job.build_config(), "tvm": "0.27"})
