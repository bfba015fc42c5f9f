"""Which data layout won, per (model, board): the layout axis' answer in `results best`.

For each ranking of `results best` (model, board key, unit, emulated) whose configurations span more
than one layout, the fastest configuration of each layout is put side by side: its median with the
bootstrap CI, and its ratio to the winning layout's (with the ratio's CI). The winner is the layout of the
fastest; it is "uncertain" when the two fastest layouts' median CIs overlap (the rule `results best` uses
for the winner itself), and there is no winner when both layouts built the same program (a model without
a conv2d: ConvertLayout changed nothing, one program measured once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tvmbench.answers.stats import median_ci, ratio_ci

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console


def layout_in_executor(group: pd.DataFrame) -> pd.DataFrame:
    """A layout axis' rows with their layout in the executor's name ("vm-bytecode NHWC"), so each layout is
    a bar or line of its own; rows without a layout (no axis, the baseline) keep theirs."""
    if "layout" not in group or not group["layout"].notna().any():
        return group
    names = [
        e + (f" {x}" if isinstance(x, str) else "") for e, x in zip(group["executor"], group["layout"], strict=True)
    ]
    return group.assign(executor=names)


def fastest_per_layout(contenders: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """The fastest row of each layout in each ranking group ``keys`` (``contenders`` sorted by median);
    rows without a layout (no axis) are left out."""
    if "layout" not in contenders:
        return contenders.iloc[0:0]
    with_layout = contenders[contenders["layout"].notna()]
    return with_layout.groupby([*keys, "layout"], sort=False).head(1)


def side_by_side(
    group: pd.DataFrame,
    samples: dict[int, list[float]],
    name: Callable[[Any], str],
    *,
    confidence: float = 0.95,
    seed: int,
) -> dict[str, Any] | None:
    """The layouts of one ranking group (its ``fastest_per_layout`` rows), fastest first, and which won;
    None when the group has fewer than two layouts. ``samples``: run id -> samples of those rows."""
    if group.empty or group["layout"].nunique() < 2:
        return None
    rows = sorted(group.to_dict("records"), key=lambda r: (float(r["median"]), r["job_key"]))
    best = rows[0]
    best_samples = samples.get(_run(best))
    entries = []
    for r in rows:
        mine = samples.get(_run(r))
        ci = median_ci(mine, confidence, seed=seed)
        # The winner against itself is 1 by definition: no interval to draw.
        ratio = ratio_ci(best_samples, mine, confidence, seed=seed) if r is not best else None
        entries.append(
            {
                "layout": r["layout"],
                "config": name(r),
                "job_key": r["job_key"],
                "median": float(r["median"]),
                "median_lo": ci.lo,
                "median_hi": ci.hi,
                "ratio_to_best": float(r["median"]) / float(best["median"]) if best["median"] else None,
                "ratio_lo": ratio.lo if ratio else None,
                "ratio_hi": ratio.hi if ratio else None,
                "fingerprint": r.get("fingerprint"),
            }
        )
    first, second = entries[0], entries[1]
    same_program = bool(first["fingerprint"]) and first["fingerprint"] == second["fingerprint"]
    overlap = median_ci(best_samples, confidence, seed=seed).overlaps(
        median_ci(samples.get(_run(rows[1])), confidence, seed=seed)
    )
    unit = best.get("unit") or "ms"
    if same_program:
        verdict = (
            f"no winner: {first['layout']} and {second['layout']} built the same program "
            "(no conv2d was converted), measured once"
        )
    elif overlap:
        verdict = (
            f"uncertain: {first['layout']} ({first['median']:.4g} {unit}) and {second['layout']} "
            f"({second['median']:.4g} {unit}) overlap at {confidence:.0%}"
        )
    else:
        verdict = (
            f"{first['layout']} won: {first['config']} {first['median']:.4g} {unit}; the fastest {second['layout']} "
            f"({second['config']}) is {second['ratio_to_best']:.3g} times slower"
        )
    for e in entries:
        del e["fingerprint"]
    return {
        "winner": None if same_program else first["layout"],
        "uncertain": bool(overlap or same_program),
        "verdict": verdict,
        "entries": entries,
    }


def _run(row: dict[str, Any]) -> int | None:
    run = row.get("run_id")
    return None if run is None or run != run else int(run)


def print_layouts(console: Console, rows: list[dict[str, Any]], label: str) -> None:
    """For `results best`: per ranking whose configurations span layouts, the layouts side by side."""
    from rich.text import Text

    from tvmbench.answers import columns, table

    for r in rows:
        layouts = r.get("layouts")
        if not layouts:
            continue
        title = f"{r['model']} on {r['board_key']}: fastest per layout ({r['unit']})"
        table.render(console, columns.layouts(label), layouts["entries"], title)
        style = "yellow" if layouts["uncertain"] else "green"
        head = f"{r['model']} on {r['board_key']}:"
        console.print(Text.assemble((head, style), " ", layouts["verdict"]), highlight=False)
