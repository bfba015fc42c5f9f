"""Every benchmark script runs as the README writes it, `python benchmarks/NAME.py` from the checkout.

benchmarks/warm_start.py imported ``benchmarks.tuning`` as a package, which only `python -m` finds: the
README's command ended in ModuleNotFoundError before printing anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_script_runs_from_the_checkout(script: str) -> None:
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-2000:]
