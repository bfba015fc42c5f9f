"""`tvmbench report`: one self-contained HTML page per sweep, plots embedded as base64 PNG.

Plots are drawn with matplotlib's Agg backend (no display needed). Each latency plot is one (model,
board key, unit, emulated) group, so emulated and real timings never share an axis.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from tvmbench.answers import query as q
from tvmbench.answers import ranking, regressions
from tvmbench.answers import tuning as tuning_answers
from tvmbench.answers.releases import releases as releases_answer
from tvmbench.answers.releases import version_key
from tvmbench.answers.report_figures import failures_figure, latency_figure, png_bytes, releases_figure, trials_figure

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from db.store import ResultStore

# Written into the page so a headless browser (and a reader) can see that every plot decoded.
_RENDER_CHECK = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  var el = document.getElementById('render-check');
  el.setAttribute('data-images', String(imgs.length));
  el.setAttribute('data-rendered', String(ok));
  el.textContent = ok + ' of ' + imgs.length + ' plot(s) rendered';
});
</script>"""

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:90%}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.uncertain{color:#a60}.bad{color:#b00}.good{color:#070}img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.muted{color:#777}"""


@dataclass
class Written:
    html: Path | None  # None: the page went to a stream (`report -o -`: stdout)
    plots: int
    pngs: list[Path] = field(default_factory=list)


def _slug(*parts: Any) -> str:
    """A file-name stem of ``parts``; one that had to be cleaned up ends in a short hash of the real text."""
    text = "-".join(str(p) for p in parts)
    clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
    # Models "a/b" and "a?b" both clean up to "a_b": one PNG file and one dashboard URL showed one model's plot
    # under both names. The hash of the real name keeps each its own, and the same whatever else the sweep has.
    return clean if clean == text else f"{clean}-{_digest(text)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _distinct_stems(specs: list[PlotSpec]) -> list[PlotSpec]:
    """``specs`` with every stem its own: parts joined by "-" can still meet ("a-b" on "c", "a" on "b-c")."""
    counts = Counter(spec.stem for spec in specs)
    return [replace(s, stem=f"{s.stem}-{_digest(s.caption)}") if counts[s.stem] > 1 else s for s in specs]


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]], row_class: Any = None) -> str:
    if not rows:
        return "<p class='muted'>none</p>"
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = []
    for r in rows:
        cls = row_class(r) if row_class else ""
        cells = []
        for key, _ in columns:
            v = r.get(key)
            if isinstance(v, float):
                cells.append(f"<td class='num'>{'-' if v != v else f'{v:.4g}'}</td>")
            else:
                cells.append(f"<td>{html.escape('-' if v is None else str(v))}</td>")
        body.append(f"<tr class='{cls}'>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _releases_section(across: Any, figures: str) -> str:
    """The "Releases" section (answers.releases): absent when the sweep built under one TVM release."""
    if len(across.releases) < 2:
        return ""
    rows = [{**r, "fingerprint_change": _same(r["same_fingerprint"])} for r in across.rows]
    table = _table(
        rows,
        [
            ("model", "model"),
            ("config", "configuration"),
            ("board_key", "board"),
            ("release", "TVM"),
            ("status", "status"),
            ("median", "median"),
            ("median_lo", "CI low"),
            ("median_hi", "CI high"),
            ("ratio_to_newest", "× newest"),
            ("ratio", "× release before"),
            ("p_value", "p"),
            ("verdict", "vs release before"),
            ("kernels_change", "kernels"),
            ("fingerprint_change", "program"),
            ("passes", "passes"),
        ],
        lambda r: {"regression": "bad", "broken": "bad", "improvement": "good", "fixed": "good"}.get(r["verdict"], ""),
    )
    return f"""<h2 id="releases">Releases</h2>
<p class="muted">Each configuration under every TVM release this sweep built it with, oldest first: the median with its
95% bootstrap CI, its ratio to the newest release, and against the release before it the verdict of `tvmbench results
compare` (Mann-Whitney U test and the ratio's CI) with what changed in the build. {html.escape(across.summary())}</p>
{table}
{figures}"""


def _same(value: bool | None) -> str:
    return "-" if value is None else "same" if value else "differs"


@dataclass(frozen=True)
class Plot:
    """One plot of a sweep: a file-name stem, its caption and the PNG."""

    stem: str
    caption: str
    png: bytes


NOT_FAILED = ("ok", "pending", "pending-device")


def sweep_frame(store: ResultStore, sweep_id: str) -> pd.DataFrame:
    """The sweep's jobs with their samples, as the report and the dashboard plot them."""
    return q.query(store, q.Filters(sweep=sweep_id), with_samples=True)


@dataclass(frozen=True)
class PlotSpec:
    """A plot of a sweep before it is drawn: ``draw()`` makes the figure (the slow part)."""

    stem: str
    caption: str
    draw: Callable[[], Figure]


def plot_specs(df: pd.DataFrame) -> list[PlotSpec]:
    """The report's plots of a sweep frame (``sweep_frame``), undrawn: latency per (model, board, unit,
    emulated), then failures by kind. Cheap: a page can list them and draw each one when it is asked for."""
    ok = df[(df["status"] == "ok") & df["median"].notna()]
    specs: list[PlotSpec] = []
    releases = sorted(set(ok["tvm_version"].dropna()), key=version_key) if "tvm_version" in ok else []
    # Across several releases the latency bars show the newest one (a bar per configuration); the
    # releases plots below put the releases side by side.
    newest = ok[ok["tvm_version"] == releases[-1]] if len(releases) > 1 else ok
    at = f", TVM {releases[-1]}" if len(releases) > 1 else ""
    for (model, board_key, unit, emulated), group in newest.groupby(ranking.RANK_KEYS, sort=True):
        caption = f"Latency of {model} on {board_key} ({unit}{', emulated' if emulated else ''}{at})"
        stem = _slug("latency", model, board_key, unit, "emu" if emulated else "hw")
        specs.append(PlotSpec(stem, caption, partial(latency_figure, group, model, board_key, unit, bool(emulated))))
    if len(releases) > 1:
        for (model, board_key, unit, emulated), group in ok.groupby(ranking.RANK_KEYS, sort=True):
            if group["tvm_version"].nunique() < 2:
                continue
            kind = f"{unit}{', emulated' if emulated else ''}"
            caption = f"Latency of {model} on {board_key} across TVM releases ({kind})"
            stem = _slug("releases", model, board_key, unit, "emu" if emulated else "hw")
            draw = partial(releases_figure, group, model, board_key, unit, bool(emulated))
            specs.append(PlotSpec(stem, caption, draw))
    for (model, board_key, unit, emulated), group in ok.groupby(ranking.RANK_KEYS, sort=True):
        contenders = group[~group["executor"].isin(ranking.BASELINE_EXECUTORS)]
        if not any(tuning_answers.is_tuned(b) for b in contenders["tuning_budget"]):
            continue
        ort_rows = group[group["executor"].isin(ranking.BASELINE_EXECUTORS)]["median"]
        ort = float(ort_rows.min()) if len(ort_rows) else None
        caption = f"Latency of {model} on {board_key} against MetaSchedule trials ({unit})"
        stem = _slug("trials", model, board_key, unit, "emu" if emulated else "hw")
        draw = partial(trials_figure, contenders, model, board_key, unit, bool(emulated), ort)
        specs.append(PlotSpec(stem, caption, draw))
    failed = Counter(s for s in df["status"] if s not in NOT_FAILED)
    if failed:
        specs.append(PlotSpec("failures", "Failed jobs by kind", partial(failures_figure, failed)))
    return _distinct_stems(specs)


def sweep_plots(df: pd.DataFrame) -> list[Plot]:
    """Every plot of ``plot_specs`` drawn as PNG."""
    return [Plot(spec.stem, spec.caption, png_bytes(spec.draw())) for spec in plot_specs(df)]


def failure_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The failed jobs of a sweep frame, each with the first line of its error (at most 300 characters)."""
    return [
        {**r, "job_key": r["job_key"][:12], "error": _error(r)[:300]}
        for r in df[~df["status"].isin(NOT_FAILED)].to_dict("records")
    ]


def _error(row: dict[str, Any]) -> str:
    """The first line of a failed job's error; "" without one (None, or NaN where pandas filled the gap)."""
    error = row.get("error")
    lines = error.strip().splitlines() if isinstance(error, str) else []
    return lines[0] if lines else ""


def failures_by_kind(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Failed jobs grouped by kind (most first), and within a kind by the first line of their error.

    [{"kind", "count", "messages": [{"message", "count", "jobs": [{job_key, model, ..., "error"}]}]}]: ten
    jobs that failed the same way read as one message, each job keeping its full error.
    """
    failed = df[~df["status"].isin(NOT_FAILED)]
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in failed.to_dict("records"):
        first_line = _error(r) or "(no message)"
        job = {k: r[k] for k in ("job_key", "model", "target", "board_key", "executor", "opt_level", "pipeline")}
        groups.setdefault(r["status"], {}).setdefault(first_line, []).append({**job, "error": r["error"]})
    out = []
    for kind, messages in groups.items():
        listed = [{"message": msg, "count": len(jobs), "jobs": jobs} for msg, jobs in messages.items()]
        listed.sort(key=lambda x: -x["count"])
        out.append({"kind": kind, "count": sum(x["count"] for x in listed), "messages": listed})
    out.sort(key=lambda x: (-x["count"], x["kind"]))
    return out


def write_report(store: ResultStore, sweep_ref: str, out: Path | BinaryIO, *, png_dir: Path | None = None) -> Written:
    """Write the report of sweep ``sweep_ref`` to ``out``, a file or a binary stream (and each plot to ``png_dir``)."""
    sweep = q.resolve_sweep(store, sweep_ref)
    df = sweep_frame(store, sweep.id)
    plots = [(p.stem, p.caption, p.png) for p in sweep_plots(df)]
    curves = tuning_answers.sweep_curves(store, sweep.id)
    for c in curves[: tuning_answers.MAX_REPORT_CURVES]:
        title = tuning_answers.curve_title(c)
        draw = tuning_answers.curve_figure(c["curve"], title, c["measured_ms"], c["onnxruntime_ms"], c["checks"])
        caption = f"Tuning curve of job {c['job_key'][:12]}: {title}" + (
            f"; stopped by {c['stop']}" if c["stop"] else ""
        )
        plots.append((_slug("curve", c["job_key"][:12]), caption, png_bytes(draw)))
    ranked = ranking.best(store, q.Filters(sweep=sweep.id))
    slow = regressions.find(store, q.Filters(sweep=sweep.id))
    failures = failure_rows(df)
    across = releases_answer(store, q.Filters(sweep=sweep.id))
    written = Written(out if isinstance(out, Path) else None, len(plots))
    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
        for stem, _, data in plots:
            path = png_dir / f"{stem}.png"
            path.write_bytes(data)
            written.pngs.append(path)

    counts = Counter(df["status"])
    status_line = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))

    def figure(caption: str, data: bytes) -> str:
        return (
            f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{base64.b64encode(data).decode()}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )

    own_section = ("releases-", "curve-")
    figures = "".join(figure(caption, data) for stem, caption, data in plots if not stem.startswith(own_section))
    curve_figures = "".join(figure(caption, data) for stem, caption, data in plots if stem.startswith("curve-"))
    if len(curves) > tuning_answers.MAX_REPORT_CURVES:
        curve_figures += (
            f"<p class='muted'>{len(curves) - tuning_answers.MAX_REPORT_CURVES} more tuned jobs have a curve: "
            "`tvmbench results show JOB` and the dashboard's job page show each</p>"
        )
    release_figures = "".join(figure(caption, data) for stem, caption, data in plots if stem.startswith("releases-"))
    releases_html = _releases_section(across, release_figures)
    curves_html = (
        f"<h3>Tuning curves</h3><p class='muted'>{html.escape(tuning_answers.CURVE_WHAT)}; against trials and "
        f"tuning minutes, with the build's measured median and ONNX Runtime's.</p>{curve_figures}"
        if curve_figures
        else ""
    )
    ranking_html = _table(
        ranked,
        [
            ("model", "model"),
            ("board_key", "board"),
            ("unit", "unit"),
            ("verdict", "verdict"),
            ("best_median", "best median"),
            ("best_lo", "CI low"),
            ("best_hi", "CI high"),
            ("runner_up", "runner-up"),
            ("runner_up_median", "runner-up median"),
            ("speedup_vs_slowest", "× vs slowest"),
            ("speedup_vs_onnxruntime", "× vs onnxruntime"),
        ],
        lambda r: "uncertain" if r["uncertain"] else "",
    )
    tuned_rows = [
        {"model": r["model"], "board_key": r["board_key"], **e} for r in ranked for e in r.get("tuning") or []
    ]
    tuning_html = _table(
        tuned_rows,
        [
            ("model", "model"),
            ("board_key", "board"),
            ("config", "configuration"),
            ("budget", "budget"),
            ("stopped_by", "stopped by"),
            ("tuning_trials", "trials run"),
            ("median", "median"),
            ("speedup_vs_onnxruntime", "× vs onnxruntime"),
            ("untuned_median", "untuned median"),
            ("speedup_vs_untuned", "× vs untuned"),
            ("tuning_minutes", "tuning min"),
            ("tuning_min_per_speedup", "min per × gained"),
        ],
    )
    regressions_html = _table(
        slow,
        [
            ("model", "model"),
            ("board_key", "board"),
            ("executor", "executor"),
            ("opt_level", "opt_level"),
            ("pipeline", "pipeline"),
            ("latest", "latest"),
            ("baseline", "baseline"),
            ("ratio", "ratio"),
            ("score", "z"),
            ("history", "history"),
            ("baseline_tvm_version", "baseline TVM"),
            ("tvm_version", "TVM"),
        ],
        lambda r: "bad",
    )
    failures_html = _table(
        failures,
        [
            ("job_key", "job"),
            ("model", "model"),
            ("target", "target"),
            ("executor", "executor"),
            ("opt_level", "opt_level"),
            ("status", "kind"),
            ("error", "error"),
        ],
    )
    title = f"tvmbench report: sweep {sweep.name} {sweep.label}".strip()
    tvm_line = ", ".join(across.releases) if len(across.releases) > 1 else sweep.tvm_version
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p>sweep <code>{html.escape(sweep.id)}</code> · created {sweep.created_at:%Y-%m-%d %H:%M} UTC ·
TVM {html.escape(tvm_line)} · host {html.escape(sweep.host)} · {len(df)} jobs ({html.escape(status_line)})</p>
<p id="render-check" class="muted">plots not checked (needs JavaScript)</p>
<h2>Latency by executor and opt_level</h2>
<p class="muted">Only jobs whose outputs matched ONNX Runtime are plotted. Times are per inference.</p>
{figures or "<p class='muted'>no successful measurements</p>"}
<h2>Ranking</h2>
<p class="muted">Fastest correct configuration per model and board, medians with 95% bootstrap confidence intervals;
"uncertain" when the intervals of the top two overlap.</p>
{ranking_html}
<h2>Tuning</h2>
<p class="muted">MetaSchedule-tuned builds beside the same configuration untuned (budget 0): speed-ups, and the tuning
minutes per unit of speed-up gained. `tvmbench results show JOB` lists each tuned job's tasks.</p>
{tuning_html}
{curves_html}
{releases_html}
<h2>Regressions against history</h2>
<p class="muted">Results of this sweep slower than earlier results of the same configuration beyond noise
(lookback z-score).</p>
{regressions_html}
<h2>Failures</h2>
{failures_html}
<p class="muted">generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by tvmbench</p>
{_RENDER_CHECK}
</body></html>
"""
    if not isinstance(out, Path):
        out.write(page.encode("utf-8"))  # bytes: the page is UTF-8 whatever the stream's locale
        out.flush()
        return written
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return written
