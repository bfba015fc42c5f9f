"""Terminal and file output of the analysis commands (rankings, comparisons, regressions, frames)."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    import pandas as pd

    from answers.compare import Comparison

_VERDICT_STYLE = {"regression": "red", "broken": "red", "improvement": "green", "fixed": "green"}


def fmt(value: Any, digits: int = 4) -> str:
    """A cell: '-' for missing, short floats."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with NaN as null and datetimes as ISO strings, ready for json.dumps."""
    return [{k: _jsonable(v) for k, v in r.items()} for r in rows]


def comparison_json(result: Comparison) -> dict[str, Any]:
    """What `results compare --json` prints (NaN as null): the summary, the geomean and every matched row."""
    return {
        "sweep_a": result.sweep_a,
        "sweep_b": result.sweep_b,
        "summary": result.summary(),
        "geomean_ratio": _jsonable(result.geomean_ratio),
        "only_a": result.only_a,
        "only_b": result.only_b,
        "rows": records(result.rows),
    }


def write_frame(console: Console, df: pd.DataFrame, title: str, fmt_name: str) -> None:
    """A DataFrame as a table, JSON records or CSV on stdout."""
    if fmt_name == "csv":
        df.to_csv(sys.stdout, index=False)
    elif fmt_name == "json":
        sys.stdout.write(json.dumps(records(df.to_dict("records")), indent=2, default=str) + "\n")
    else:
        table_rows(console, df.to_dict("records"), title)


def table_rows(console: Console, rows: list[dict[str, Any]], title: str, columns: list[str] | None = None) -> None:
    if not rows:
        console.print(f"{title}: nothing to show")
        return
    table = Table(title=title)
    cols = columns or list(rows[0])
    for c in cols:
        table.add_column(c)
    for r in rows:
        table.add_row(*(fmt(r.get(c)) if c != "job_key" else str(r[c])[:12] for c in cols))
    console.print(table)


def _ci(lo: Any, hi: Any) -> str:
    return "-" if lo is None or hi is None or math.isnan(lo) or math.isnan(hi) else f"[{lo:.4g}, {hi:.4g}]"


def _flag(warnings: list[str] | None) -> Text:
    """A marker next to a figure whose run carries board-state warnings (listed under the table)."""
    return Text(f" ![{len(warnings)}]", style="red") if warnings else Text("")


def print_best(console: Console, rows: list[dict[str, Any]], confidence: float, metric: str = "steady") -> None:
    if not rows:
        console.print("no ok results to rank (only jobs whose outputs passed the check compete)")
        return
    pct = f"{confidence * 100:.0f}% CI"
    label = f"median ({pct})" if metric == "steady" else "first inference"
    title = "fastest correct configuration per (model, board)" + (", by first inference" if metric == "first" else "")
    table = Table(title=title)
    for c in ("model", "board", "unit", "best", label, "peak MB", "runner-up", label + " ", "×slowest", "×ORT"):
        table.add_column(c)
    for r in rows:
        unit = r["unit"] + (" emulated" if r["emulated"] else "")
        table.add_row(
            r["model"],
            r["board_key"],
            unit,
            Text.assemble(("? ", "yellow") if r["uncertain"] else "", r["best"]),
            Text.assemble(f"{r['best_median']:.4g} {_ci(r['best_lo'], r['best_hi'])}", _flag(r.get("best_warnings"))),
            fmt(r.get("best_peak_mem_mb")),
            r["runner_up"] or "-",
            "-"
            if r["runner_up"] is None
            else Text.assemble(
                f"{r['runner_up_median']:.4g} {_ci(r['runner_up_lo'], r['runner_up_hi'])}",
                _flag(r.get("runner_up_warnings")),
            ),
            fmt(r["speedup_vs_slowest"], 3),
            fmt(r["speedup_vs_onnxruntime"], 3),
        )
    console.print(table)
    for r in rows:
        style = "yellow" if r["uncertain"] else "green"
        head = f"{r['model']} on {r['board_key']} ({r['unit']}):"
        console.print(Text.assemble((head, style), " ", r["verdict"]), highlight=False)
        for who in ("best", "runner_up"):
            for w in r.get(f"{who}_warnings") or []:
                name = r["best"] if who == "best" else r["runner_up"]
                console.print(Text.assemble("  ", ("warning", "red"), f" ({name}): {w}"), highlight=False)
    if any(r["emulated"] for r in rows):
        console.print("emulated timings measure the emulator, not the hardware: they are ranked only among themselves")


def print_compare(console: Console, result: Comparison, show_all: bool) -> None:
    rows = result.rows if show_all else [r for r in result.rows if r["verdict"] != "same"]
    if rows:
        table = Table(title=f"compare {result.sweep_a} (A) -> {result.sweep_b} (B)")
        for c in ("job", "model", "board", "executor", "opt", "pipeline", "A", "B", "B/A", "95% CI", "p", "verdict"):
            table.add_column(c)
        for r in rows:
            style = _VERDICT_STYLE.get(r["verdict"], "")
            a, b = (
                Text.assemble(fmt(r[f"median_{x}"]), _flag(r.get(f"warnings_{x}")))
                if r[f"status_{x}"] == "ok"
                else r[f"status_{x}"]
                for x in ("a", "b")
            )
            table.add_row(
                r["job_key"][:12],
                r["model"],
                r["board_key"],
                r["executor"],
                str(r["opt_level"]),
                r["pipeline"],
                a,
                b,
                fmt(r["ratio"], 3),
                _ci(r["ratio_lo"], r["ratio_hi"]),
                fmt(r["p_value"], 2),
                Text(r["verdict"], style=style),
            )
        console.print(table)
    elif result.rows:
        console.print("no job changed beyond the threshold and the noise (--all lists them all)")
    for r in rows:
        for side in ("a", "b"):
            for w in r.get(f"warnings_{side}") or []:
                line = Text.assemble("  ", ("warning", "red"), f" {r['job_key'][:12]} {side.upper()}: {w}")
                console.print(line, highlight=False)
    console.print(result.summary(), highlight=False)


def print_regressions(console: Console, rows: list[dict[str, Any]], method: str) -> None:
    if not rows:
        console.print(f"no regressions ({method}): every latest result is within its history's noise")
        return
    cols = [
        "job_key",
        "model",
        "board_key",
        "executor",
        "opt_level",
        "pipeline",
        "unit",
        "latest",
        "baseline",
        "ratio",
        "score",
        "history",
        "sweep_id",
        "tvm_version",
        "baseline_tvm_version",
        "regressed",
        "note",
    ]
    table_rows(console, rows, f"results slower than their history ({method})", cols)


def print_kernels(console: Console, kernels: list[tuple[str, float]] | None, top: int) -> None:
    if kernels is None:
        console.print("  kernel profile: not recorded for this run")
        return
    total = sum(ms for _, ms in kernels) or 1.0
    console.print(f"  top {min(top, len(kernels))} of {len(kernels)} kernels by time:")
    for name, ms in kernels[:top]:
        console.print(f"    {ms:10.4f} ms  {ms / total * 100:5.1f}%  {name}", highlight=False)
