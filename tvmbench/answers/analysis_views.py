"""Terminal and file output of the analysis commands (rankings, comparisons, regressions, frames)."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from tvmbench.answers import columns as cols
from tvmbench.answers import table

if TYPE_CHECKING:
    import pandas as pd

    from tvmbench.answers.compare import Comparison
    from tvmbench.answers.releases import Releases


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


def releases_json(result: Releases) -> dict[str, Any]:
    """What `results releases --json` prints (NaN as null): the releases in order, the summary, every row."""
    return {
        "sweep": result.sweep,
        "releases": result.releases,
        "configurations": result.configurations,
        "summary": result.summary(),
        "failed": result.failed,
        "rows": records(result.rows),
    }


def write_frame(console: Console, df: pd.DataFrame, title: str, fmt_name: str) -> None:
    """A DataFrame as a table, JSON records or CSV on stdout."""
    if fmt_name == "csv":
        from pandas.api.types import is_string_dtype

        # Text cells only: numeric columns stay numbers (-1.5), user text never runs as a formula.
        out = df.copy()
        for name in out.columns:
            if is_string_dtype(out[name].dtype):  # str (pandas 3) or object
                out[name] = out[name].map(lambda v: table.spreadsheet_text(v) if isinstance(v, str) else v)
        out.to_csv(sys.stdout, index=False)
    elif fmt_name == "json":
        sys.stdout.write(json.dumps(records(df.to_dict("records")), indent=2, default=str) + "\n")
    else:
        table_rows(console, df.to_dict("records"), title)


def table_rows(
    console: Console,
    rows: list[dict[str, Any]],
    title: str,
    columns: list[str] | None = None,
    priority: dict[str, int] | None = None,
) -> None:
    """Rows whose keys vary (frames, regressions, history) as a table of the ``columns`` keys (default: all).

    Args:
        priority: column key -> priority, over answers.columns.GENERIC_PRIORITY.
    """
    if not rows:
        console.print(f"{title}: nothing to show")
        return
    keys = columns or list(rows[0])
    table.render(console, cols.generic(keys, rows, priority), rows, title)


def print_best(console: Console, rows: list[dict[str, Any]], confidence: float, metric: str = "steady") -> None:
    if not rows:
        console.print("no ok results to rank (only jobs whose outputs passed the check compete)")
        return
    label = f"{confidence * 100:.0f}% CI"
    title = "fastest correct configuration per (model, board)" + (", by first inference" if metric == "first" else "")
    table.render(console, cols.best(label, metric), rows, title)
    for r in rows:
        style = "yellow" if r["uncertain"] else "green"
        head = f"{r['model']} on {r['board_key']}" + (f" ({r['unit']}):" if r["unit"] else ":")
        console.print(Text.assemble((head, style), " ", r["verdict"]), highlight=False, soft_wrap=_piped(console))
        for who in ("best", "runner_up"):
            for w in r.get(f"{who}_warnings") or []:
                name = r["best"] if who == "best" else r["runner_up"]
                console.print(
                    Text.assemble("  ", ("warning", "red"), f" ({name}): {w}"),
                    highlight=False,
                    soft_wrap=_piped(console),
                )
    if any(r.get("speedup_vs_onnxruntime") is not None for r in rows):
        console.print(f"{cols.ORT_HEADER}: ONNX Runtime's time over this one's (> 1: faster than ONNX Runtime)")
    if any(r["emulated"] for r in rows):
        console.print("emulated timings measure the emulator, not the hardware: they are ranked only among themselves")


def _piped(console: Console) -> bool:
    """Whether a sentence goes out as one line: in a pipe, the 200-column console cut a long one in two (a
    compare summary's "... on 2" / "cores: ..."), which a grep then missed; a terminal wraps it at its width."""
    return not console.is_terminal


def print_compare(console: Console, result: Comparison, show_all: bool) -> None:
    rows = result.rows if show_all else [r for r in result.rows if r["verdict"] != "same"]
    shown = None
    if rows:
        shown = table.render(console, cols.COMPARE, rows, f"compare {result.sweep_a} (A) -> {result.sweep_b} (B)")
    elif result.rows:
        console.print("no job changed beyond the threshold and the noise (--all lists them all)")

    def job(key: str) -> str:
        return shown.id("job", key) if shown else table.short_id(key)

    for r in rows:
        for side in ("a", "b"):
            for w in r.get(f"warnings_{side}") or []:
                line = Text.assemble("  ", ("warning", "red"), f" {job(r['job_key'])} {side.upper()}: {w}")
                console.print(line, highlight=False, soft_wrap=_piped(console))
    console.print(result.summary(), highlight=False, soft_wrap=_piped(console))


def print_regressions(
    console: Console,
    rows: list[dict[str, Any]],
    method: str,
    unjudged: int = 0,
    judged: int | None = None,
    needed: int = 3,
) -> None:
    """The regressions table; ``unjudged``: latest results with too little history to judge (said, so that
    "no regressions" is never claimed of results nobody could judge); ``judged``: how many were judged;
    ``needed``: the earlier results a judgement needs (Params.min_history)."""
    if unjudged:
        console.print(
            f"not enough history to judge {unjudged} latest result(s) (each needs {needed} earlier ok "
            "results of the same configuration; --all lists them)",
            soft_wrap=_piped(console),
        )
    if not rows:
        if judged == 0:
            console.print(f"no regressions found ({method}), and no result had enough history to be judged")
        else:
            within = f"every one of the {judged} judged" if judged is not None else "every"
            console.print(f"no regressions ({method}): {within} latest result(s) within its history's noise")
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
        "release_step",
        "regressed",
        "note",
    ]
    shown = [{**r, "regressed": _regressed_cell(r)} for r in rows]  # "-": not judged, not "no"
    table_rows(console, shown, f"results slower than their history ({method})", cols)


def _regressed_cell(r: dict[str, Any]) -> str:
    return "-" if r.get("regressed") is None or r.get("baseline") is None else "yes" if r["regressed"] else "no"


def print_releases(console: Console, result: Releases) -> None:
    """`results releases`: one table (a configuration's releases together, oldest first), a line per step
    between consecutive releases that is beyond the noise, and the summary. One line when there is one release."""
    if len(result.releases) < 2:
        console.print(result.summary(), highlight=False, soft_wrap=True)
        return
    shown, last = [], None
    for r in result.rows:
        row = dict(r)
        ident = (r["model"], r["target"], r["board_key"], r["config"])
        if ident == last and not table.current.tsv:  # TSV keeps every cell: a spreadsheet sorts rows
            row.update(model="", config="", board_key="")
        last = ident
        shown.append(row)
    table.render(console, cols.RELEASES, shown, "TVM releases per configuration (oldest first)")
    if table.current.tsv:  # the rows alone on stdout, for a spreadsheet; what they say to stderr
        Console(stderr=True).print(result.summary(), highlight=False, soft_wrap=True)
        return
    for r in result.steps():
        what = f"{r['model']} {r['config']} on {r['board_key']}: TVM {r['previous']} -> {r['release']}"
        if r["ratio"] is not None:
            how = (
                f"{r['verdict']}, {r['ratio']:.3f}x the time (95% CI {cols.ci(r['ratio_lo'], r['ratio_hi'])}, "
                f"p {fmt(r['p_value'], 2)})"
            )
        else:
            how = f"{r['verdict']} ({r['previous']}: {r['previous_status']}, {r['release']}: {r['status']})"
        changes = f"; kernels {r['kernels_change']}; program {cols._program_change(r)}; passes: {r['passes'] or '-'}"
        style = cols._VERDICT_STYLE.get(r["verdict"], "")
        console.print(Text.assemble((what, style), f": {how}{changes}"), highlight=False, soft_wrap=True)
    console.print(result.summary(), highlight=False, soft_wrap=True)


def print_kernels(
    console: Console, kernels: list[tuple[str, float]] | None, top: int, alone: dict[str, float] | None = None
) -> None:
    """The run's top kernels; for a tuned build, each tuned one beside its time alone (``why.kernels_alone``)."""
    if kernels is None:
        console.print("  kernel profile: not recorded for this run")
        return
    alone = alone or {}
    total = sum(ms for _, ms in kernels) or 1.0
    console.print(f"  top {min(top, len(kernels))} of {len(kernels)} kernels by time:")
    for name, ms in kernels[:top]:
        solo = alone.get(name)
        beside = f"  (tuned alone {solo:.4f} ms, {ms / solo:.2f}x in the program)" if solo else ""
        console.print(
            f"    {ms:10.4f} ms  {ms / total * 100:5.1f}%  {name}{beside}", highlight=False, soft_wrap=_piped(console)
        )
    both = [(ms, alone[name]) for name, ms in kernels if alone.get(name)]
    if both:
        in_program, by_search = sum(ms for ms, _ in both), sum(solo for _, solo in both)
        kernels_word = "tuned kernels" if len(both) > 1 else "tuned kernel"
        console.print(
            f"  {len(both)} {kernels_word}: {in_program:.3f} ms in the program (profiled, each call through a VM "
            f"instrument), {by_search:.3f} ms as the search timed them alone and hot in cache (the tuning "
            f"curve's estimate): {in_program / by_search:.2f}x",
            highlight=False,
            soft_wrap=_piped(console),
        )
