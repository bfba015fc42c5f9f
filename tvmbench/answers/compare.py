"""`results compare A B`: the same configurations in two sweeps, side by side, with the noise accounted for.

Jobs are matched by job_key, the stable identity of (model, target, board key, build and measure settings).
A difference is flagged only when it is larger than the threshold AND the raw samples say it is real:
the Mann-Whitney U test rejects "same distribution" and the bootstrap interval of the ratio excludes 1.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tvmbench.answers import query as q
from tvmbench.answers.stats import DEFAULT_SEED, geometric_mean, mann_whitney_p, ratio_ci

if TYPE_CHECKING:
    import pandas as pd

    from db.store import ResultStore

_IDENTITY = ["job_key", "model", "target", "board_key", "executor", "opt_level", "pipeline"]
#: The verdict of a change beyond the threshold that no test could judge (under two samples a side).
UNDECIDED = "undecided (too few samples)"


class SameSweep(q.QueryError):
    """Both sides of a comparison name one sweep: bad input (a 400 on the dashboard), not a sweep not found."""


@dataclass
class Comparison:
    """Matched rows (one dict per job_key in both sweeps) and the counts of the summary line."""

    sweep_a: str
    sweep_b: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    only_a: int = 0
    only_b: int = 0
    load_a: float | None = None  # median 1-minute host load while A's timings were taken
    load_b: float | None = None

    def count(self, verdict: str) -> int:
        return sum(1 for r in self.rows if r["verdict"] == verdict)

    @property
    def geomean_ratio(self) -> float:
        """Geometric mean of B/A over the pairs that were both measured in the same unit."""
        return geometric_mean([r["ratio"] for r in self.rows if r["ratio"] is not None])

    def summary(self) -> str:
        g = self.geomean_ratio
        gm = f"{g:.3f}" if math.isfinite(g) else "n/a"
        undecided = self.count(UNDECIDED)
        untested = f", {undecided} undecided (too few samples to test: use repeat >= 5)" if undecided else ""
        return (
            f"{self.sweep_a} -> {self.sweep_b}: {len(self.rows)} matched jobs, geometric mean ratio B/A {gm}; "
            f"{self.count('regression')} regression(s), {self.count('improvement')} improvement(s), "
            f"{self.count('broken')} broken, {self.count('fixed')} fixed{untested}; "
            f"{self.only_a} only in A, {self.only_b} only in B" + self.load_note()
        )

    def load_note(self) -> str:
        """A warning when either sweep was timed on a busy host, where whole sweeps drift together."""
        cores = os.cpu_count() or 1
        loads = [x for x in (self.load_a, self.load_b) if x is not None and math.isfinite(x)]
        if not loads or max(loads) <= cores / 2:
            return ""
        return (
            f"; note: host load {_num(self.load_a)} (A) vs {_num(self.load_b)} (B) on {cores} cores: "
            "a busy host shifts whole sweeps, so read small differences as noise"
        )


def _num(x: float | None) -> str:
    return "?" if x is None or not math.isfinite(x) else f"{x:.1f}"


def _verdict(
    status_a: str, status_b: str, ratio: float | None, lo: float, hi: float, p: float, threshold: float, alpha: float
) -> str:
    if status_a != status_b:
        if status_a == "ok":
            return "broken"
        if status_b == "ok":
            return "fixed"
        return "failed"
    if status_a != "ok":
        return "failed"
    if ratio is None:
        return "incomparable"
    beyond = ratio > 1 + threshold or ratio < 1 / (1 + threshold)
    if beyond and (math.isnan(p) or math.isnan(lo) or math.isnan(hi)):
        # Fewer than two samples a side (repeat = 1): no test and no interval can say whether a change this
        # large is real, so it is neither a regression nor "same".
        return UNDECIDED
    significant = not math.isnan(p) and p < alpha
    if significant and ratio > 1 + threshold and lo > 1:
        return "regression"
    if significant and ratio < 1 / (1 + threshold) and hi < 1:
        return "improvement"
    return "same"


def _warning_list(value: Any) -> list[str]:
    return list(value) if isinstance(value, list | tuple) else []


def _median_or_none(series: pd.Series) -> float | None:
    values = series.dropna()
    return float(values.median()) if len(values) else None


def compare(
    store: ResultStore,
    ref_a: str,
    ref_b: str,
    *,
    threshold: float = 0.05,
    alpha: float = 0.05,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
    distinct: bool = False,
) -> Comparison:
    """Compare sweep ``ref_b`` against baseline ``ref_a``; ratio is median(B)/median(A), >1 means slower.

    ``distinct``: refuse (SameSweep) when both name the same sweep (the CLI, the API and the dashboard).
    """
    a = q.resolve_sweep(store, ref_a)
    b = q.resolve_sweep(store, ref_b)
    if distinct and a.id == b.id:  # a sweep against itself is ratio 1 everywhere: an answer to no question
        same = f"{ref_a!r} and {ref_b!r} both name sweep {a.id}" if ref_a != ref_b else f"{ref_a!r} names sweep {a.id}"
        raise SameSweep(f"{same} on both sides: give two different sweeps (ids; `tvmbench results sweeps` lists them)")
    df_a = q.query(store, q.Filters(sweep=a.id), with_samples=True)
    df_b = q.query(store, q.Filters(sweep=b.id), with_samples=True)
    merged = df_a.merge(df_b, on="job_key", suffixes=("_a", "_b"))
    result = Comparison(a.id, b.id)
    result.only_a = len(set(df_a["job_key"]) - set(df_b["job_key"]))
    result.only_b = len(set(df_b["job_key"]) - set(df_a["job_key"]))
    result.load_a = _median_or_none(df_a["load_avg_1m"])
    result.load_b = _median_or_none(df_b["load_avg_1m"])
    for _, r in merged.iterrows():
        comparable = (
            r["status_a"] == "ok"
            and r["status_b"] == "ok"
            and r["unit_a"] == r["unit_b"]
            and bool(r["emulated_a"]) == bool(r["emulated_b"])
            and r["median_a"] is not None
            and r["median_b"] is not None
        )
        ratio, lo, hi, p = None, math.nan, math.nan, math.nan
        if comparable:
            ci = ratio_ci(r["samples_a"], r["samples_b"], confidence, seed=seed)
            ratio = float(r["median_b"]) / float(r["median_a"]) if r["median_a"] else None
            lo, hi = ci.lo, ci.hi
            p = mann_whitney_p(r["samples_a"], r["samples_b"])
        row = {k: r[k if k == "job_key" else f"{k}_a"] for k in _IDENTITY}
        # untuned, tuned 8 and tuned auto are different jobs that would read as one row without it
        row["tuning"] = None if r["tuning_a"] == "untuned" else r["tuning_a"]
        row.update(
            {
                "status_a": r["status_a"],
                "status_b": r["status_b"],
                "unit": r["unit_a"],
                "emulated": bool(r["emulated_a"]),
                "median_a": r["median_a"],
                "median_b": r["median_b"],
                # Board-state warnings of each side's run (governor, clocks or temperature moved): the
                # figure they affect is printed with them.
                "warnings_a": _warning_list(r["warnings_a"]),
                "warnings_b": _warning_list(r["warnings_b"]),
                "ratio": ratio,
                "ratio_lo": lo,
                "ratio_hi": hi,
                "p_value": p,
                "verdict": _verdict(r["status_a"], r["status_b"], ratio, lo, hi, p, threshold, alpha),
            }
        )
        result.rows.append(row)
    result.rows.sort(key=lambda r: (r["model"], r["board_key"], r["executor"], r["opt_level"], r["pipeline"]))
    return result
