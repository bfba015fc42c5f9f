"""The data behind each dashboard page: library answers composed, never queried a second time.

Each function returns plain JSON-able data: the page renders it and its ``/api/...`` endpoint returns it
as is. Every part is what the matching CLI command prints with ``--json`` (named in each docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator import farm as farm_mod
from tvmbench.answers import compare as compare_mod
from tvmbench.answers import html_report, ranking, regressions, why
from tvmbench.answers import query as q
from tvmbench.answers.analysis_views import _jsonable, comparison_json, records
from tvmbench.dashboard import plots

if TYPE_CHECKING:
    from db.store import ResultStore

#: Columns of the sweep page's results table, in order (the JSON has every column of `results query`).
RESULT_COLUMNS = [
    "job_key", "model", "target", "board", "executor", "opt_level", "pipeline", "status", "unit", "median",
    "std", "max_abs_err", "emulated", "equivalent_to",
]  # fmt: skip
#: The filters of the sweep page: a query-string name -> the Filters field it sets.
FILTERS = ("model", "board", "executor", "status")
#: The sweep page's sort orders (?order=), as its column headers' links write them.
ORDERS = ("asc", "desc")


def jsonable(value: Any) -> Any:
    """``value`` with NaN as None, datetimes as ISO strings, numpy scalars as Python ones, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    value = _jsonable(value)
    if isinstance(value, float) and math.isinf(value):
        return None
    return value


def sweeps(store: ResultStore, watch: list[str] | None = None) -> list[dict[str, Any]]:
    """Every sweep with its progress: `tvmbench results sweeps --json`; with ``watch``, only the running
    sweeps and those ids (what the live pages poll)."""
    return q.sweeps_overview(store, active_or=watch)


@dataclass(frozen=True)
class SweepQuery:
    """The sweep page's filter and sort, from its query string."""

    model: str | None = None
    board: str | None = None
    executor: str | None = None
    status: str | None = None
    sort: str = "median"
    descending: bool = False

    @classmethod
    def parse(cls, params: Any) -> SweepQuery:
        """From query parameters (``?model=...&sort=median&order=desc``); unknown sorts and orders are refused."""
        sort = params.get("sort") or "median"
        if sort not in q.COLUMNS:
            raise q.QueryError(f"cannot sort by {sort!r}; choose from {', '.join(q.COLUMNS)}")
        order = params.get("order") or "asc"
        if order not in ORDERS:  # "sideways" sorted ascending without a word, as if it were understood
            raise q.QueryError(f"?order={order!r}: choose from {', '.join(ORDERS)}")
        picked = {f: (params.get(f) or None) for f in FILTERS}
        return cls(**picked, sort=sort, descending=order == "desc")

    def filters(self, sweep_id: str) -> q.Filters:
        return q.Filters(sweep=sweep_id, model=self.model, board=self.board, executor=self.executor, status=self.status)


def sweep(store: ResultStore, ref: str, query: SweepQuery | None = None) -> dict[str, Any]:
    """One sweep: progress (`results sweeps`), its jobs (`results query --sweep ... --json`, filtered and
    sorted), the ranking (`results best --sweep --json`), failures grouped by kind, and its plots."""
    query = query or SweepQuery()
    found = q.resolve_sweep(store, ref)
    frame = html_report.sweep_frame(store, found.id)
    filtered = q.query(store, query.filters(found.id))
    if not filtered.empty:
        filtered = filtered.sort_values(
            [query.sort, "job_key"], ascending=[not query.descending, True], na_position="last", kind="stable"
        )
    choices = {
        "model": sorted(set(frame["model"])),
        "board": sorted(set(frame["board_key"]) | {b for b in frame["board"] if isinstance(b, str)}),
        "executor": sorted(set(frame["executor"])),
        "status": sorted(set(frame["status"])),
    }
    overview = q.sweeps_overview(store, found.id)[0]
    return jsonable(
        {
            "sweep": {**overview, "host": found.host},
            "query": {**{f: getattr(query, f) for f in FILTERS}, "sort": query.sort, "descending": query.descending},
            "choices": choices,
            "results": records(filtered.to_dict("records")),
            "ranking": records(ranking.best(store, q.Filters(sweep=found.id))),
            "failures": html_report.failures_by_kind(frame),
            "plots": [{"stem": p.stem, "caption": p.caption} for p in plots.sweep_plot_specs(store, found.id, frame)],
        }
    )


def job(store: ResultStore, key: str, sweep_ref: str | None = None, diff: str | None = None) -> dict[str, Any]:
    """One job: `tvmbench results show KEY [--sweep S] [--diff OTHER] --json`."""
    return jsonable(why.job_json(why.explain_job(store, key, sweep_ref, diff)))


def compare(
    store: ResultStore, ref_a: str, ref_b: str, *, threshold: float = 0.05, alpha: float = 0.05
) -> dict[str, Any]:
    """Two sweeps side by side: `tvmbench results compare A B --json` (compare_mod.SameSweep when both are one)."""
    compared = compare_mod.compare(store, ref_a, ref_b, threshold=threshold, alpha=alpha, distinct=True)
    return jsonable(comparison_json(compared))


def history(store: ResultStore, key: str, method: str = "zscore") -> dict[str, Any]:
    """One configuration over time, each point judged by ``method``: `tvmbench results history KEY --json`."""
    return jsonable(regressions.history(store, key, method=method))


def farm(store: ResultStore, tracker: str | None) -> dict[str, Any]:
    """Boards the database knows (health, failures in a row toward quarantine, facts) and, with a tracker,
    `tvmbench farm list --no-live --json` (no session is opened: a dashboard must not hold boards)."""
    from tvmbench.core.health import QUARANTINE_AFTER

    known = q.boards(store)
    out: dict[str, Any] = {
        "tracker": tracker,
        "quarantine_after": QUARANTINE_AFTER,
        "known": farm_mod.known_board_rows(known),
        "boards": None,
        "tracker_error": None,
    }
    if tracker:
        try:
            out["boards"] = farm_mod.board_list(tracker, {b.id: b for b in known}, live=False)
        except (OSError, RuntimeError) as exc:
            out["tracker_error"] = f"tracker {tracker} does not answer ({exc}); is it running? (`tvmbench farm up`)"
    return jsonable(out)
