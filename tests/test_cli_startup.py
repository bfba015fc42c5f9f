"""The CLI starts without the library: its help and a query load only what they use (benchmarks/startup.py times it).

Each case runs in a fresh interpreter and reports which heavy packages ended up in ``sys.modules``; nothing is timed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("tvm", "ray", "onnx", "onnxruntime", "pandas", "sqlalchemy", "numpy")

_PROBE = """
import json, sys
from tvmbench.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted(m for m in HEAVY if m in sys.modules)}))
""".replace("HEAVY", repr(HEAVY))


def _loaded(args: list[str], home: Path) -> dict:
    env = {**os.environ, "TVMBENCH_HOME": str(home), "COLUMNS": "120"}
    env.pop("TVMBENCH_DB", None)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["--help"], ["sweep", "run", "--help"], ["farm", "up", "--help"], ["results"]])
def test_help_imports_no_heavy_package(args: list[str], tmp_path: Path) -> None:
    probe = _loaded(args, tmp_path)
    assert probe["code"] in (0, 2), probe  # no_args_is_help groups exit 2 with their help
    assert probe["loaded"] == [], f"`tvmbench {' '.join(args)}` imported {probe['loaded']}"


def test_a_query_imports_no_tvm_ray_or_onnx(tmp_path: Path) -> None:
    """`results best` on a fresh machine needs the database layer only: no TVM, Ray or ONNX."""
    probe = _loaded(["results", "best"], tmp_path)
    assert probe["code"] == 0, probe
    assert not set(probe["loaded"]) & {"tvm", "ray", "onnx", "onnxruntime"}, probe["loaded"]
    assert "sqlalchemy" in probe["loaded"]  # it did open the (empty) database


def test_a_lazy_module_imports_on_first_use_once_even_from_many_threads(tmp_path: Path, monkeypatch) -> None:
    """tvmbench/cli/lazy.py: nothing runs until an attribute is read; then the real module, once, whatever the
    threads (the dashboard's request threads read the same modules); attributes set go to the module."""
    import threading

    from tvmbench.cli.lazy import lazy

    (tmp_path / "lazy_probe_mod.py").write_text("import time\nRUNS = []\nRUNS.append(1)\ntime.sleep(0.2)\nvalue = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_probe_mod", raising=False)
    probe = lazy("lazy_probe_mod")
    assert "lazy_probe_mod" not in sys.modules  # nothing imported yet
    seen: list[int] = []
    threads = [threading.Thread(target=lambda: seen.append(probe.value)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert seen == [42] * 8
    real = sys.modules["lazy_probe_mod"]
    assert real.RUNS == [1]  # executed once
    probe.value = 7
    assert real.value == 7 and probe.value == 7
