"""The answers about phases, memory and board state: `results best --metric first`, peak MB, warnings
next to the figures they affect, and `results query --max-memory-mb`. Synthetic rows, real databases."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.synthetic import Result, add_sweep, noisy
from tvmbench.cli import app

runner = CliRunner()
WARNING = "governor 'powersave' on cpu 0,1 (not 'performance'): clocks may change while timing"


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _sweep(store, sweep_id: str, label: str, warn_fast: bool) -> None:
    add_sweep(
        store,
        sweep_id,
        [
            # Fastest in the steady state, slowest to start, and the big one.
            Result(executor="vm-compiled", samples=noisy(4.0), first_ms=90.0, peak_mem_mb=400.0,
                   warnings=[WARNING] if warn_fast else []),
            Result(executor="vm-bytecode", samples=noisy(6.0, seed=1), first_ms=20.0, peak_mem_mb=150.0),
            Result(executor="vm-bytecode", opt_level=0, samples=noisy(9.0, seed=2)),  # a stock board: no memory
        ],
        label=label,
    )  # fmt: skip


def test_best_ranks_steady_or_first_and_prints_peak_and_warnings(store) -> None:
    _sweep(store, "wwww0001", "a", warn_fast=True)
    db = ["--db", store.url]
    code, out = _cli("results", "best", "--sweep", "a", "--json", *db)
    (steady,) = json.loads(out)
    assert code == 0 and steady["metric"] == "steady" and steady["best"].startswith("vm-compiled")
    assert steady["best_peak_mem_mb"] == 400.0 and steady["best_warnings"] == [WARNING]
    assert steady["runner_up_warnings"] == []
    code, out = _cli("results", "best", "--sweep", "a", "--metric", "first", "--json", *db)
    (first,) = json.loads(out)
    assert first["best"].startswith("vm-bytecode O2") and first["best_value"] == 20.0
    assert first["runner_up_value"] == 90.0 and first["runner_up_warnings"] == [WARNING]
    code, out = _cli("results", "best", "--sweep", "a", *db)
    assert code == 0 and "![1]" in out and f"warning (vm-compiled O2 per-target (host)): {WARNING}" in out
    code, out = _cli("results", "best", "--metric", "cold", *db)
    assert code == 2 and "unknown metric 'cold'" in out


def test_compare_and_list_mark_the_warned_figure(store) -> None:
    _sweep(store, "wwww0001", "a", warn_fast=False)
    _sweep(store, "wwww0002", "b", warn_fast=True)
    db = ["--db", store.url]
    code, out = _cli("results", "compare", "a", "b", "--all", "--json", *db)
    rows = {r["executor"] + str(r["opt_level"]): r for r in json.loads(out)["rows"]}
    assert rows["vm-compiled2"]["warnings_b"] == [WARNING] and rows["vm-compiled2"]["warnings_a"] == []
    assert rows["vm-bytecode2"]["warnings_b"] == []
    code, out = _cli("results", "compare", "a", "b", "--all", *db)
    assert "![1]" in out and f"B: {WARNING}" in out
    code, out = _cli("results", "list", "--sweep", "wwww0002", *db)
    assert code == 0 and "peak MB" in out and "400.0" in out and "![1]" in out
    assert "warning:" in out and "'powersave'" in out  # the warning itself, under the table


def test_query_max_memory_says_which_fit_and_what_is_unknown(store) -> None:
    _sweep(store, "wwww0001", "a", warn_fast=False)
    db = ["--db", store.url]
    code, out = _cli("results", "query", "--max-memory-mb", "256", "--json", *db)
    fits = json.loads(out)
    assert code == 0 and [(r["executor"], r["peak_mem_mb"]) for r in fits] == [("vm-bytecode", 150.0)]
    code, out = _cli("results", "query", "--max-memory-mb", "256", *db)
    assert "1 ok result(s) with no memory figure were left out" in out
    code, out = _cli("results", "query", "--max-memory-mb", "0", *db)
    assert code == 2 and "--max-memory-mb 0" in out
