"""`results releases`: the same configuration built under several TVM releases, side by side.

A *configuration* is what a person would call the same experiment: model, target, board key, executor
(and its kernels path), opt_level, pipeline, layout, tuning budget, unit and whether the board is emulated. It is
grouped by those fields, never by keys: the `tvm` axis is part of the job key and of the build key, so
the same configuration has a different key per release. The *release* of a result is the TVM its build
ran under (the Build row's tvm_version; the sweep's for older builds that did not record it).

Per configuration the releases are put in version order (PEP 440, so 0.25.0.post1 < 0.26.0 <
0.27.0.post1 < 0.28.dev0), and each release gets: the median with its bootstrap CI, its ratio to the
newest release, and against the release before it the verdict of `results compare` (the same
`_verdict`: a slow-down counts only when it is over the threshold, the Mann-Whitney test rejects "same
distribution" and the ratio's CI excludes 1), with what changed in the build: kernel count, passes
added / removed / renamed, and whether the program fingerprint is the same.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from db import models as m
from tvmbench.answers import query as q
from tvmbench.answers import tuning as tuning_answers
from tvmbench.answers.compare import _verdict
from tvmbench.answers.stats import DEFAULT_SEED, mann_whitney_p, median_ci, ratio_ci
from tvmbench.core.pass_trace import expand

if TYPE_CHECKING:
    from db.store import ResultStore

#: The fields that make two results the same configuration (keys are not: the release is in them).
CONFIG_KEYS = (
    "model",
    "target",
    "board_key",
    "executor",
    "kernels",
    "opt_level",
    "pipeline",
    "layout",
    "tuning_budget",
    "unit",
    "emulated",
)
UNKNOWN = "unknown"  # the release of a row that recorded none
INTERPRETER = "python:"  # how a job's toolchain text names an interpreter (orchestrator/toolchains.py)
# The failures that can be the release's doing (its importer, compiler or program): a release that turns
# an ok result into one of these is "broken". A pending job, a cancel or a farm failure (no board, a
# board that died) says nothing about the release: those results are left out, and counted.
RELEASE_FAULTS = ("model", "build", "wrong-result", "timeout")
_COLUMNS = [
    "sweep_id",
    "sweep_created_at",
    "job_key",
    "model",
    "target",
    "board_key",
    "executor",
    "opt_level",
    "pipeline",
    "layout",
    "status",
    "unit",
    "emulated",
    "median",
    "fingerprint",
    "kernel_count",
    "tuning_budget",
    "tuning_stopped_by",
    "tvm_version",
    "ffi_version",
    "finished_at",
]
SHOWN_NAMES = 3  # pass names listed per change in the summary before "+N more"

# --- version order ---------------------------------------------------------------------------------

_PEP440 = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)(?:[-_.]?(?P<pre>a|b|rc)(?P<pre_n>\d*))?"
    r"(?:[-_.]?post(?P<post>\d*))?(?:[-_.]?dev(?P<dev>\d*))?(?:\+.*)?$",
    re.IGNORECASE,
)


def _pep440_key(version: str) -> tuple[Any, ...]:
    """A small PEP 440 order for when `packaging` is not installed: release numbers, then pre-releases
    (dev < a < b < rc < final), then post-releases. Strings it cannot read sort first, by text."""
    found = _PEP440.match(version.strip())
    if not found:
        return (0, version)
    release = tuple(int(x) for x in found["release"].split("."))
    while len(release) > 1 and release[-1] == 0:  # 0.27 == 0.27.0
        release = release[:-1]
    dev = None if found["dev"] is None else int(found["dev"] or 0)
    if found["pre"]:
        pre = ({"a": 0, "b": 1, "rc": 2}[found["pre"].lower()], int(found["pre_n"] or 0))
    elif dev is not None and found["post"] is None:
        pre = (-1, 0)  # 0.28.dev0 comes before 0.28a1 and 0.28.0
    else:
        pre = (3, 0)
    post = -1 if found["post"] is None else int(found["post"] or 0)
    return (1, release, pre, post, math.inf if dev is None else dev)


def version_key(version: str | None) -> tuple[Any, ...]:
    """Sort key of a TVM version: PEP 440 order (packaging's when installed); unreadable ones first. A
    release label with its toolchain (``release_label``: "0.26.0 (python = ...)") sorts right after its
    version."""
    text = version or UNKNOWN
    base, toolchain, _ = text.partition(" (")
    if toolchain:
        return (*version_key(base), text)
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # packaging is everywhere pip is, but the answers do not depend on it
        return _pep440_key(text)
    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def release_label(tvm_version: str | None, config: Any) -> str:
    """How a result's release is named: its TVM version, and the toolchain when that is a wheel or an
    interpreter (``[axes] tvm = ["0.26.0", { python = ... }]`` builds one configuration twice under 0.26.0:
    both kept apart, where one silently replaced the other)."""
    version = tvm_version or UNKNOWN
    text = config.get("toolchain") if isinstance(config, dict) else None
    if not isinstance(text, str) or text in (version, tvm_version):
        return version
    if text.startswith(INTERPRETER):
        # The hash that ends its name in `toolchains list` (python-0.26.0-1a2b3c4d; workers/toolchains/spec.py,
        # which answers may not import): its path would break 80 columns.
        return f"{version} (python {hashlib.sha256(text[len(INTERPRETER) :].encode()).hexdigest()[:8]})"
    # A wheel's text is its absolute path (orchestrator/toolchains.canonical); a release's is the release.
    return f"{version} (wheel)" if text.endswith(".whl") or text.startswith("/") else version


# --- what changed in the build ---------------------------------------------------------------------


def _names(names: list[str]) -> str:
    more = f" +{len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    return ", ".join(names[:SHOWN_NAMES]) + more


def pass_change(before: list[Any] | None, after: list[Any] | None) -> dict[str, Any]:
    """What changed between two stored pass traces: counts, the distinct passes added and removed, and
    the renamed ones (a pass removed and one added with the same last dotted part, as
    ``tirx.StmtSimplify`` -> ``s_tir.StmtSimplify`` in 0.27), with a one-line ``summary``.

    Distinct names, not positions: the TIR pipeline runs once per kernel, so a different kernel count
    alone changes the full list, not what ran."""
    a, b = expand(before), expand(after)
    if not a and not b:
        return {"passes_before": 0, "passes_after": 0, "added": [], "removed": [], "renamed": [], "summary": "-"}
    old, new = dict.fromkeys(a), dict.fromkeys(b)  # distinct, in first-run order
    added = [n for n in new if n not in old]
    removed = [n for n in old if n not in new]
    renamed = []
    for name in list(removed):
        tail = name.rsplit(".", 1)[-1]
        twin = next((n for n in added if n.rsplit(".", 1)[-1] == tail), None)
        if twin is not None:
            renamed.append([name, twin])
            removed.remove(name)
            added.remove(twin)
    parts = [f"{len(a)} -> {len(b)} passes" if len(a) != len(b) else f"{len(b)} passes"]
    if added:
        parts.append(f"+{len(added)} ({_names(added)})")
    if removed:
        parts.append(f"-{len(removed)} ({_names(removed)})")
    if renamed:
        parts.append(f"renamed {_names([f'{x} -> {y}' for x, y in renamed])}")
    if not (added or removed or renamed):
        parts.append("same passes")
    summary = "; ".join(parts)
    return {
        "passes_before": len(a),
        "passes_after": len(b),
        "added": added,
        "removed": removed,
        "renamed": renamed,
        "summary": summary,
    }


def _kernel_change(before: Any, after: Any) -> str:
    known = [None if v is None or v != v else int(v) for v in (before, after)]
    if known[0] is None and known[1] is None:
        return "-"
    if known[0] == known[1]:
        return str(known[1])
    return f"{'?' if known[0] is None else known[0]} -> {'?' if known[1] is None else known[1]}"


# --- the answer --------------------------------------------------------------------------------------


@dataclass
class Releases:
    """One row per (configuration, release), configurations in order and releases oldest first."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)  # every release seen, oldest first
    configurations: int = 0
    sweep: str | None = None
    left_out: int = 0  # results pending, cancelled or failed by the farm (nothing said about a release)

    def count(self, verdict: str) -> int:
        return sum(1 for r in self.rows if r["verdict"] == verdict)

    @property
    def failed(self) -> bool:
        """True when some release is significantly slower than (or broke) the one before it: exit 1."""
        return bool(self.count("regression") or self.count("broken"))

    def summary(self) -> str:
        where = f"sweep {self.sweep}" if self.sweep else "all sweeps"
        left = (
            f"; {self.left_out} result(s) left out (pending, cancelled, or no board / a board failure)"
            if self.left_out
            else ""
        )
        if not self.releases:
            return f"{where}: no results match{left}"
        if len(self.releases) < 2:
            only = self.releases[0]
            return (
                f"{where}: one TVM release ({only}) across {self.configurations} configuration(s): nothing to "
                f"compare (a sweep with `[axes] tvm = [...]` builds each configuration under several){left}"
            )
        return (
            f"{where}: {self.configurations} configuration(s) across {len(self.releases)} TVM releases "
            f"({', '.join(self.releases)}); against the release before: {self.count('regression')} regression(s), "
            f"{self.count('improvement')} improvement(s), {self.count('broken')} broken, "
            f"{self.count('fixed')} fixed{left}"
        )

    def steps(self) -> list[dict[str, Any]]:
        """The rows whose verdict against the release before them is not "same" (or none)."""
        return [r for r in self.rows if r["verdict"] not in (None, "same")]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


def config_label(row: dict[str, Any]) -> str:
    """The configuration without its model and board: "vm-compiled O3 per-target", "... NHWC tuned 64"."""
    kernels = f" ({row['kernels']})" if row.get("kernels") else ""
    layout = f" {row['layout']}" if isinstance(row.get("layout"), str) else ""
    budget = row.get("tuning_budget")
    tuned = (
        f" tuned {tuning_answers.budget_text(budget, row.get('tuning_stopped_by'))}"
        if tuning_answers.is_tuned(budget)
        else ""
    )
    emulated = " emulated" if row.get("emulated") else ""
    return f"{row['executor']}{kernels} O{row['opt_level']} {row['pipeline']}{layout}{tuned}{emulated}"


def releases(
    store: ResultStore,
    filters: q.Filters | None = None,
    *,
    threshold: float = 0.05,
    alpha: float = 0.05,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
) -> Releases:
    """Every configuration of ``filters`` (``filters.sweep``: that sweep only) across the TVM releases it
    was built with. Where one release of a configuration has results in several sweeps, the newest counts."""
    filters = filters or q.Filters()
    sweep_id = q.resolve_sweep(store, filters.sweep).id if filters.sweep else None
    stmt = q.apply_filters(
        q.base_select(_COLUMNS, with_samples=True).add_columns(
            m.Build.pass_trace.label("pass_trace"), m.Job.config.label("config"), m.Job.id.label("job_id")
        ),
        replace(filters, sweep=None),
        sweep_id,
    )
    df = q.frame(store, stmt)
    out = Releases(sweep=sweep_id)
    judged = df["status"].isin(["ok", *RELEASE_FAULTS]) if not df.empty else []
    out.left_out = int(len(df) - sum(judged))
    df = df[judged] if not df.empty else df
    if df.empty:
        return out
    df["kernels"] = [(c or {}).get("kernels") if isinstance(c, dict) else None for c in df["config"]]
    df["tuning_budget"] = [int(b) if tuning_answers.is_tuned(b) else 0 for b in df["tuning_budget"]]
    df["release"] = [release_label(v, c) for v, c in zip(df["tvm_version"], df["config"], strict=True)]
    newest_first = df.sort_values(["sweep_created_at", "job_id"], ascending=False)
    chosen = newest_first.drop_duplicates([*CONFIG_KEYS, "release"], keep="first")
    out.releases = sorted(set(chosen["release"]), key=version_key)
    groups = chosen.groupby(list(CONFIG_KEYS), dropna=False, sort=True)
    out.configurations = groups.ngroups
    for _, group in groups:
        runs = sorted(group.to_dict("records"), key=lambda r: version_key(r["release"]))
        newest = runs[-1]
        before: dict[str, Any] | None = None
        for r in runs:
            out.rows.append(_row(r, before, newest, threshold, alpha, confidence, seed))
            before = r
    return out


def _ok(r: dict[str, Any] | None) -> bool:
    return r is not None and r["status"] == "ok" and r["median"] is not None and r["median"] == r["median"]


def _row(
    r: dict[str, Any],
    before: dict[str, Any] | None,
    newest: dict[str, Any],
    threshold: float,
    alpha: float,
    confidence: float,
    seed: int,
) -> dict[str, Any]:
    samples = list(r["samples"] or []) if _ok(r) else []
    ci = median_ci(samples, confidence, seed=seed)
    row: dict[str, Any] = {k: _clean(r[k]) for k in CONFIG_KEYS}
    row.update(
        config=config_label(row),
        release=r["release"],
        ffi_version=_clean(r["ffi_version"]),
        sweep_id=r["sweep_id"],
        job_key=r["job_key"],
        status=r["status"],
        samples=len(samples),
        median=float(r["median"]) if _ok(r) else None,
        median_lo=ci.lo,
        median_hi=ci.hi,
        newest=newest["release"],
        ratio_to_newest=None,
        ratio_to_newest_lo=math.nan,
        ratio_to_newest_hi=math.nan,
        previous=None,
        previous_status=None,
        ratio=None,  # median / median of the release before (> 1: slower than it)
        ratio_lo=math.nan,
        ratio_hi=math.nan,
        p_value=math.nan,
        verdict=None,
        kernel_count=_clean(r["kernel_count"]),
        kernels_change=_kernel_change(r["kernel_count"], r["kernel_count"]),  # no release before: the count
        passes=None,
        fingerprint=r["fingerprint"],
        same_fingerprint=None,
    )
    if _ok(r) and _ok(newest):
        to_newest = ratio_ci(newest["samples"], samples, confidence, seed=seed)
        row.update(
            ratio_to_newest=float(r["median"]) / float(newest["median"]),
            ratio_to_newest_lo=to_newest.lo,
            ratio_to_newest_hi=to_newest.hi,
        )
    if before is None:
        return row
    ratio, lo, hi, p = None, math.nan, math.nan, math.nan
    if _ok(before) and _ok(r):
        ci_prev = ratio_ci(before["samples"], samples, confidence, seed=seed)
        ratio = float(r["median"]) / float(before["median"]) if before["median"] else None
        lo, hi = ci_prev.lo, ci_prev.hi
        p = mann_whitney_p(before["samples"], samples)
    if expand(before["pass_trace"]) and expand(r["pass_trace"]):
        change = pass_change(before["pass_trace"], r["pass_trace"])
    else:
        # A release whose build stopped before any pass (its importer failed) ran no passes to compare:
        # "0 -> 3155 passes; +76 (...)" read as if the other release had added 76 passes.
        change = {"added": [], "removed": [], "renamed": [], "summary": "-"}
    row.update(
        previous=before["release"],
        previous_status=before["status"],
        ratio=ratio,
        ratio_lo=lo,
        ratio_hi=hi,
        p_value=p,
        verdict=_verdict(before["status"], r["status"], ratio, lo, hi, p, threshold, alpha),
        kernels_change=_kernel_change(before["kernel_count"], r["kernel_count"]),
        passes=change["summary"],
        passes_added=change["added"],
        passes_removed=change["removed"],
        passes_renamed=change["renamed"],
        same_fingerprint=_same_program(before["fingerprint"], r["fingerprint"]),
    )
    return row


def _same_program(before: Any, after: Any) -> bool | None:
    """Whether two builds made the same program; None where either made none (pandas gives NaN, which is
    truthy: a failed import read as "program differs")."""
    before, after = _clean(before), _clean(after)
    return None if not (before and after) else before == after
