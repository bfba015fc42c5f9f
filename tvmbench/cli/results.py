"""`tvmbench results ...`: rows, one job in full, and the answers (tvmbench/answers/)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.text import Text

from tvmbench.cli.common import (
    ColumnsOpt,
    DbOpt,
    JsonOpt,
    TsvOpt,
    WideOpt,
    check_range,
    console,
    fail,
    failures_as_lines,
    note,
    open_store,
    print_json,
    tables,
)
from tvmbench.cli.lazy import lazy

analysis_views = lazy("tvmbench.answers.analysis_views")
columns = lazy("tvmbench.answers.columns")
report = lazy("tvmbench.answers.report")
tuning_answers = lazy("tvmbench.answers.tuning")

app = typer.Typer(no_args_is_help=True, help="Query the results database.")
TABLE_ROWS = 200  # rows a terminal table shows unless --limit says otherwise (--tsv, --json: every row)


def name_notes() -> None:
    """Have a sweep *name* that several sweeps share say, on stderr, which one it stood for (the newest)
    and the others' ids: picking one silently answered about a run the user may not have meant."""
    from tvmbench.answers import overview

    said: set[str] = set()

    def once(line: str) -> None:  # `compare NAME NAME` resolves the name twice: one note
        if line not in said:
            said.add(line)
            note(line)

    overview.on_name_choice = once


@app.command("list")
def results_list(
    sweep: Annotated[str | None, typer.Option(help="Sweep id, id prefix, label or name; default: all.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
    limit: Annotated[
        int | None, typer.Option(help=f"At most this many rows (a table: {TABLE_ROWS}; --tsv and --json: all).")
    ] = None,
) -> None:
    """One row per job: configuration, status, median latency, error against ONNX Runtime."""
    from tvmbench.answers import query

    tables(wide, only, tsv, as_json)
    name_notes()
    if limit is not None:
        check_range("--limit", limit, 1)
    table_only = not (as_json or tsv)
    shown = TABLE_ROWS if table_only and limit is None else limit
    with failures_as_lines():  # an unknown or ambiguous --sweep: one line, exit 2
        store = open_store(db, read_only=True)
        if as_json:  # streamed: a sweep of a million jobs is never all in memory at once
            _stream_json(query.iter_results(store, sweep, limit))
            return
        # One row more than shown says whether there are more (no COUNT over a million jobs).
        rows = query.results(store, sweep, None if shown is None else shown + 1)
    more = shown is not None and len(rows) > shown
    report.results_table(console, rows[:shown], title=f"sweep {sweep}" if sweep else "all sweeps")
    if more and table_only:
        console.print(f"showing the first {shown} rows: --limit N shows more, --tsv or --json all of them")


def _stream_json(rows: Iterator[dict[str, Any]]) -> None:
    """``rows`` as print_json writes a list (indented by 2), one row at a time."""
    out = sys.stdout
    opened = False
    for row in rows:
        out.write(",\n  " if opened else "[\n  ")
        out.write(json.dumps(row, indent=2, default=str).replace("\n", "\n  "))
        opened = True
    out.write("\n]\n" if opened else "[]\n")


@app.command("sweeps")
def results_sweeps(
    db: DbOpt = None, as_json: JsonOpt = False, wide: WideOpt = False, only: ColumnsOpt = None, tsv: TsvOpt = False
) -> None:
    """The sweeps in the database, newest first, with their progress (jobs final / ok / failed / pending)."""
    from tvmbench.answers import query

    tables(wide, only, tsv, as_json)
    with failures_as_lines():
        rows = query.sweeps_overview(open_store(db, read_only=True))
    if as_json:
        print_json(rows)
        return
    report.simple_table(console, rows, "sweeps", columns.SWEEPS)
    for r in rows:
        if r["resume"]:
            console.print(f"sweep {r['sweep_id']} was interrupted (its driver is gone): `{r['resume']}` finishes it")


@app.command("show")
def results_show(
    job: str,
    sweep: Annotated[str | None, typer.Option(help="Sweep id (default: newest with this job).")] = None,
    diff: Annotated[
        str | None, typer.Option("--diff", help="Another job (key prefix) to diff the pass trace against.")
    ] = None,
    diff_sweep: Annotated[str | None, typer.Option(help="Sweep of the --diff job (default: newest).")] = None,
    top: Annotated[int, typer.Option(help="Kernels to list from the per-kernel profile.")] = 10,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """One job: configuration, build facts, pass trace, samples, errors, top kernels; --diff another job."""
    from tvmbench.answers import why

    tables(wide, only, tsv, as_json)
    name_notes()  # --sweep or --diff-sweep NAME that several sweeps share: which one, as `results list` says
    check_range("--top", top, 0)
    with failures_as_lines():  # unknown jobs or sweeps: one line, exit 2
        shown = why.explain_job(open_store(db, read_only=True), job, sweep, diff, diff_sweep)
    detail, other, kernels, pass_diff = shown["detail"], shown["other"], shown["kernels"], shown["pass_diff"]
    label_a, label_b = shown["labels"]
    if as_json:
        print_json(why.job_json(shown))
        return
    report.job_detail(console, detail)
    analysis_views.print_kernels(console, kernels, top, shown["alone"])
    if other is not None:
        console.print(Text.assemble(("pass trace diff", "bold"), f" {label_a} -> {label_b}:"), highlight=False)
        if not pass_diff:
            console.print(f"  identical ({shown['pass_count']} passes)")
        for line in pass_diff or []:
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
            console.print(Text(f"  {line}", style=style), highlight=False, soft_wrap=not console.is_terminal)


# --- analysis: query, best, compare, regressions, report -------------------------------------------

SweepOpt = Annotated[str | None, typer.Option("--sweep", help="Sweep id, id prefix or label.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Model name.")]
TargetOpt = Annotated[str | None, typer.Option("--target", help="Target name.")]
BoardOpt = Annotated[str | None, typer.Option("--board", help="Board key (e.g. host) or board id prefix.")]
ExecutorOpt = Annotated[str | None, typer.Option("--executor", help="Executor (vm-bytecode, vm-compiled, ...).")]
OptLevelOpt = Annotated[int | None, typer.Option("--opt-level", help="opt_level.")]
PipelineOpt = Annotated[str | None, typer.Option("--pipeline", help="Pipeline.")]
StatusOpt = Annotated[str | None, typer.Option("--status", help="Job status (ok, wrong-result, build, ...).")]
SinceOpt = Annotated[str | None, typer.Option("--since", help="Jobs finished at or after (ISO date/time, UTC).")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Jobs finished before (ISO date/time, UTC).")]


def _when(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        fail(f"{option} {value!r} is not an ISO date/time; write e.g. 2026-11-29 or 2026-11-29T14:00", code=2)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _filters(sweep, model, target, board, executor, opt_level, pipeline, status, since, until):
    from tvmbench.answers import query

    # A sweep's opt_level axis takes 0 to 3 (orchestrator/spec/sweep.py): past SQL's integers a filter was
    # an OverflowError traceback, and below or above the axis it matched nothing without a word.
    if opt_level is not None and not 0 <= opt_level <= 3:
        fail(f"--opt-level {opt_level}: must be 0 to 3 (the opt_level of a sweep's jobs)", code=2)
    return query.Filters(
        sweep=sweep,
        model=model,
        target=target,
        board=board,
        executor=executor,
        opt_level=opt_level,
        pipeline=pipeline,
        status=status,
        since=_when(since, "--since"),
        until=_when(until, "--until"),
    )


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


@app.command("query")
def results_query(
    sweep: SweepOpt = None,
    model: ModelOpt = None,
    target: TargetOpt = None,
    board: BoardOpt = None,
    executor: ExecutorOpt = None,
    opt_level: OptLevelOpt = None,
    pipeline: PipelineOpt = None,
    status: StatusOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    group_by: Annotated[str | None, typer.Option("--group-by", help="Comma-separated columns to group by.")] = None,
    pivot: Annotated[
        str | None, typer.Option("--pivot", help="Column whose values become columns (median ms of ok jobs).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many rows (before grouping).")] = None,
    max_memory_mb: Annotated[
        float | None,
        typer.Option(
            "--max-memory-mb",
            help="Only configurations whose peak memory (board-measured, or a microcontroller's static RAM) "
            "is at most this many MB: which ones fit.",
        ),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.")] = False,
) -> None:
    """Filter results; optionally group (counts, median/fastest/slowest of ok medians) or pivot them."""
    from tvmbench.answers import query

    if as_csv and (as_json or tsv):  # before, JSON (or TSV) won without a word, as --json --tsv once did
        other = "--json" if as_json else "--tsv"
        fail(f"--csv and {other} are two formats for one output: choose one", code=2)
    tables(wide, only, tsv, as_json)
    name_notes()
    if max_memory_mb is not None and not 0 < max_memory_mb < math.inf:  # nan, inf and 1e400 too
        fail(f"--max-memory-mb {max_memory_mb:g}: give the board's memory in MB, e.g. --max-memory-mb 512", code=2)
    filters = _filters(sweep, model, target, board, executor, opt_level, pipeline, status, since, until)
    filters = replace(filters, max_memory_mb=max_memory_mb)
    if limit is not None:
        check_range("--limit", limit, 1)
    table_only = not (group_by or pivot or as_json or as_csv or tsv)  # --tsv, like --csv, gives every row
    if table_only and limit is None:
        limit = TABLE_ROWS  # a terminal table of a million rows helps nobody; --csv/--json give them all
    store = open_store(db, read_only=True)
    with failures_as_lines():
        df = query.query(store, filters, limit=limit)
        if pivot:
            df = query.pivot(df, _split(group_by), pivot)
        elif group_by:
            df = query.group(df, _split(group_by))
        elif not (as_json or as_csv):
            df = df[["job_key", "sweep_label", "model", "target", "board", "executor", "opt_level", "pipeline",
                     "tuning", "status", "unit", "median", "std", "peak_mem_mb", "max_abs_err",
                     "emulated"]]  # fmt: skip
        unknown = query.unknown_memory_count(store, filters) if max_memory_mb is not None else 0
    analysis_views.write_frame(console, df, filters.describe(), "json" if as_json else "csv" if as_csv else "table")
    if table_only and len(df) == limit:
        console.print(f"showing the first {limit} rows: --limit N shows more, --csv or --json all of them")
    if unknown and not (as_json or as_csv):
        console.print(
            f"{unknown} ok result(s) with no memory figure were left out (stock RPC server boards, runs before "
            "migration 0005): their fit is unknown, not assured"
        )


@app.command("best")
def results_best(
    sweep: Annotated[
        str | None, typer.Option("--sweep", help="Rank this sweep (default: the newest sweep per model and board).")
    ] = None,
    model: ModelOpt = None,
    target: TargetOpt = None,
    board: BoardOpt = None,
    executor: ExecutorOpt = None,
    pipeline: PipelineOpt = None,
    confidence: Annotated[float, typer.Option(help="Confidence level of the bootstrap intervals.")] = 0.95,
    metric: Annotated[
        str,
        typer.Option(
            help="steady: the median of the steady-state samples; first: the first inference after load "
            "(what a cold start waits for)."
        ),
    ] = "steady",
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """Per (model, board): the fastest configuration whose outputs were correct, its speed-ups and certainty."""
    from tvmbench.answers import ranking

    tables(wide, only, tsv, as_json)
    name_notes()
    filters = _filters(sweep, model, target, board, executor, None, pipeline, None, None, None)
    with failures_as_lines():
        check_range("--confidence", confidence, 0, 1, open_low=True)
        rows = ranking.best(open_store(db, read_only=True), filters, confidence=confidence, metric=metric)
    if as_json:
        print_json(analysis_views.records(rows))
        return
    analysis_views.print_best(console, rows, confidence, metric)
    tuning_answers.print_side_by_side(console, rows)  # tuned beside untuned, when the sweep tuned
    from tvmbench.answers.layouts import print_layouts

    print_layouts(console, rows, f"{confidence * 100:.0f}% CI")  # which layout won, with a layout axis


@app.command("compare")
def results_compare(
    sweep_a: Annotated[str, typer.Argument(help="Baseline sweep (id, prefix or label).")],
    sweep_b: Annotated[str, typer.Argument(help="Sweep to judge against it.")],
    threshold: Annotated[float, typer.Option(help="Relative change that counts (0.05 = 5 %).")] = 0.05,
    alpha: Annotated[float, typer.Option(help="Significance level of the Mann-Whitney U test.")] = 0.05,
    show_all: Annotated[bool, typer.Option("--all", help="List unchanged jobs too.")] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """Matched jobs of two sweeps: ratio B/A, its CI, a rank test on the samples; exit 1 on regressions."""
    from tvmbench.answers import compare

    tables(wide, only, tsv, as_json)
    name_notes()
    with failures_as_lines():
        check_range("--threshold", threshold, 0)
        check_range("--alpha", alpha, 0, 1, open_low=True)
        store = open_store(db, read_only=True)
        result = compare.compare(store, sweep_a, sweep_b, threshold=threshold, alpha=alpha, distinct=True)
    if as_json:
        print_json(analysis_views.comparison_json(result))
    else:
        analysis_views.print_compare(console, result, show_all)
    if result.count("regression") or result.count("broken"):
        raise typer.Exit(1)


@app.command("releases")
def results_releases(
    sweep: Annotated[
        str | None, typer.Option("--sweep", help="Only this sweep (default: every sweep, the newest result of each).")
    ] = None,
    model: ModelOpt = None,
    target: TargetOpt = None,
    board: BoardOpt = None,
    executor: ExecutorOpt = None,
    threshold: Annotated[float, typer.Option(help="Relative change that counts (0.05 = 5 %).")] = 0.05,
    alpha: Annotated[float, typer.Option(help="Significance level of the Mann-Whitney U test.")] = 0.05,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """Each configuration across the TVM releases it was built with: medians, ratios, what changed; exit 1
    when a release is significantly slower than the one before it (or broke what it built)."""
    from tvmbench.answers import releases

    tables(wide, only, tsv, as_json)
    name_notes()
    filters = _filters(sweep, model, target, board, executor, None, None, None, None, None)
    with failures_as_lines():
        check_range("--threshold", threshold, 0)
        check_range("--alpha", alpha, 0, 1, open_low=True)
        result = releases.releases(open_store(db, read_only=True), filters, threshold=threshold, alpha=alpha)
    if as_json:
        print_json(analysis_views.releases_json(result))
    else:
        analysis_views.print_releases(console, result)
    if result.failed:
        raise typer.Exit(1)


@app.command("regressions")
def results_regressions(
    sweep: Annotated[
        str | None, typer.Option("--sweep", help="Judge this sweep's results (default: every latest result).")
    ] = None,
    model: ModelOpt = None,
    target: TargetOpt = None,
    board: BoardOpt = None,
    executor: ExecutorOpt = None,
    method: Annotated[str, typer.Option(help="zscore (conbench's lookback z-score) or mad (robust).")] = "zscore",
    lookback: Annotated[int, typer.Option(help="Earlier results forming the baseline.")] = 20,
    z: Annotated[float, typer.Option(help="Noise widths above the baseline that count.")] = 5.0,
    threshold: Annotated[float, typer.Option(help="Minimum relative slow-down that counts.")] = 0.05,
    show_all: Annotated[bool, typer.Option("--all", help="List every judged result, not only regressions.")] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """Results slower than their own history (same model, target, executor, opt_level, pipeline, board key)."""
    from tvmbench.answers import regressions

    tables(wide, only, tsv, as_json)
    name_notes()
    filters = _filters(sweep, model, target, board, executor, None, None, None, None, None)
    _check_lookback(lookback, regressions.Params.min_history)
    check_range("--z", z, 0, open_low=True)
    check_range("--threshold", threshold, 0)
    params = regressions.Params(lookback=lookback, z=z, threshold=threshold)
    with failures_as_lines():
        every = regressions.find(
            open_store(db, read_only=True), filters, method=method, params=params, include_all=True
        )
    rows = every if show_all else [r for r in every if r["regressed"]]
    if as_json:
        print_json(analysis_views.records(rows))
        return
    unjudged = sum(1 for r in every if r["regressed"] is None)
    analysis_views.print_regressions(
        console, rows, method, unjudged=unjudged, judged=len(every) - unjudged, needed=params.min_history
    )


def _check_lookback(lookback: int, needed: int) -> None:
    """Exit 2 unless --lookback can hold the ``needed`` earlier results that a verdict takes."""
    # A window smaller than a verdict needs judged nothing at all, and said only "not judged" per row.
    if lookback < needed:
        fail(
            f"--lookback {lookback}: must be at least {needed} (a result is judged against at least {needed} "
            "earlier ones; fewer judge nothing)",
            code=2,
        )


@app.command("history")
def results_history(
    job: Annotated[str, typer.Argument(help="Job key (or a unique prefix): one configuration.")],
    method: Annotated[str, typer.Option(help="zscore (conbench's lookback z-score) or mad (robust).")] = "zscore",
    lookback: Annotated[int, typer.Option(help="Earlier results forming each point's baseline.")] = 20,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """One configuration over time: every result, oldest first, each judged against the ones before it."""
    from tvmbench.answers import regressions

    tables(wide, only, tsv, as_json)
    _check_lookback(lookback, regressions.Params.min_history)
    with failures_as_lines():
        data = regressions.history(
            open_store(db, read_only=True), job, method=method, params=regressions.Params(lookback=lookback)
        )
    if as_json:
        print_json(data)
        return
    cols = ["sweep_id", "sweep_label", "sweep_created_at", "status", "median", "unit", "baseline", "score", "regressed",
            "tvm_version"]  # fmt: skip
    tuned = f" tuned {data['tuning']}" if data.get("tuning") not in (None, "untuned") else ""
    title = f"{data['model']} {data['executor']} O{data['opt_level']} {data['pipeline']}{tuned} on {data['board_key']}"
    history_of = f"history of {data['job_key'][:12]}: {title}"
    # A point with no baseline was not judged: "-", not "no" (which would read as "checked, within the noise").
    points = [{**p, "regressed": "-" if p["baseline"] is None else p["regressed"]} for p in data["points"]]
    analysis_views.table_rows(console, points, history_of, cols, priority={"sweep_id": 0})
    for p in data["points"]:  # where the release changed: a step after it may be the release's
        if p["release_boundary"]:
            console.print(f"release boundary at sweep {p['sweep_id'][:12]}: {p['release_boundary']}", highlight=False)
