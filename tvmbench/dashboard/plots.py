"""PNG plots of the dashboard, drawn server side with matplotlib (Agg): nothing is fetched by the browser.

The sweep plots are the HTML report's own (answers.html_report.plot_specs), each drawn when its image
is asked for and kept per state of the sweep (its status and job counts); the samples histogram and the
history graph are the dashboard's own.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tvmbench.answers import html_report
from tvmbench.answers import query as q
from tvmbench.answers.report_figures import new_figure, png_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from db.store import ResultStore

_CACHE_SIZE = 256  # drawn plots kept (PNGs of some tens of kB)
_specs: OrderedDict[tuple[Any, ...], list[html_report.PlotSpec]] = OrderedDict()
_drawn: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()
# matplotlib's Figure objects are independent, but its font cache and text layout are not thread safe:
# the server's worker threads make and draw one plot at a time.
_draw_lock = threading.Lock()


def _state(store: ResultStore, sweep_id: str) -> tuple[Any, ...]:
    """What the sweep's plots depend on: a new final job or status change draws them again."""
    row = q.sweeps_overview(store, sweep_id)
    if not row:
        raise q.QueryError(f"no sweep {sweep_id!r}")
    return (store.url, sweep_id, row[0]["status"], tuple(sorted(row[0]["statuses"].items())))


def _remember(cache: OrderedDict, key: tuple[Any, ...], value: Any, size: int) -> Any:
    cache[key] = value
    while len(cache) > size:
        cache.popitem(last=False)
    return value


def sweep_plot_specs(store: ResultStore, sweep_id: str, frame: Any = None) -> list[html_report.PlotSpec]:
    """The report's plots of sweep ``sweep_id`` (an exact id), undrawn; kept while the sweep does not move."""
    key = _state(store, sweep_id)
    with _draw_lock:
        if key in _specs:
            _specs.move_to_end(key)
            return _specs[key]
    df = frame if frame is not None else html_report.sweep_frame(store, sweep_id)
    specs = html_report.plot_specs(df)
    with _draw_lock:
        return _remember(_specs, key, specs, 16)


def sweep_plot_png(store: ResultStore, sweep_id: str, stem: str) -> bytes | None:
    """One plot of the sweep as PNG, drawn on first request (a sweep of 80 plots is not drawn at once)."""
    specs = {s.stem: s for s in sweep_plot_specs(store, sweep_id)}
    if stem not in specs:
        return None
    key = (*_state(store, sweep_id), stem)
    with _draw_lock:
        if key in _drawn:
            _drawn.move_to_end(key)
            return _drawn[key]
        return _remember(_drawn, key, png_bytes(specs[stem].draw()), _CACHE_SIZE)


def png(draw: Callable[[], Figure]) -> bytes:
    """The figure ``draw`` makes, as PNG bytes: made and rendered one at a time (see _draw_lock), since
    building it (titles, labels, ticks) uses matplotlib's shared font and text state as much as saving it."""
    with _draw_lock:
        return png_bytes(draw())


def samples_figure(samples: list[float], unit: str, title: str) -> Figure:
    """Histogram of a run's samples, with its median marked."""
    import numpy as np

    fig = new_figure(figsize=(6.5, 3.2))
    ax = fig.add_subplot()
    values = np.asarray(samples, dtype=float)
    ax.hist(values, bins=min(30, max(5, len(values))), color="#4a7ebb", edgecolor="white")
    median = float(np.median(values))
    ax.axvline(median, color="#c44", linestyle="--", label=f"median {median:.4g} {unit}")
    ax.set_xlabel(f"latency per inference ({unit})")
    ax.set_ylabel("samples")
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.yaxis.get_major_locator().set_params(integer=True)
    return fig


def history_figure(data: dict[str, Any]) -> Figure:
    """Latency of one configuration over time (asv's graph): ok results as a line, flagged regressions in red,
    each point's baseline as a dotted line, failed results as crosses on the axis."""
    from datetime import datetime

    fig = new_figure(figsize=(8.5, 3.8))
    ax = fig.add_subplot()
    points = data["points"]
    when = [datetime.fromisoformat(p["sweep_created_at"]) for p in points]
    ok = [(t, p) for t, p in zip(when, points, strict=True) if p["median"] is not None]
    units = sorted({p["unit"] or "ms" for _, p in ok})
    if ok:
        ax.plot([t for t, _ in ok], [p["median"] for _, p in ok], "o-", color="#4a7ebb", label="median")
        base = [(t, p["baseline"]) for t, p in ok if p["baseline"] is not None]
        if base:
            ax.plot([t for t, _ in base], [b for _, b in base], ":", color="#888", label=f"baseline ({data['method']})")
        flagged = [(t, p["median"]) for t, p in ok if p["regressed"]]
        if flagged:
            ax.plot([t for t, _ in flagged], [v for _, v in flagged], "o", color="#c00", markersize=10,
                    fillstyle="none", markeredgewidth=2, label="regression")  # fmt: skip
    failed = [t for t, p in zip(when, points, strict=True) if p["median"] is None]
    if failed:
        ax.plot(failed, [0] * len(failed), "x", color="#c00", label="failed")
    # A vertical line where the TVM release changes, labelled with the step: a jump right of it is the
    # new release's (or of what else changed with it), not noise.
    for t, p in zip(when, points, strict=True):
        if p.get("release_boundary"):
            ax.axvline(t, color="#a60", linestyle="--", linewidth=1)
            ax.annotate(p["release_boundary"], (t, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                        textcoords="offset points", fontsize="small", color="#a60")  # fmt: skip
    ax.set_ylabel(f"median latency ({', '.join(units) or 'ms'})")
    ax.set_xlabel("sweep created")
    ax.set_title(f"{data['model']} {data['executor']} O{data['opt_level']} {data['pipeline']} on {data['board_key']}")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.autofmt_xdate()
    return fig
