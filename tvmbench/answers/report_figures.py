"""The HTML report's figures (matplotlib, Agg): latency per configuration, latency against trials, across
TVM releases, and failures by kind. Each takes one (model, board key, unit, emulated) group of result rows.
"""

from __future__ import annotations

import io
import warnings
from collections import Counter
from typing import TYPE_CHECKING

from tvmbench.answers import ranking
from tvmbench.answers import tuning as tuning_answers
from tvmbench.answers.layouts import layout_in_executor
from tvmbench.answers.releases import version_key
from tvmbench.answers.stats import median_ci

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure whose texts are shown as written: matplotlib reads text between two ``$`` as math, so a model
    named "cost $5 and $x" was titled "cost 5andx" in italics (and an unbalanced "$x^{" could fail to draw)."""
    import matplotlib
    from matplotlib.figure import Figure

    # Every Text reads it when made (tick labels at drawing time): set before both. No figure here means math.
    matplotlib.rcParams["text.parse_math"] = False
    return Figure(figsize=figsize)


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (100 dpi, trimmed)."""
    # A model named in CJK or emoji draws its missing glyphs as boxes, and matplotlib said so as a
    # UserWarning per glyph on the user's terminal: the plot is still drawn, so the warning says nothing to
    # act on. A filter, not catch_warnings: that one is not thread safe (the dashboard draws in threads).
    warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def latency_figure(group: pd.DataFrame, model: str, board_key: str, unit: str, emulated: bool) -> Figure:
    """Grouped bars: executor (and layout) on x, one bar per opt_level/pipeline, median with its 95% bootstrap CI."""
    import numpy as np

    group = layout_in_executor(group)
    group = group.sort_values(["executor", "opt_level", "pipeline"])
    executors = list(dict.fromkeys(group["executor"]))
    variants = list(dict.fromkeys(zip(group["opt_level"], group["pipeline"], strict=True)))
    multi_pipeline = len({p for _, p in variants}) > 1
    fig = new_figure(figsize=(max(6.0, 1.6 * len(executors) * max(1, len(variants)) ** 0.5 + 3), 4.2))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(variants))
    x = np.arange(len(executors))
    for i, (opt, pipe) in enumerate(variants):
        heights, lo_err, hi_err, xs = [], [], [], []
        for j, ex in enumerate(executors):
            sel = group[(group["executor"] == ex) & (group["opt_level"] == opt) & (group["pipeline"] == pipe)]
            if sel.empty:
                continue
            row = sel.iloc[0]
            ci = median_ci(row["samples"])
            med = float(row["median"])
            xs.append(x[j] + (i - (len(variants) - 1) / 2) * width)
            heights.append(med)
            lo_err.append(max(0.0, med - ci.lo) if ci.lo == ci.lo else 0.0)
            hi_err.append(max(0.0, ci.hi - med) if ci.hi == ci.hi else 0.0)
        label = f"opt_level {opt}" + (f", {pipe}" if multi_pipeline else "")
        ax.bar(xs, heights, width, yerr=[lo_err, hi_err], capsize=4, label=label)
    ax.set_xticks(x, executors)
    ax.set_xlabel("executor\n(bars: median of the samples; whiskers: 95% bootstrap confidence interval)")
    ax.set_ylabel(f"median latency ({unit})" + (" — emulated" if emulated else ""))
    title = f"{model} on {board_key}" + ("\nemulated board: emulator time, not hardware time" if emulated else "")
    ax.set_title(title)
    ax.legend(title="build", fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylim(bottom=0)
    return fig


def trials_figure(
    group: pd.DataFrame, model: str, board_key: str, unit: str, emulated: bool, onnxruntime: float | None
) -> Figure:
    """Latency against MetaSchedule trials: one line per configuration, 0 trials = untuned, ORT dashed."""
    from tvmbench.answers.tuning import trials_of

    fig = new_figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    group = layout_in_executor(group)
    work = group.assign(_trials=[trials_of(r) for r in group.to_dict("records")])
    for (executor, opt, pipe), line in work.groupby(["executor", "opt_level", "pipeline"], sort=True):
        line = line.sort_values("_trials")
        xs, meds, lo_err, hi_err = [], [], [], []
        for row in line.to_dict("records"):
            ci = median_ci(row["samples"])
            med = float(row["median"])
            xs.append(row["_trials"])
            meds.append(med)
            lo_err.append(max(0.0, med - ci.lo) if ci.lo == ci.lo else 0.0)
            hi_err.append(max(0.0, ci.hi - med) if ci.hi == ci.hi else 0.0)
        ax.errorbar(xs, meds, yerr=[lo_err, hi_err], marker="o", capsize=4, label=f"{executor} O{opt} {pipe}")
    if onnxruntime is not None:
        ax.axhline(onnxruntime, linestyle="--", color="#555", label=" / ".join(ranking.BASELINE_EXECUTORS))
    ax.set_xlabel(
        "MetaSchedule trials (the tuning budget, an auto budget's trials run; 0 = untuned)\n"
        "(points: median; whiskers: 95% bootstrap CI)"
    )
    ax.set_ylabel(f"median latency ({unit})" + (" — emulated" if emulated else ""))
    ax.set_title(f"{model} on {board_key}: latency against tuning trials")
    ax.set_yscale("log")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def releases_figure(group: pd.DataFrame, model: str, board_key: str, unit: str, emulated: bool) -> Figure:
    """Median latency per TVM release (oldest left): one line per configuration, whiskers the 95% CI."""
    order = sorted(set(group["tvm_version"]), key=version_key)
    position = {v: i for i, v in enumerate(order)}
    fig = new_figure(figsize=(max(6.5, 1.4 * len(order) + 3), 4.2))
    ax = fig.add_subplot()
    group = layout_in_executor(group)
    work = group.assign(_budget=[int(b) if tuning_answers.is_tuned(b) else 0 for b in group["tuning_budget"]])
    for (executor, opt, pipe, budget), line in work.groupby(["executor", "opt_level", "pipeline", "_budget"]):
        xs, meds, lo_err, hi_err = [], [], [], []
        for row in sorted(line.to_dict("records"), key=lambda r: version_key(r["tvm_version"])):
            ci = median_ci(row["samples"])
            med = float(row["median"])
            xs.append(position[row["tvm_version"]])
            meds.append(med)
            lo_err.append(max(0.0, med - ci.lo) if ci.lo == ci.lo else 0.0)
            hi_err.append(max(0.0, ci.hi - med) if ci.hi == ci.hi else 0.0)
        label = f"{executor} O{opt} {pipe}" + (f" tuned {budget}" if budget else "")
        ax.errorbar(xs, meds, yerr=[lo_err, hi_err], marker="o", capsize=4, label=label)
    ax.set_xticks(range(len(order)), order)
    ax.set_xlabel("TVM release (oldest left)\n(points: median; whiskers: 95% bootstrap CI)")
    ax.set_ylabel(f"median latency ({unit})" + (" — emulated" if emulated else ""))
    ax.set_title(f"{model} on {board_key}: latency across TVM releases")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def failures_figure(statuses: Counter) -> Figure:
    """Horizontal bars: jobs per failure kind."""
    kinds = sorted(statuses, key=lambda k: (-statuses[k], k))
    fig = new_figure(figsize=(6.5, 0.5 * len(kinds) + 1.5))
    ax = fig.add_subplot()
    ax.barh(kinds, [statuses[k] for k in kinds], color="#c44")
    ax.invert_yaxis()
    ax.set_xlabel("jobs")
    ax.set_ylabel("failure kind")
    ax.set_title("failed jobs by kind")
    ax.xaxis.get_major_locator().set_params(integer=True)
    return fig
