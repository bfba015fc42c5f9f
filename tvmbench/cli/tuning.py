"""`tvmbench tuning`: the MetaSchedule records in the results database, and their JSON files.

`list` shows what is stored per scope; `export DIR` writes one scope as a MetaSchedule JSON database
(readable by ``ms.database.JSONDatabase(work_dir=DIR)``); `import DIR` reads one in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tvmbench.cli.common import (
    ColumnsOpt,
    DbOpt,
    JsonOpt,
    TsvOpt,
    WideOpt,
    call,
    console,
    fail,
    note,
    open_store,
    print_json,
    tables,
)
from tvmbench.cli.lazy import lazy

columns = lazy("tvmbench.answers.columns")
report = lazy("tvmbench.answers.report")

app = typer.Typer(no_args_is_help=True, help="MetaSchedule tuning records: list, export and import JSON databases.")

TargetOpt = Annotated[
    str | None, typer.Option("--target", help="Preset name, TVM tag or JSON target dict the records were tuned for.")
]
TvmOpt = Annotated[
    str | None, typer.Option("--tvm-version", help="TVM release of the records, e.g. 0.26.0 (default: this TVM).")
]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Only workloads met while tuning this model.")]
EQUALITY_HELP = "structural, ignore-tensor or anchor-block: how MetaSchedule tells workloads apart."


@app.command("list")
def tuning_list(
    db: DbOpt = None, as_json: JsonOpt = False, wide: WideOpt = False, only: ColumnsOpt = None, tsv: TsvOpt = False
) -> None:
    """Stored tuning records per scope: board key, target, TVM version, module equality."""
    tables(wide, only, tsv, as_json)
    from workers.tuning.exchange import short_target

    rows = open_store(db, read_only=True).tuning_scopes()
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print(
            "no tuning records yet: a sweep with a [axes] tuning budget, or `tvmbench tuning import`, adds them"
        )
        return
    rows = [{**r, "target": short_target(r["target"])} for r in rows]
    report.simple_table(console, rows, "tuning records", columns.TUNING_SCOPES)


@app.command("export")
def tuning_export(
    directory: Annotated[
        Path, typer.Argument(help="Directory for database_workload.json and database_tuning_record.json.")
    ],
    target: TargetOpt = None,
    board_key: Annotated[str | None, typer.Option("--board-key", help="Board key the records were timed on.")] = None,
    tvm_version: TvmOpt = None,
    module_equality: Annotated[
        str | None, typer.Option("--module-equality", help=f"{EQUALITY_HELP} (default: any)")
    ] = None,
    model: ModelOpt = None,
    top: Annotated[
        int | None,
        typer.Option(help="Only the N fastest valid records per workload (N >= 1; default: every record, failed too)."),
    ] = None,
    append: Annotated[bool, typer.Option(help="Add to a JSON database already in DIR.")] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write one scope's records as a MetaSchedule JSON database (for plain TVM scripts)."""
    from workers.tuning import exchange

    store = open_store(db, read_only=True)
    try:
        exchange.check_top(top)  # before the scope is looked for: a database without records says so first
        scope = exchange.select_scope(
            store,
            target=target,
            board_key=board_key,
            tvm_version=tvm_version,
            module_equality=module_equality,
            model_name=model,
        )
        if scope.tvm_version != _installed_tvm():
            done = _export_as_stored(store, directory, scope, model_name=model, top=top, append=append)
        else:
            done = exchange.export_records(store, directory, scope, model_name=model, top=top, append=append)
    except exchange.ExchangeError as exc:
        fail(str(exc), code=2)
    summary = {
        "directory": str(done.directory), "workloads": done.workloads, "records": done.records,
        "skipped": done.skipped, **done.scope,
    }  # fmt: skip
    if as_json:
        print_json(summary)
        return
    which = f"the {top} fastest valid per workload" if top is not None else "every record, failed trials too"
    # With --append, what the files held already is skipped, not written twice: say how much of each.
    held = f", {done.skipped} already there skipped" if append else ""
    console.print(
        f"exported {done.records} record(s) ({which}{held}) of {done.workloads} workload(s) (board "
        f"{scope.board_key}, TVM {scope.tvm_version}, {scope.module_equality}) to {done.directory}; load with "
        f"ms.database.JSONDatabase(work_dir={str(done.directory)!r})",
        highlight=False,
        soft_wrap=not console.is_terminal,  # one line in a pipe, not cut at the console's 200 columns
    )


@app.command("import")
def tuning_import(
    directory: Annotated[Path, typer.Argument(help="A MetaSchedule work_dir with the two database JSON files.")],
    board_key: Annotated[str, typer.Option("--board-key", help="Board key the records' times were taken on.")],
    target: TargetOpt = None,
    tvm_version: TvmOpt = None,
    module_equality: Annotated[
        str, typer.Option("--module-equality", help=f"{EQUALITY_HELP} (default: structural)")
    ] = "structural",
    model: Annotated[str | None, typer.Option("--model", help="Model name to note the workloads under.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read a MetaSchedule JSON database into the results database (idempotent)."""
    from orchestrator.spec.checks import checked_board_key
    from workers.tuning import exchange

    # Before the database is opened (and made): records under a key no board can have, or a TVM version no
    # sweep runs, are lost (no sweep's scope ever meets them).
    call(checked_board_key, "--board-key", board_key)
    try:
        exchange.check_module_equality(module_equality)
        exchange.target_filter(target)
        if tvm_version is not None:
            tvm_version = exchange.check_tvm_version(tvm_version)
    except exchange.ExchangeError as exc:
        fail(str(exc), code=2)
    store = open_store(db)

    def progress(lines: int, distinct: int) -> None:
        note(f"read {lines} record line(s): {distinct} distinct")

    try:
        done = exchange.import_records(
            store, directory, board_key=board_key, target=target, tvm_version=tvm_version,
            module_equality=module_equality, model_name=model, progress=progress,
        )  # fmt: skip
    except exchange.ExchangeError as exc:
        installed = _installed_tvm()
        if "not a MetaSchedule" in str(exc) and tvm_version not in (None, installed):
            # The files are read by this TVM; another release's IR is not readable by it (0.26.0's workloads
            # give "Cannot convert from type `ir.Type` to `BigInt`"): say so, not only "not a workload".
            fail(
                f"{exc}: this tvmbench reads the files with its own TVM {installed}, which cannot read TVM "
                f"{tvm_version}'s IR; records of {tvm_version} reach the database by tuning with "
                f'[axes] tvm = ["{tvm_version}"], or by importing them where tvmbench runs on {tvm_version}',
                code=2,
            )
        fail(str(exc), code=2)
    summary = {
        "directory": str(done.directory), "records": done.records, "distinct": done.distinct, "new": done.new,
        "workloads": done.workloads, "scopes": done.scopes,
    }  # fmt: skip
    if as_json:
        print_json(summary)
        return
    console.print(
        f"imported {done.records} record line(s), {done.distinct} distinct, of {done.workloads} workload(s) from "
        f"{done.directory}: {done.new} new, {done.distinct - done.new} already stored (board {board_key})",
        highlight=False,
        soft_wrap=not console.is_terminal,
    )


def _installed_tvm() -> str:
    from workers.toolchains.boards import installed_version

    return installed_version()


def _export_as_stored(
    store: object, directory: Path, scope: object, *, model_name: str | None, top: int | None, append: bool
) -> object:
    """Another release's records written as that release stored them: its workloads as ``[hash, mod_b64]``
    and its records as ``[workload index, [trace, run_secs, target, args_info]]``, MetaSchedule's JSON
    database lines, without this TVM (the installed TVM cannot read another release's IR: exporting
    0.26.0's records was a TypeError traceback from ``Workload.from_json``, after creating the files)."""
    import json

    from workers.tuning import exchange

    exchange._output_directory(directory)
    workload_file, record_file = directory / exchange.WORKLOAD_FILE, directory / exchange.RECORD_FILE
    existing = [p.name for p in (workload_file, record_file) if p.exists() and p.stat().st_size]
    if existing and not append:
        raise exchange.ExchangeError(
            f"{directory} already holds {' and '.join(existing)}; export into an empty directory, or pass --append "
            "to add these records to that database"
        )
    held = exchange.held_records(directory)
    rows = store.tuning_records(scope, model_name=model_name)  # type: ignore[attr-defined]
    done = exchange.Exported(directory, {**scope.__dict__})
    index: dict[str, int] = {}  # workload hash -> its line in the workload file (an appended one too)
    if workload_file.exists():
        for n, line in enumerate(workload_file.read_text().splitlines()):
            if line.strip():
                index.setdefault(str(json.loads(line)[0]), n)
    lines = len(index)
    workloads_out, records_out, per_workload = [], [], {}
    for wl, rec in rows:
        if top is not None and (per_workload.get(wl.id, 0) >= top or not rec.valid):
            continue  # "the best N" means measured ones, as exchange.export_records
        if wl.workload_hash not in index:
            index[wl.workload_hash] = lines
            lines += 1
            workloads_out.append(json.dumps([wl.workload_hash, wl.mod_b64], separators=(",", ":")))
        if wl.id not in per_workload:
            done.workloads += 1
        per_workload[wl.id] = per_workload.get(wl.id, 0) + 1  # one held already is still among the best N
        record = [rec.trace, rec.run_secs, rec.target, rec.args_info]
        if exchange.record_key(wl.workload_hash, record) in held:  # --append: not written twice
            done.skipped += 1
            continue
        records_out.append(json.dumps([index[wl.workload_hash], record], separators=(",", ":")))
        done.records += 1
    if not done.records and not done.skipped:
        raise exchange.ExchangeError(
            "the selected scope has no records to export" + (f" for model {model_name}" if model_name else "")
        )
    for path, new in ((workload_file, workloads_out), (record_file, records_out)):
        with open(path, "a") as out:
            out.write("".join(line + "\n" for line in new))
    return done
