"""How fast the CLI starts: the median of N runs of `tvmbench --help` and of `tvmbench results best` on an empty
database (a fresh TVMBENCH_HOME), each a new interpreter, wall clock; plus what `results best` spends importing.

    .venv/bin/python benchmarks/startup.py [--runs 5]

Figures (seconds, median of 5; the shared 2-core machine ran at a load average of 7-9 both times, so every
figure is several times a quiet machine's; compare the columns, not the numbers with other machines):

    measurement                                   before (main 7fdd9a4)   after (branch boards)
    tvmbench --help                                       10.16                   1.84
    tvmbench results best, empty database                 13.28                   2.48
    imports of `results best` (-X importtime)              8.84                   2.46

Before, `--help` imported SQLAlchemy, numpy, onnx (ml_dtypes alone ~4 s here) and TVM's RPC client through
tvmbench/cli/common.py and orchestrator.spec; now it imports typer, rich and the CLI's own modules
(tests/test_cli_startup.py checks that, untimed). `results best` still imports SQLAlchemy and alembic (opening
the store, db/store.py), numpy and pandas (the ranking, tvmbench/answers/ranking.py): those are the next costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tvmbench", *args], env=env, capture_output=True, check=True)
    return time.perf_counter() - start


def _import_seconds(args: list[str], env: dict[str, str]) -> float:
    """The top-level imports' cumulative time of one run (python -X importtime), in seconds."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tvmbench", *args], env=env, capture_output=True, text=True
    )
    total = 0
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        if not name.startswith("  "):  # a top-level import; nested ones are inside its cumulative time
            total += int(cumulative)
    return total / 1e6


def main() -> None:
    """Print the medians, one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "TVMBENCH_HOME": home}
        env.pop("TVMBENCH_DB", None)
        _timed(["--help"], env)  # warm the file cache once, like any second run
        cases = {"tvmbench --help": ["--help"], "tvmbench results best (empty db)": ["results", "best"]}
        for what, args in cases.items():
            times = [_timed(args, env) for _ in range(runs)]
            print(f"{what:<40} median {statistics.median(times):6.2f} s  (min {min(times):.2f}, max {max(times):.2f})")
        imports = [_import_seconds(["results", "best"], env) for _ in range(runs)]
        print(f"{'imports of results best':<40} median {statistics.median(imports):6.2f} s")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
