"""The columns of every CLI table, declared once (tvmbench/answers/table.py lays them out and prints them).

Priority 0 columns answer the table's question and always show; 1, 2, ... are dropped in that order
(rightmost first among equals) when the terminal is narrower than the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import Any

from tvmbench.answers.table import Column, fmt

_STATUS_STYLE = {"ok": "green", "pending": "yellow", "pending-device": "yellow", "new": "yellow"}
_VERDICT_STYLE = {"regression": "red", "broken": "red", "improvement": "green", "fixed": "green",
                  "undecided (too few samples)": "yellow"}  # fmt: skip


def status_style(key: str) -> Any:
    """A cell style from a status: green ok, yellow waiting, red anything else."""
    return lambda r: _STATUS_STYLE.get(r.get(key), "red")


def ci(lo: Any, hi: Any) -> str:
    """An interval '[lo, hi]' at 4 significant digits, '-' when unknown."""
    missing = [v for v in (lo, hi) if v is None or (isinstance(v, float) and math.isnan(v))]
    return "-" if missing else f"[{lo:.4g}, {hi:.4g}]"


def flag(warnings: list[str] | None) -> str:
    """A marker next to a figure whose run carries board-state warnings (listed under the table)."""
    return f" ![{len(warnings)}]" if warnings else ""


def peak(r: dict[str, Any]) -> str:
    """Peak memory in MB: board-measured (session VmHWM), or a microcontroller's static RAM."""
    value = r.get("peak_mem_mb")
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 1 else f"{value:.1f}"


def _executor(r: dict[str, Any]) -> str:
    return r["executor"] + (f" ({r['kernels_path']})" if r.get("kernels_path") else "")


def _median(r: dict[str, Any]) -> str:
    if r.get("unit", "ms") != "ms" and r.get("median") is not None:  # emulated MCUs count instructions
        text = f"{r['median']:.0f} {r['unit']}"
    else:
        text = fmt(r["median_ms"]) + (" (emulated)" if r["emulated"] and r["median_ms"] is not None else "")
    return text + flag(r.get("warnings"))


def _program(r: dict[str, Any]) -> str:
    return (r["fingerprint"] or "-")[:8] + (f" = {r['equivalent_to'][:8]}" if r["equivalent_to"] else "")


# `results list`, `sweep run`: one row per job (answers.query.results).
RESULTS = [
    Column("job", "job", "job_key", priority=0, ident=True),
    Column("model", "model", "model", priority=0, wrap=True),
    Column("target", "target", "target", priority=4),
    Column("board", "board", "board", priority=5, text=lambda r: r["board"] or "-"),
    Column("executor", "executor", "executor", priority=0, wrap=True, text=_executor),
    Column("opt", "opt", "opt_level", priority=0, right=True),
    Column("pipeline", "pipeline", "pipeline", priority=3),
    Column("status", "status", "status", priority=0, style=status_style("status")),
    Column("median", "median ms", "median_ms", priority=0, right=True, wrap=True, text=_median),
    Column("std", "std ms", "std_ms", priority=1, right=True),
    Column("peak", "peak MB", "peak_mem_mb", priority=1, right=True, text=peak),
    Column("err", "max abs err", "max_abs_err", priority=2, right=True),
    Column("compile", "compile s", "compile_s", priority=6, right=True),
    Column("kernels", "kernels", "kernel_count", priority=6, right=True),
    Column("program", "program", "fingerprint", priority=7, wrap=True, text=_program),
]


def spans_layouts(rows: list[dict[str, Any]]) -> bool:
    """Whether rows of a layout axis span more than one layout (no layout, ONNX Runtime's, counts as one)."""
    return any(r.get("layout") for r in rows) and len({r.get("layout") for r in rows}) > 1


LAYOUT = Column("layout", "layout", "layout", priority=0)


def results(rows: list[dict[str, Any]]) -> list[Column]:
    """RESULTS, with the data layout, the TVM release and the tuning after the pipeline when the rows span more
    than one (a layout axis, a tvm axis, a tuning axis)."""
    extra = [LAYOUT] if spans_layouts(rows) else []
    if len({r.get("tvm_version") for r in rows}) > 1:
        extra.append(Column("tvm", "tvm", "tvm_version", priority=0))
    if len({r.get("tuning_label", "untuned") for r in rows}) > 1:  # untuned, tuned 8, tuned auto: three rows
        extra.append(Column("tuning", "tuning", "tuning_label", priority=0))
    if not extra:
        return RESULTS
    at = next(i for i, c in enumerate(RESULTS) if c.key == "pipeline") + 1
    return [*RESULTS[:at], *extra, *RESULTS[at:]]


def _tuning_cell(r: dict[str, Any]) -> str:
    if r.get("tuning") == "auto":
        return "auto"
    return f"{r['tuning']} trials" if r.get("tuning") else "untuned"


def plan(tuned: bool, releases: bool = False, layouts: bool = False) -> list[Column]:
    """`sweep plan`: one row per planned job (orchestrator.plan.plan_rows); ``releases``: the sweep has a tvm
    axis; ``layouts``: a layout axis (jobs without a layout, ONNX Runtime's, show "-")."""
    return [
        Column("job", "job", "job_key", priority=0, ident=True),
        Column("model", "model", "model", priority=0, wrap=True),
        Column("target", "target", "target", priority=3),
        Column("board_key", "board key", "board_key", priority=2),
        Column("executor", "executor", "executor", priority=0, wrap=True, text=_executor),
        Column("opt", "opt", "opt_level", priority=0, right=True),
        Column("pipeline", "pipeline", "pipeline", priority=1),
        *([LAYOUT] if layouts else []),
        *([Column("tuning", "tuning", "tuning", priority=1, text=_tuning_cell)] if tuned else []),
        *([Column("tvm", "tvm", "tvm_version", priority=0)] if releases else []),
        Column("artifact", "artifact", "built", priority=1, text=lambda r: "cached" if r["built"] else "to build"),
        Column("status", "status", "status", priority=0, style=status_style("status")),
    ]


def _mflop(t: dict[str, Any]) -> str:
    """A task's work in MFLOP to 3 significant digits: a tiny task's 0.0042 is not 0.00."""
    return "-" if t.get("flops") is None else f"{t['flops'] / 1e6:.3g}"


PLAN_TASKS = [
    Column("task", "task", "name", priority=0, wrap=True),
    Column("weight", "weight", "weight", priority=0, right=True),
    Column("mflop", "MFLOP", "flops", priority=1, right=True, text=_mflop),
    Column("trials", "trials", "trials", priority=0, right=True),
    Column("stored", "stored", "covered", priority=0, right=True),
]


def _when(key: str) -> Any:
    """An ISO time cell as 'YYYY-MM-DD HH:MM:SS' (UTC, as stored)."""
    return lambda r: str(r[key])[:19].replace("T", " ") if r.get(key) else "-"


# `results sweeps` (answers.query.sweeps_overview).
_SWEEP_STYLES = {"complete": "green", "interrupted": "yellow"}  # interrupted: its driver is gone
SWEEPS = [
    Column("sweep", "sweep", "sweep_id", priority=0, ident=True),
    Column("name", "name", "name", priority=0, wrap=True),
    Column("label", "label", "label", priority=2, wrap=True, optional=True),
    Column("status", "status", "status", priority=0, style=lambda r: _SWEEP_STYLES.get(r["status"])),
    Column("jobs", "jobs", "jobs", priority=0, right=True),
    Column("final", "final", "final", priority=3, right=True),
    Column("ok", "ok", "ok", priority=0, right=True),
    Column("failed", "failed", "failed", priority=0, right=True),
    Column("pending", "pending", "pending", priority=1, right=True),
    Column("trials", "tuning trials", "tuning_trials", priority=4, right=True, optional=True,
           text=lambda r: f"{r['tuning_trials']}/{r['tuning_budget']}" if r.get("tuning_budget") else "-"),
    Column("created", "created (UTC)", "created_at", priority=1, text=_when("created_at")),
    Column("tvm", "TVM", "tvm_version", priority=5),
    Column("source", "source", "source", priority=6, wrap=True),
]  # fmt: skip

# `sweep status` (orchestrator.submit.sweep_status): one row.
SWEEP_STATUS = [
    Column("sweep", "sweep", "sweep_id", priority=0, ident=True),
    Column("name", "name", "name", priority=1, wrap=True),
    Column("state", "state", "state", priority=0),
    Column("jobs", "jobs", "jobs", priority=0, right=True),
    Column("final", "final", "final", priority=2, right=True),
    Column("ok", "ok", "ok", priority=0, right=True),
    Column("failed", "failed", "failed", priority=0, right=True),
    Column("pending", "pending", "pending", priority=0, right=True),
    Column("submission", "Ray job", "submission_id", priority=3, optional=True),
    Column("ray_status", "Ray status", "ray_status", priority=1, optional=True),
    Column("ray_message", "Ray message", "ray_message", priority=4, wrap=True, optional=True),
]

# `farm list` (orchestrator.farm.board_list).
BOARDS = [
    Column("board", "board", "board", priority=0),
    Column("key", "key", "key", priority=2),
    Column("free", "free in key", "free_in_key", priority=5, right=True),
    Column("pending", "pending in key", "pending_in_key", priority=5, right=True),
    Column("state", "state", "state", priority=0, style=lambda r: "green" if r.get("state") == "free" else None),
    Column("agent", "agent", "agent", priority=3),
    Column("arch", "arch", "arch", priority=1),
    Column("emulated", "emulated", "emulated", priority=4),
    Column("cpu", "cpu", "cpu", priority=2, wrap=True),
    Column("cores", "cores", "cores", priority=1, right=True),
    Column("threads", "TVM threads", "threads", priority=4, right=True),
    Column("mem", "mem MB", "mem_mb", priority=3, right=True),
    Column("os", "os", "os", priority=6, wrap=True),
    Column("tvm", "TVM", "tvm", priority=5),
    Column("failures", "failures in a row", "failures_in_a_row", priority=1, right=True),
]

# `targets list` (workers.targets.PRESETS).
TARGETS = [
    Column("preset", "preset", "preset", priority=0),
    Column("board_key", "board key", "board_key", priority=1),
    Column("arch", "arch", "arch", priority=0),
    Column("emulated", "emulated", "emulated", priority=1),
    Column("tvm_target", "TVM target", "tvm_target", priority=2, wrap=True),
    Column("cross_compiler", "cross compiler", "cross_compiler", priority=3, wrap=True),
    Column("debian_packages", "Debian packages", "debian_packages", priority=4, wrap=True),
]

# `tuning list` (db.store.ResultStore.tuning_scopes; the target already shortened).
TUNING_SCOPES = [
    Column("board_key", "board key", "board_key", priority=0),
    Column("target", "target", "target", priority=0, wrap=True),
    Column("tvm", "TVM", "tvm_version", priority=1),
    Column("equality", "equality", "module_equality", priority=2),
    Column("workloads", "workloads", "workloads", priority=0, right=True),
    Column("records", "records", "records", priority=0, right=True),
]

# A configuration (answers.ranking.config_name) in a few letters, and what they mean.
CONFIG_WORDS = {"vm-bytecode": "VMb", "vm-compiled": "VMc", "aot-c": "AOT", "onnxruntime": "ORT",
                "per-target": "pt", "generic": "gen", "per-target-fold-bn": "pt-bn",
                "per-target-fold-bn-shuffle": "pt-bn-sh",
                "per-target-fold-bn-shuffle-concat": "pt-bn-sh-cc"}  # fmt: skip
CONFIG_LEGEND = [
    ("VMb", "vm-bytecode"),
    ("VMc", "vm-compiled"),
    ("AOT", "aot-c"),
    ("ORT", "onnxruntime"),
    ("pt", "per-target pipeline"),
    ("gen", "generic pipeline"),
    ("pt-bn", "per-target pipeline, batch norm folded into convolutions"),
    ("pt-bn-sh", "pt-bn, channel shuffles read by the convolution after them"),
    ("pt-bn-sh-cc", "pt-bn-sh, convolutions of a concatenation summed over its parts"),
]


def short_config(name: str | None, board_key: str | None = None) -> str:
    """'vm-compiled O2 per-target (host)' -> 'VMc O2 pt' (the target kept when it is not the board key)."""
    if not name:
        return "-"
    words = [CONFIG_WORDS.get(w, w) for w in name.split()]
    if board_key and words and words[-1] == f"({board_key})":
        words.pop()
    return " ".join(words)


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


#: The header of the ONNX Runtime column: its median over this configuration's, so > 1 means this one is
#: faster ("×ORT" read as "times ONNX Runtime's time", the README's "× ONNX Runtime", means the opposite).
ORT_HEADER = "ORT/this"


def best(label: str, metric: str = "steady") -> list[Column]:
    """`results best`: per (model, board) the winner, its median and interval, the runner-up, speed-ups.

    With ``metric="first"`` the figures are first inferences (one per run, no interval): the columns say so.
    """
    first = metric == "first"
    figure = "first inference ms" if first else "median"
    cells = [
        Column("model", "model", "model", priority=0, wrap=True),
        Column("board", "board", "board_key", priority=0),
        Column("unit", "unit", "unit", priority=3,
               text=lambda r: _text(r["unit"]) + (" emulated" if r["emulated"] else "")),
        Column("best", "best", "best", priority=0, wrap=True,
               text=lambda r: ("? " if r["uncertain"] else "") + (r["best"] or "no TVM config passed"),
               short=lambda r: ("? " if r["uncertain"] else "")
               + (short_config(r["best"], r["board_key"]) if r["best"] else "no TVM passed"),
               legend=CONFIG_LEGEND, style=lambda r: "yellow" if r["uncertain"] or not r["best"] else None),
        Column("first" if first else "median", figure, "best_value", priority=0, right=True,
               text=lambda r: fmt(_ranked(r, "best")) + flag(r.get("best_warnings"))),
        Column("ci", label, _span("best"), priority=0, text=lambda r: ci(r["best_lo"], r["best_hi"])),
        Column("ort", ORT_HEADER, "speedup_vs_onnxruntime", priority=0, right=True,
               text=lambda r: fmt(r["speedup_vs_onnxruntime"], 3)),
        Column("peak", "peak MB", "best_peak_mem_mb", priority=2, right=True,
               text=lambda r: fmt(r.get("best_peak_mem_mb"))),
        Column("runner_up", "runner-up", "runner_up", priority=1, wrap=True,
               text=lambda r: r["runner_up"] or "-",
               short=lambda r: short_config(r["runner_up"], r["board_key"]), legend=CONFIG_LEGEND),
        Column("runner_up_first" if first else "runner_up_median", f"runner-up {figure}", "runner_up_value",
               priority=1, right=True, text=lambda r: fmt(_ranked(r, "runner_up")) + flag(r.get("runner_up_warnings"))),
        Column("runner_up_ci", f"runner-up {label}", _span("runner_up"), priority=2,
               text=lambda r: ci(r["runner_up_lo"], r["runner_up_hi"])),
        Column("slowest", "×slowest", "speedup_vs_slowest", priority=2, right=True,
               text=lambda r: fmt(r["speedup_vs_slowest"], 3)),
    ]  # fmt: skip
    # A first inference is one value per run: no interval to show (the columns would be "-" throughout).
    return [c for c in cells if not (first and c.key in ("ci", "runner_up_ci"))]


def _ranked(row: dict[str, Any], who: str) -> Any:
    """The figure ``who`` ("best", "runner_up") was ranked by; a row made without ``*_value`` has its median."""
    return row.get(f"{who}_value", row.get(f"{who}_median"))


def _span(prefix: str) -> Callable[[dict[str, Any]], tuple[Any, Any]]:
    """An interval column's value, (lo, hi): --tsv writes both ends (it wrote the low end alone under "ci")."""
    return lambda r: (r[f"{prefix}_lo"], r[f"{prefix}_hi"])


def layouts(label: str) -> list[Column]:
    """`results best`, a layout axis: per layout its fastest configuration, median, interval, ×best."""
    return [
        Column("layout", "layout", "layout", priority=0),
        Column("config", "fastest configuration", "config", priority=0, wrap=True,
               short=lambda e: short_config(e["config"]), legend=CONFIG_LEGEND),
        Column("median", "median", "median", priority=0, right=True),
        Column("ci", label, _span("median"), priority=0, text=lambda e: ci(e["median_lo"], e["median_hi"])),
        Column("x_best", "×best", "ratio_to_best", priority=0, right=True, text=lambda e: fmt(e["ratio_to_best"], 3)),
        Column("ratio_ci", f"×best {label}", _span("ratio"), priority=1,
               text=lambda e: ci(e["ratio_lo"], e["ratio_hi"])),
    ]  # fmt: skip


def _side(r: dict[str, Any], x: str) -> str:
    return fmt(r[f"median_{x}"]) + flag(r.get(f"warnings_{x}")) if r[f"status_{x}"] == "ok" else r[f"status_{x}"]


# `results compare` (answers.compare.Comparison.rows).
COMPARE = [
    Column("job", "job", "job_key", priority=0, ident=True),
    Column("model", "model", "model", priority=0, wrap=True),
    Column("board", "board", "board_key", priority=2),
    Column("executor", "executor", "executor", priority=1),
    Column("opt", "opt", "opt_level", priority=1, right=True),
    Column("pipeline", "pipeline", "pipeline", priority=3),
    # Shown when a sweep tuned: "untuned", the budget or "auto" (answers.query.tuning_text).
    Column("tuning", "tuning", "tuning", priority=0, optional=True, text=lambda r: r.get("tuning") or "untuned"),
    Column("a", "A", "median_a", priority=0, right=True, text=lambda r: _side(r, "a")),
    Column("b", "B", "median_b", priority=0, right=True, text=lambda r: _side(r, "b")),
    Column("ratio", "B/A", "ratio", priority=0, right=True, text=lambda r: fmt(r["ratio"], 3)),
    Column("ci", "95% CI", _span("ratio"), priority=1, text=lambda r: ci(r["ratio_lo"], r["ratio_hi"])),
    Column("p", "p", "p_value", priority=2, right=True, text=lambda r: fmt(r["p_value"], 2)),
    Column("verdict", "verdict", "verdict", priority=0, style=lambda r: _VERDICT_STYLE.get(r["verdict"])),
]

# `results best`, tuned and untuned side by side (answers.tuning.side_by_side).
SIDE_BY_SIDE = [
    Column("config", "configuration", "config", priority=0, wrap=True),
    Column("budget", "budget", "tuning_budget", priority=0, right=True,
           text=lambda e: e.get("budget") or (str(e["tuning_budget"]) if e["tuning_budget"] else "untuned")),
    Column("stopped", "stopped by", "stopped_by", priority=2, optional=True),
    Column("trials", "trials", "tuning_trials", priority=2, right=True),
    Column("median", "median", "median", priority=0, right=True),
    Column("ort", ORT_HEADER, "speedup_vs_onnxruntime", priority=0, right=True,
           text=lambda e: fmt(e["speedup_vs_onnxruntime"], 3)),
    Column("untuned", "untuned", "untuned_median", priority=1, right=True),
    Column("x_untuned", "×untuned", "speedup_vs_untuned", priority=0, right=True,
           text=lambda e: fmt(e["speedup_vs_untuned"], 3)),
    Column("minutes", "tuning min", "tuning_minutes", priority=1, right=True,
           text=lambda e: fmt(e["tuning_minutes"], 3)),
    Column("per_x", "min per ×", "tuning_min_per_speedup", priority=1, right=True,
           text=lambda e: "reused" if e.get("records_from") else fmt(e["tuning_min_per_speedup"], 3)),
]  # fmt: skip


def _found(t: dict[str, Any]) -> str:
    found = t.get("records_found")
    return "yes" if found else "no" if found is not None else "-"


# `results show`: the tasks a tuned build tuned.
TUNED_TASKS = [
    Column("task", "task", "name", priority=0, wrap=True),
    Column("weight", "weight", "weight", priority=0, right=True),
    Column("mflop", "MFLOP", "flops", priority=1, right=True, text=_mflop),
    Column("trials", "trials", "trials", priority=0, right=True),
    Column("best_us", "best µs", "best_us", priority=0, right=True),
    Column("found", "records found", "records_found", priority=1, text=_found),
]  # fmt: skip

# Known columns of the generic tables (`results query/regressions/history`): how much each matters.
GENERIC_PRIORITY = {
    "job_key": 0, "model": 0, "executor": 0, "opt_level": 0, "status": 0, "median": 0, "latest": 0,
    "baseline": 0, "ratio": 0, "regressed": 0, "count": 0,
    "std": 1, "sweep_id": 1, "peak_mem_mb": 1, "unit": 1, "score": 1, "sweep_created_at": 1, "board_key": 1,
    "pipeline": 2, "board": 2, "history": 2, "note": 2, "sweep_label": 2,
    "target": 3, "max_abs_err": 3, "tvm_version": 4, "baseline_tvm_version": 4, "emulated": 4, "release_step": 3,
}  # fmt: skip
GENERIC_HEADERS = {
    "job_key": "job", "sweep_id": "sweep", "opt_level": "opt", "board_key": "board key", "peak_mem_mb": "peak MB",
    "max_abs_err": "max abs err", "sweep_label": "label", "sweep_created_at": "created (UTC)", "tvm_version": "TVM",
    "baseline_tvm_version": "baseline TVM", "release_step": "release step",
}  # fmt: skip


def generic(keys: list[str], rows: list[dict[str, Any]], priority: dict[str, int] | None = None) -> list[Column]:
    """Columns for rows whose keys vary (grouped or pivoted frames): ids shortened, numbers right.

    Args:
        priority: overrides of GENERIC_PRIORITY for this table.
    """
    ranks = {**GENERIC_PRIORITY, **(priority or {})}
    out = []
    for k in keys:
        # pandas fills a missing text value (a job with no board) with NaN, a float: it is no number, and
        # a column of names with one gap stays left-aligned.
        values = [r.get(k) for r in rows if not (isinstance(r.get(k), float) and math.isnan(r.get(k)))]
        numeric = any(isinstance(v, Real) and not isinstance(v, bool) for v in values)
        when = k.endswith("_at")
        out.append(
            Column(
                k,
                GENERIC_HEADERS.get(k, k),
                k,
                priority=ranks.get(k, 1),
                right=numeric,
                wrap=not (numeric or when),
                ident=k in ("job_key", "sweep_id"),
                text=_when(k) if when else None,
                style=status_style(k) if k == "status" else None,
            )
        )
    return out


# `toolchains list` (workers.toolchains.registry; status only with --check).
TOOLCHAINS = [
    Column("name", "toolchain", "name", priority=0),
    Column("kind", "kind", "kind", priority=1),
    Column("tvm", "TVM", "tvm_version", priority=0),
    Column("tvm_ffi", "tvm-ffi", "ffi_version", priority=0),
    Column("status", "status", "status", priority=0, wrap=True, optional=True, style=status_style("status")),
    Column("provision_s", "add (s)", "provision_s", priority=3, right=True, optional=True),
    Column("python", "python", "python", priority=2, wrap=True),
]


def _release_verdict(r: dict[str, Any]) -> str:
    return r["verdict"] or ("newest" if r["release"] == r["newest"] else "-")


def _release_median(r: dict[str, Any]) -> str:
    return fmt(r["median"]) if r["status"] == "ok" else r["status"]


def _program_change(r: dict[str, Any]) -> str:
    same = r.get("same_fingerprint")
    return "-" if same is None else "same" if same else "differs"


# `results releases` (answers.releases.Releases.rows): a configuration's releases, oldest first; the
# configuration's cells only on its first row (answers.analysis_views.print_releases blanks the others).
RELEASES = [
    Column("model", "model", "model", priority=0, wrap=True),
    Column("config", "configuration", "config", priority=0, wrap=True,
           short=lambda r: short_config(r["config"]) if r["config"] else "", legend=CONFIG_LEGEND),
    Column("board", "board", "board_key", priority=1),
    Column("release", "TVM", "release", priority=0),
    Column("median", "median", "median", priority=0, right=True, text=_release_median),
    Column("ci", "95% CI", _span("median"), priority=2, text=lambda r: ci(r["median_lo"], r["median_hi"])),
    Column("x_newest", "×newest", "ratio_to_newest", priority=0, right=True,
           text=lambda r: fmt(r["ratio_to_newest"], 3)),
    Column("x_before", "×before", "ratio", priority=1, right=True, text=lambda r: fmt(r["ratio"], 3)),
    Column("p", "p", "p_value", priority=3, right=True, text=lambda r: fmt(r["p_value"], 2)),
    Column("verdict", "vs before", "verdict", priority=0, text=_release_verdict,
           style=lambda r: _VERDICT_STYLE.get(r["verdict"])),
    Column("kernels", "kernels", "kernels_change", priority=1, right=True),
    Column("program", "program", "same_fingerprint", priority=2, text=_program_change),
    Column("passes", "passes", "passes", priority=4, wrap=True, text=lambda r: r["passes"] or "-"),
]  # fmt: skip
