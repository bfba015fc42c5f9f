"""Reads of the results database for people: result rows, one job in full, and the filtered, grouped
and pivoted views as pandas DataFrames that ranking, compare and regressions build on.

The analytics SQL lives here (db/store.py keeps the writes): one flat row per job, its final run's
figures joined in. Filters become bound parameters of SQLAlchemy expressions, never text pasted into SQL.
Sweeps and boards as lists are in tvmbench/answers/overview.py (re-exported here).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Select, String, case, func, select

from db import models as m
from db.lookup import QueryError, resolve_prefix
from db.rows import build_detail, run_detail
from tvmbench.answers.overview import (  # noqa: F401  (re-exported: callers import these from here)
    ACTIVE_SWEEP_STATUSES,
    resolve_sweep,
    sweep_driver,
    sweep_shown_status,
    sweeps_overview,
)
from workers.executors.registry import static_memory_names

if TYPE_CHECKING:
    import pandas as pd

    from db.store import ResultStore


class NoSuchJob(LookupError):
    """No stored job has the key (prefix) asked for; the message says how to list them."""


MB = 1024 * 1024
RESULT_BATCH = 1000  # rows `results list` reads at a time (iter_results)
SQL_INT_MAX = 2**63 - 1  # the largest integer SQLite and PostgreSQL take (a LIMIT beyond it overflows)
# Executors whose RAM is fixed at build (firmware): their static figure is their peak.
STATIC_RAM_EXECUTORS = static_memory_names()
# The peak memory of a configuration (MB): the board's measured session peak, else for a microcontroller
# build its static RAM (peak_memory_mb says the same in Python). NULL when neither is known.
peak_mem_mb_sql = func.coalesce(
    m.Run.peak_mem_mb, case((m.Job.executor.in_(STATIC_RAM_EXECUTORS), m.Build.ram_bytes / float(MB)))
)

# Output columns, in order, and the SQL expression of each. The CLI prints exactly these.
_COLUMNS: dict[str, Any] = {
    "sweep_id": m.Job.sweep_id,
    "sweep_label": m.Sweep.label,
    "sweep_created_at": m.Sweep.created_at,
    "job_key": m.Job.job_key,
    "model": m.Job.model_name,
    "model_sha256": m.Job.model_sha256,
    "target": m.Job.target_name,
    "board_key": m.Job.board_key,
    "board": m.Run.board_id,
    "executor": m.Job.executor,
    "opt_level": m.Job.opt_level,
    "pipeline": m.Job.pipeline,
    # The layout axis (NULL for jobs without it: no axis, or an executor that does not take it).
    "layout": m.Job.config["layout"].as_string(),
    "status": m.Job.status,
    "unit": m.Run.unit,
    "emulated": m.Run.emulated,
    "median": m.Run.median,
    "mean": m.Run.mean,
    "std": m.Run.std,
    "min": m.Run.min,
    "max": m.Run.max,
    "max_abs_err": m.Run.max_abs_err,
    "load_avg_1m": m.Run.load_avg_1m,
    "first_ms": m.Run.first_ms,
    "load_s": m.Run.load_s,
    "stop_reason": m.Run.stop_reason,
    "ci_rel": m.Run.ci_rel,
    "warmup_runs": m.Run.warmup_runs,
    "peak_mem_mb": peak_mem_mb_sql,
    "static_mem_mb": m.Build.ram_bytes / float(MB),
    "warnings": m.Run.warnings,
    "fingerprint": m.Build.fingerprint,
    # MetaSchedule tuning (NULL when untuned): the budget, trials run, seconds spent tuning
    "tuning_budget": m.Build.tuning_budget,
    "tuning_trials": m.Build.tuning_trials,
    "tuning_s": m.Build.tuning_s,
    # The rule that stopped an auto budget (until, plateau, max_minutes, max_trials, ...); NULL for others.
    "tuning_stopped_by": m.Build.tuning["stopped_by"].as_string(),
    # The build whose records an auto build applied instead of searching (a twin of the same workloads),
    # and the trials covered by stored records: where a build's speed-up was not bought by its own tuning.
    "tuning_tuned_by": m.Build.tuning[("stop", "tuned_by")].as_string(),
    "tuning_from_records": m.Build.tuning["trials_from_records"].as_integer(),
    # The tuning as people say it: "untuned", the budget ("64"), or "auto" (an auto budget stores its trial
    # cap in tuning_budget, so by that column it would merge with a fixed budget of the same size).
    "tuning": case(
        (func.coalesce(m.Build.tuning["stopped_by"].as_string(), "") != "", "auto"),
        (func.coalesce(m.Build.tuning_budget, 0) > 0, func.cast(m.Build.tuning_budget, String)),
        else_="untuned",
    ),
    "equivalent_to": m.Job.equivalent_to,
    # The TVM the program was built with: the build's own (a sweep with a `tvm` axis builds under several
    # releases), else the sweep's (older builds did not record it).
    "tvm_version": func.coalesce(m.Build.tvm_version, m.Sweep.tvm_version),
    "ffi_version": m.Build.ffi_version,
    "kernel_count": m.Build.kernel_count,
    "host": m.Sweep.host,
    "finished_at": m.Job.finished_at,
    "error": m.Job.error,
}
COLUMNS: tuple[str, ...] = tuple(_COLUMNS)
#: Columns a query can be grouped or pivoted by.
DIMENSIONS: tuple[str, ...] = (
    "sweep_id",
    "sweep_label",
    "model",
    "target",
    "board_key",
    "board",
    "executor",
    "opt_level",
    "pipeline",
    "layout",
    "status",
    "unit",
    "emulated",
    "tvm_version",
    "tuning_budget",
    "tuning",
)


@dataclass(frozen=True)
class Filters:
    """What to select. ``None`` means any; ``sweep`` is a sweep id, id prefix or label (resolved first)."""

    sweep: str | None = None
    model: str | None = None
    target: str | None = None
    board: str | None = None  # a board key ("host") or a board id prefix ("host@127.0.0.1:9091")
    executor: str | None = None
    opt_level: int | None = None
    pipeline: str | None = None
    status: str | None = None
    since: datetime | None = None  # job finished at or after
    until: datetime | None = None  # job finished before
    max_memory_mb: float | None = None  # peak memory at most this (rows with no memory figure are left out)

    def describe(self) -> str:
        """The filters that are set, as "name=value" words, for titles."""
        parts = [f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) is not None]
        return " ".join(parts) or "all results"


def base_select(columns: Sequence[str] = COLUMNS, *, with_samples: bool = False) -> Select:
    """SELECT the named columns of every job with its final run, build and sweep joined in."""
    unknown = [c for c in columns if c not in _COLUMNS]
    if unknown:
        raise QueryError(f"unknown column(s) {', '.join(unknown)}; known: {', '.join(COLUMNS)}")
    exprs = [_COLUMNS[c].label(c) for c in columns]
    if with_samples:
        exprs.append(m.Run.samples.label("samples"))
    return (
        select(*exprs)
        .select_from(m.Job)
        .join(m.Sweep, m.Sweep.id == m.Job.sweep_id)
        .outerjoin(m.Run, m.Run.id == m.Job.final_run_id)
        .outerjoin(m.Build, m.Build.build_key == m.Job.build_key)
    )


def apply_filters(stmt: Select, filters: Filters, sweep_id: str | None = None) -> Select:
    """Add WHERE clauses for the filters; ``sweep_id`` is the already-resolved ``filters.sweep``."""
    if sweep_id is not None:
        stmt = stmt.where(m.Job.sweep_id == sweep_id)
    if filters.model is not None:
        stmt = stmt.where(m.Job.model_name == filters.model)
    if filters.target is not None:
        stmt = stmt.where(m.Job.target_name == filters.target)
    if filters.board is not None:
        stmt = stmt.where(
            (m.Job.board_key == filters.board) | m.Run.board_id.startswith(filters.board, autoescape=True)
        )
    if filters.executor is not None:
        stmt = stmt.where(m.Job.executor == filters.executor)
    if filters.opt_level is not None:
        stmt = stmt.where(m.Job.opt_level == filters.opt_level)
    if filters.pipeline is not None:
        stmt = stmt.where(m.Job.pipeline == filters.pipeline)
    if filters.status is not None:
        stmt = stmt.where(m.Job.status == filters.status)
    if filters.since is not None:
        stmt = stmt.where(m.Job.finished_at >= filters.since)
    if filters.until is not None:
        stmt = stmt.where(m.Job.finished_at < filters.until)
    if filters.max_memory_mb is not None:
        stmt = stmt.where(peak_mem_mb_sql <= filters.max_memory_mb)
    return stmt


def filtered_select(
    store: ResultStore, filters: Filters, columns: Sequence[str] = COLUMNS, *, with_samples: bool = False
) -> Select:
    """base_select + apply_filters, with the sweep reference resolved against the store."""
    sweep_id = resolve_sweep(store, filters.sweep).id if filters.sweep else None
    return apply_filters(base_select(columns, with_samples=with_samples), filters, sweep_id)


def unknown_memory_count(store: ResultStore, filters: Filters) -> int:
    """Ok results the other filters select whose peak memory is unknown (left out by ``max_memory_mb``)."""
    from dataclasses import replace

    stmt = filtered_select(store, replace(filters, max_memory_mb=None), ["job_key"]).where(
        peak_mem_mb_sql.is_(None), m.Job.status == "ok"
    )
    with store.engine.connect() as conn:
        return len(conn.execute(stmt).all())


def frame(store: ResultStore, stmt: Select) -> pd.DataFrame:
    """Execute ``stmt`` in one round trip and return its rows as a DataFrame (columns = labels)."""
    import pandas as pd

    with store.engine.connect() as conn:
        result = conn.execute(stmt)
        keys = list(result.keys())
        rows = result.all()
    df = pd.DataFrame.from_records(rows, columns=keys)
    if "emulated" in df:
        df["emulated"] = df["emulated"].fillna(False).astype(bool)
    if "unit" in df:
        df["unit"] = df["unit"].fillna("ms")
    return df


def query(
    store: ResultStore,
    filters: Filters | None = None,
    *,
    columns: Sequence[str] = COLUMNS,
    with_samples: bool = False,
    limit: int | None = None,
) -> pd.DataFrame:
    """One row per job matching ``filters`` (newest sweep first), with the columns the CLI prints."""
    stmt = filtered_select(store, filters or Filters(), columns, with_samples=with_samples)
    stmt = stmt.order_by(m.Sweep.created_at.desc(), m.Job.id)
    if limit is not None:
        stmt = stmt.limit(min(limit, SQL_INT_MAX))  # more rows than SQL can count is every row
    return frame(store, stmt)


def _check_dimensions(names: Sequence[str], what: str) -> None:
    bad = [n for n in names if n not in DIMENSIONS]
    if bad:
        raise QueryError(f"cannot {what} by {', '.join(bad)}; choose from {', '.join(DIMENSIONS)}")


def group(df: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Per group: jobs, ok jobs, and the median / fastest / slowest of the ok jobs' medians."""
    import pandas as pd

    _check_dimensions(by, "group")
    by = list(dict.fromkeys(by))  # --group-by model,model is grouping by model
    if df.empty:
        return pd.DataFrame(columns=[*by, "jobs", "ok", "median", "fastest", "slowest"])
    ok = df["status"] == "ok"
    work = df.assign(_ok=ok, _ok_median=df["median"].where(ok))
    out = (
        work.groupby(list(by), dropna=False)
        .agg(
            jobs=("job_key", "size"),
            ok=("_ok", "sum"),
            median=("_ok_median", "median"),
            fastest=("_ok_median", "min"),
            slowest=("_ok_median", "max"),
        )
        .reset_index()
    )
    out["ok"] = out["ok"].astype(int)
    return out


def pivot(df: pd.DataFrame, rows: Sequence[str], columns: str, value: str = "median") -> pd.DataFrame:
    """A table of the median of ``value`` over ok jobs: ``rows`` down, each value of ``columns`` across."""
    _check_dimensions([*rows, columns], "pivot")
    if not rows:
        raise QueryError("--pivot needs --group-by for the rows (e.g. --group-by model --pivot executor)")
    rows = list(dict.fromkeys(rows))
    if columns in rows:
        raise QueryError(
            f"--pivot {columns} is also in --group-by: its values are the rows or the columns, not both; "
            f"pivot by another column"
        )
    ok = df[df["status"] == "ok"]
    # A key no job has (no layout axis, untuned) is "-", as in the grouped table: pandas would drop its rows.
    keys = [*rows, columns]
    ok = ok.assign(**{k: ok[k].astype(object).where(ok[k].notna(), "-") for k in keys})
    table = ok.pivot_table(index=list(rows), columns=columns, values=value, aggfunc="median")
    table.columns = [f"{columns}={c}" for c in table.columns]
    return table.reset_index()


# --- rows for `results list/show`, `farm list` ----------------------------------------------------


def results(store: ResultStore, sweep_id: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """One flat row per job (its final run's figures joined in), newest sweep first; ``sweep_id``: only
    that sweep's (an id, unique id prefix or label: QueryError when it names none or several); ``limit``:
    at most that many rows."""
    return list(iter_results(store, sweep_id, limit))


def iter_results(store: ResultStore, sweep_id: str | None = None, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """``results`` one row at a time, read in batches: a sweep of a million jobs streams in bounded memory
    (the whole list took 22 GB as ORM objects and rows, and the machine with it)."""
    stmt = (
        select(m.Job, m.Run, m.Build, m.Sweep.tvm_version)
        .join(m.Sweep, m.Sweep.id == m.Job.sweep_id)
        .outerjoin(m.Run, m.Run.id == m.Job.final_run_id)
        .outerjoin(m.Build, m.Build.build_key == m.Job.build_key)
        .order_by(m.Sweep.created_at.desc(), m.Job.id)
    )
    if sweep_id is not None:  # --sweep "" names no sweep: an error, not every sweep
        stmt = stmt.where(m.Job.sweep_id == resolve_sweep(store, sweep_id).id)
    if limit is not None:
        stmt = stmt.limit(min(limit, SQL_INT_MAX))  # as query(): more rows than SQL can count is every row
    # The session keeps its objects only weakly: a batch is garbage once its rows are made.
    with store.read() as s:
        for job, run, build, tvm in s.execute(stmt.execution_options(yield_per=RESULT_BATCH)):
            yield _result_row(job, run, build, tvm)


def job_detail(store: ResultStore, job_ref: str, sweep_id: str | None = None) -> dict[str, Any] | None:
    """Everything about one job (key or unique key prefix), from the newest sweep that has it unless
    ``sweep_id`` (an id or unique id prefix). None when no job matches; QueryError when several keys do."""
    with store.read() as s:
        within: list[Any] = []
        if sweep_id:
            sweep_id = resolve_prefix(s, m.Sweep.id, sweep_id, "sweep id")
            if sweep_id is None:
                return None
            within.append(m.Job.sweep_id == sweep_id)
        job_key = resolve_prefix(s, m.Job.job_key, job_ref, "job key", *within)
        if job_key is None:
            # A build id (`results show` names "build 4e3a585a03ba" where one build applied another's
            # records): the newest job built by it.
            build_key = resolve_prefix(s, m.Job.build_key, job_ref, "build id", *within)
            if build_key is None:
                return None
            job_key = s.scalars(
                select(m.Job.job_key).where(m.Job.build_key == build_key, *within).order_by(m.Job.id.desc()).limit(1)
            ).first()
        stmt = (
            select(m.Job)
            .join(m.Sweep, m.Sweep.id == m.Job.sweep_id)
            .where(m.Job.job_key == job_key, *within)
            .order_by(m.Sweep.created_at.desc(), m.Job.id.desc())
        )
        job = s.scalars(stmt.limit(1)).first()
        build = s.get(m.Build, job.build_key)
        runs = list(s.scalars(select(m.Run).where(m.Run.job_id == job.id).order_by(m.Run.attempt)))
        final = next((r for r in runs if r.id == job.final_run_id), None)
        detail = _result_row(job, final, build, s.get(m.Sweep, job.sweep_id).tvm_version)
        detail["config"] = job.config
        detail["error"] = job.error
        detail["build"] = None if build is None else build_detail(build)
        detail["runs"] = [run_detail(r) for r in runs]
        if build is not None and build.fingerprint:
            same = s.execute(
                select(m.Job.job_key, m.Job.opt_level, m.Job.pipeline, m.Job.executor)
                .join(m.Build, m.Build.build_key == m.Job.build_key)
                .where(
                    m.Job.sweep_id == job.sweep_id,
                    m.Build.fingerprint == build.fingerprint,
                    m.Job.board_key == job.board_key,
                    m.Job.id != job.id,
                )
            )
            detail["same_program_as"] = [
                {"job_key": k, "opt_level": o, "pipeline": p, "executor": e} for k, o, p, e in same
            ]
        return detail


def boards(store: ResultStore) -> list[m.Board]:
    """Every board the database knows, by key then id."""
    with store.read() as s:
        return list(s.scalars(select(m.Board).order_by(m.Board.key, m.Board.id)))


def sweeps(store: ResultStore) -> list[m.Sweep]:
    """Every sweep, newest first."""
    with store.read() as s:
        return list(s.scalars(select(m.Sweep).order_by(m.Sweep.created_at.desc())))


def peak_memory_mb(executor: str, run: m.Run | None, build: m.Build | None) -> float | None:
    """The peak memory a configuration needs, in MB: what the board measured (session VmHWM), or for a
    microcontroller build its static RAM (arena, workspace, I/O, stack: measured nowhere else, and exact
    by construction). None when neither is known (a stock RPC server, an older row)."""
    if run is not None and run.peak_mem_mb is not None:
        return run.peak_mem_mb
    if executor in STATIC_RAM_EXECUTORS and build is not None and build.ram_bytes is not None:
        return build.ram_bytes / MB
    return None


def tuning_text(budget: Any, stopped_by: Any) -> str:
    """A build's tuning in a word: "untuned", its budget ("64") or "auto" (the query's ``tuning`` column)."""
    from tvmbench.answers.tuning import budget_text, is_tuned

    return budget_text(budget, stopped_by) if is_tuned(budget) else "untuned"


def _result_row(job: m.Job, run: m.Run | None, build: m.Build | None, sweep_tvm: str | None) -> dict[str, Any]:
    return {
        "sweep_id": job.sweep_id,
        "job_key": job.job_key,
        "model": job.model_name,
        "target": job.target_name,
        "board_key": job.board_key,
        "board": run.board_id if run else None,
        "executor": job.executor,
        "kernels_path": job.config.get("kernels"),  # aot-c: "c" or "llvm" kernel code generation
        "opt_level": job.opt_level,
        "pipeline": job.pipeline,
        "layout": job.config.get("layout"),  # the layout axis; None without it
        "status": job.status,
        "unit": run.unit if run else "ms",
        "median_ms": run.median if run and run.unit == "ms" else None,
        "std_ms": run.std if run and run.unit == "ms" else None,
        "samples": run.samples if run else [],
        "median": run.median if run else None,  # in `unit` (ms, or emulated instructions)
        "flash_bytes": build.flash_bytes if build else None,
        "ram_bytes": build.ram_bytes if build else None,
        "peak_mem_mb": peak_memory_mb(job.executor, run, build),
        "static_mem_mb": build.ram_bytes / MB if build and build.ram_bytes is not None else None,
        "first_ms": run.first_ms if run else None,
        "stop_reason": run.stop_reason if run else None,
        "ci_rel": run.ci_rel if run else None,
        "warnings": (run.warnings or []) if run else [],
        "max_abs_err": run.max_abs_err if run else None,
        "emulated": bool(run.emulated) if run else bool(job.config.get("emulated")),
        "equivalent_to": job.equivalent_to,
        "fingerprint": build.fingerprint if build else None,
        "compile_s": build.compile_s if build else None,
        "tuning_budget": build.tuning_budget if build else None,
        "tuning_trials": build.tuning_trials if build else None,
        "tuning_s": build.tuning_s if build else None,
        "tuning_stopped_by": (build.tuning or {}).get("stopped_by") if build else None,
        # "untuned", "64" or "auto" (not "tuning": the job page reads that key as a tuning dict)
        "tuning_label": tuning_text(build.tuning_budget, (build.tuning or {}).get("stopped_by"))
        if build
        else "untuned",
        "kernel_count": build.kernel_count if build else None,
        "pass_count": build.pass_count if build else None,
        # The release the program was built with (the sweep's TVM for builds that did not record theirs).
        "tvm_version": (build.tvm_version if build and build.tvm_version else None) or sweep_tvm or None,
        "ffi_version": build.ffi_version if build else None,
        "error": job.error,
    }
