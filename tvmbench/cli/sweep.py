"""`tvmbench sweep ...`: plan, run, resume, submit, status, logs, cancel."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from db.urls import as_url, password_in, shown_url
from tvmbench.cli.common import (
    MAX_BOARDS,
    NOT_FOUND,
    ColumnsOpt,
    DbOpt,
    JsonOpt,
    TrackerOpt,
    TsvOpt,
    WideOpt,
    call,
    check_range,
    console,
    err,
    fail,
    failures_as_lines,
    home,
    load,
    note,
    open_store,
    print_json,
    tables,
)
from tvmbench.cli.lazy import lazy
from tvmbench.cli.plan_notes import default_target_note, stored_name, toolchain_lines, toolchain_needs, tuning_plan

if TYPE_CHECKING:  # the orchestrator (Ray, TVM, onnx) loads inside the commands that run it
    from db.store import ResultStore
    from orchestrator.spec import SweepSpec

columns = lazy("tvmbench.answers.columns")
report = lazy("tvmbench.answers.report")
table = lazy("tvmbench.answers.table")

app = typer.Typer(no_args_is_help=True, help="Plan and run sweeps.")

RayOpt = Annotated[
    str | None, typer.Option("--ray-address", help="Ray cluster to build on (default: a local instance on 127.0.0.1).")
]
FarmResourceOpt = Annotated[
    str | None,
    typer.Option(
        "--farm-resource",
        help="Ray custom resource of the node(s) that reach the farm: measurements run only there.",
    ),
]
NoProvisionOpt = Annotated[
    bool,
    typer.Option(
        "--no-provision", help="Refuse, instead of provisioning, when a toolchain of the tvm axis is not added here."
    ),
]
BoardsOpt = Annotated[int, typer.Option(help="Host boards of an ephemeral local farm.", min=0, max=MAX_BOARDS)]
ClusterOpt = Annotated[
    str,
    typer.Option(
        "--ray-address",
        envvar="TVMBENCH_RAY_ADDRESS",
        help="Dashboard URL of the Ray cluster, e.g. http://HEAD:8265 (token: ~/.ray/auth_token or RAY_AUTH_TOKEN).",
    ),
]


@app.command("plan")
def sweep_plan(
    path: Path,
    db: DbOpt = None,
    label: Annotated[str | None, typer.Option(help="Plan the sweep under this label.")] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """Dry run: the job matrix, what is already built or measured, and what will run."""
    from orchestrator import plan

    tables(wide, only, tsv, as_json)
    spec = load(path, label)
    store = open_store(db, read_only=True)  # no database yet: nothing is cached, none is created
    call(stored_name, store, spec)
    needs = call(toolchain_needs, spec)
    rows = call(plan.plan_rows, spec, store, needs)  # two jobs of one key: SpecError, one line
    default = default_target_note(spec)
    jobs = {job.key: job for job in plan.plan_jobs(spec)}
    tasks_of: dict = {}  # one extraction per program, however many budgets and VM modes tune it
    for row in rows:
        if row.get("tuning") and not row["built"]:
            job = jobs[row["job_key"]]
            row["tuning_plan"] = tuning_plan(store, spec, job, list(jobs.values()), tasks_of)
    if as_json:
        extra = {"toolchains": [n.row() for n in needs]} if spec.toolchains else {}
        print_json({"sweep_id": spec.sweep_id, "jobs": rows, **extra, **({"note": default} if default else {})})
        return
    report.plan_table(console, spec.sweep_id, rows)
    for line in toolchain_lines(needs, rows):
        console.print(line, highlight=False, soft_wrap=not console.is_terminal)
    if default:
        console.print(default, highlight=False, soft_wrap=not console.is_terminal)


def progress_detail(c: dict[str, int]) -> str:
    """The progress bar's words for the counts of orchestrator/scheduling/events.py's Progress.

    Tuning shows the trials measured in this run and, apart, those stored records covered: a total would
    mislead, since stored records shrink what a budget measures and an auto budget's cap is a ceiling the
    search rarely reaches.
    """
    tuning = ""
    if c.get("trials_budget"):
        tuning = f" · trials run {c.get('trials_done', 0)}"
        if c.get("trials_reused"):
            tuning += f" (+{c['trials_reused']} from stored records)"
    return (
        f"built {c.get('built', 0)}/{c.get('to_build', 0)}"
        + (f" ({c['cached']} cached)" if c.get("cached") else "")
        + f" · ok {c.get('ok', 0)} · failed {c.get('failed', 0)}"
        + tuning
    )


def _execute(
    spec: SweepSpec,
    db: str | None,
    tracker: str | None,
    ray_address: str | None,
    boards: int,
    as_json: bool,
    farm_resource: str | None = None,
    reopen_cancelled: bool = False,
    provision: bool = True,
) -> None:
    from orchestrator import interrupts, scheduler
    from tvmbench.answers import query
    from tvmbench.cli.progress import progress_bar

    store = open_store(db)
    name = call(stored_name, store, spec)
    try:
        # The bar closes before a failure's line is printed, so the error is the last line on the screen.
        with failures_as_lines(), progress_bar(err) as bar:
            task = bar.add_task(f"sweep {table.short_id(spec.sweep_id)}", total=None, detail="starting")
            started = False

            def on_progress(_event: str, c: dict[str, int]) -> None:
                nonlocal started
                started = True
                done = c.get("ok", 0) + c.get("failed", 0) + c.get("waiting", 0)
                bar.update(task, total=c.get("jobs"), completed=done, detail=progress_detail(c))

            try:
                outcome = scheduler.execute_sweep(
                    spec,
                    store,
                    home(),
                    tracker=tracker,
                    ray_address=ray_address,
                    boards=boards,
                    farm_resource=farm_resource,
                    progress=on_progress,
                    note=note,
                    reopen_cancelled=reopen_cancelled,
                    provision=provision,
                )
            except Exception:
                if not started:  # it failed before anything happened: no "starting" line left above the error
                    bar.update(task, visible=False)
                raise
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (orchestrator/interrupts.py): the same cleanup ran
        fail(
            f"interrupted ({interrupts.signal_name(exc)}){_after_interrupt(store, spec.sweep_id)}",
            interrupts.exit_code(exc),
        )
    # Every write checked its file, but a deletion after the last one would still lose the sweep unsaid.
    call(store.check_same_file)
    rows = query.results(store, spec.sweep_id)
    if as_json:
        print_json({"sweep_id": spec.sweep_id, "outcome": outcome.summary(), "results": rows})
    else:
        report.results_table(console, rows, title=f"sweep {spec.sweep_id} ({name})")
        # One line however long (several hundred characters with every part): a pipe or a file gets it whole,
        # not cut at the console's 200 columns; a terminal gets it wrapped at its width, between words.
        console.print(report.outcome_line(outcome), soft_wrap=not console.is_terminal)
    cancelled = outcome.statuses.get("cancelled", 0)
    if cancelled and not reopen_cancelled:  # `sweep run` skips them as final; only a resume reopens them
        note(f"{cancelled} job(s) were cancelled by `sweep cancel`: `tvmbench sweep resume {spec.sweep_id}` runs them")
    if not outcome.complete:
        raise typer.Exit(3)
    if any(status != "ok" for status in outcome.statuses):
        raise typer.Exit(1)


def _after_interrupt(store: ResultStore, sweep_id: str) -> str:
    """What an interrupted sweep left, in words, after "interrupted (Ctrl-C)": `sweep resume` helps only
    once the sweep is recorded (a Ctrl-C while the farm or Ray starts comes before that: no sweep to resume)."""
    from db.engine import DatabaseGone

    try:
        store.check_same_file()
        recorded = store.sweep_status(sweep_id) is not None
    except DatabaseGone as exc:
        return f": {exc}"
    except Exception:  # the database cannot say: the advice of a recorded sweep, as before
        recorded = True
    if not recorded:
        return " before the sweep was recorded: nothing is stored; run it again"
    return f": finished jobs are stored; `tvmbench sweep resume {sweep_id}` runs the rest"


@app.command("run")
def sweep_run(
    path: Path,
    db: DbOpt = None,
    tracker: TrackerOpt = None,
    ray_address: RayOpt = None,
    label: Annotated[
        str | None, typer.Option(help="Run as a new sweep under this label (measures again; builds stay cached).")
    ] = None,
    boards: BoardsOpt = 1,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
    farm_resource: FarmResourceOpt = None,
    no_provision: NoProvisionOpt = False,
) -> None:
    """Run a sweep here: build on Ray, measure on the farm, store every outcome. Re-running finishes what is missing.

    The toolchains of a tvm axis that are not added here are provisioned first (minutes each, the first time).
    Exit status: 0 all ok, 1 some jobs failed, 2 invalid sweep file, 3 jobs still wait for a device.
    """
    tables(wide, only, tsv, as_json)
    spec = load(path, label)
    default = default_target_note(spec)
    if default:
        note(default)
    _execute(spec, db, tracker, ray_address, boards, as_json, farm_resource, provision=not no_provision)


@app.command("resume")
def sweep_resume(
    sweep_id: str,
    db: DbOpt = None,
    tracker: TrackerOpt = None,
    ray_address: RayOpt = None,
    boards: BoardsOpt = 1,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
    no_provision: NoProvisionOpt = False,
) -> None:
    """Finish a stored sweep: jobs without a final row run, and so do jobs `sweep cancel` ended."""
    from orchestrator.resume import resume_spec

    tables(wide, only, tsv, as_json)
    _no_such_file_no_sweep(db, sweep_id)
    store = open_store(db)
    sweep = call(store.get_sweep, sweep_id)
    if sweep is None:
        from orchestrator.submit import no_sweep

        fail(no_sweep(store, sweep_id, shown_url(store.url)), code=NOT_FOUND)
    spec, notes = call(resume_spec, store, sweep)
    for line in notes:
        note(line)
    _execute(spec, db, tracker, ray_address, boards, as_json, reopen_cancelled=True, provision=not no_provision)


def _no_such_file_no_sweep(db: str | None, sweep_id: str) -> None:
    """Where the --db is a SQLite file that does not exist, the sweep cannot be in it: one line, exit 2, and
    no empty database left behind (a typo, another machine's path), as from a read command."""
    from db.engine import default_url, sqlite_path

    url = as_url(db) if db else default_url()
    path = sqlite_path(url)
    if path is None or path.exists() or path.is_symlink():
        return  # a database there (or a server): opened as before, created or migrated by the writer
    from orchestrator.submit import no_sweep

    fail(no_sweep(None, sweep_id, f"{shown_url(url)} (no such file)"), code=NOT_FOUND)


# --- sweeps on a Ray cluster (orchestrator/submit.py) ---------------------------------------------


@app.command("submit")
def sweep_submit(
    path: Path,
    ray_address: ClusterOpt,
    db: DbOpt = None,
    tracker: TrackerOpt = None,
    label: Annotated[str | None, typer.Option(help="Submit as a new sweep under this label.")] = None,
    farm_resource: FarmResourceOpt = None,
    boards: Annotated[
        int, typer.Option(help="Host boards of an ephemeral farm on the head (no --tracker).", min=0, max=MAX_BOARDS)
    ] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Send a sweep to a Ray cluster as a Ray job and return its sweep id at once.

    The sweep file and its models travel with the job; the job runs `tvmbench sweep run` on the head node
    against --db, which must be a database every node reaches (PostgreSQL). Follow it with
    `sweep status`, `sweep logs`, `sweep cancel` from any machine.
    """
    from orchestrator import submit

    if not path.is_file():
        fail(f"{path}: no such sweep file; give the path to a .toml file", code=2)
    db = as_url(db) if db else db  # a path is a SQLite file, which submit_sweep refuses with its reason
    if db and not db.startswith("sqlite"):
        # Created or upgraded here, before the job starts: a wrong URL is this command's one line, and a
        # `sweep status` right after the submit reads a tvmbench database (reads never create one).
        open_store(db).close()
    if db and password_in(db):
        note(
            "the --db password travels in the Ray job's environment, which the cluster's dashboard shows: "
            "a ~/.pgpass on the head node keeps it out of the URL"
        )
    submitted = call(
        submit.submit_sweep,
        path,
        ray_address=ray_address,
        db_url=db or "sqlite",
        tracker=tracker,
        label=label,
        farm_resource=farm_resource,
        boards=boards,
    )
    if as_json:
        print_json(submitted.__dict__)
        return
    already = " (already running: nothing new submitted)" if submitted.already_running else ""
    console.print(f"{submitted.sweep_id}{already}", highlight=False)
    note(f"Ray job {submitted.submission_id}; follow with `tvmbench sweep status {submitted.sweep_id}`")


@app.command("status")
def sweep_status_cmd(
    sweep_id: str,
    db: DbOpt = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", envvar="TVMBENCH_RAY_ADDRESS", help="Dashboard URL of the cluster.")
    ] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """Progress of a sweep: job counts from the database and the state of its Ray job."""
    from orchestrator import submit

    tables(wide, only, tsv, as_json)
    status = call(submit.sweep_status, sweep_id, store=open_store(db, read_only=True), ray_address=ray_address)
    if as_json:
        print_json(status)
        return
    report.simple_table(console, [status], f"sweep {sweep_id}", columns.SWEEP_STATUS)


@app.command("logs")
def sweep_logs_cmd(
    sweep_id: str,
    ray_address: ClusterOpt,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
) -> None:
    """The log of a submitted sweep's Ray job (the output of `sweep run` on the head node)."""
    from orchestrator import submit

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    call(submit.sweep_logs, sweep_id, ray_address=ray_address, follow=follow, write=write)


@app.command("cancel")
def sweep_cancel(
    sweep_id: str,
    db: DbOpt = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            envvar="TVMBENCH_RAY_ADDRESS",
            help="Cluster of a submitted sweep: stop its Ray job (unfinished jobs stay pending; submit it again).",
        ),
    ] = None,
    wait: Annotated[float, typer.Option(help="Seconds to wait for a running driver to stop its jobs.")] = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a sweep: its driver closes sessions and frees boards; jobs without a result become `cancelled`.

    With --ray-address (a submitted sweep), the sweep's Ray job is stopped instead and its unfinished
    jobs stay pending, so submitting the same file again finishes them.
    """
    from orchestrator import submit

    check_range("--wait", wait, 0, 86400)
    if ray_address:
        store = open_store(db) if db else None
        outcome = call(submit.cancel_sweep, sweep_id, ray_address=ray_address, store=store)
        if as_json:
            print_json(outcome)
            return
        what = "stopped" if outcome["stopped"] else "had already ended"
        console.print(f"sweep {outcome['sweep_id']}: Ray job {outcome['submission_id']} {what}")
        return
    outcome = call(submit.cancel_local, open_store(db), sweep_id, wait_s=wait)
    if outcome["before"] in ("complete", "cancelled"):
        console.print(f"sweep {outcome['sweep_id']} is already {outcome['before']}: nothing to cancel")
        return
    if as_json:
        print_json({k: outcome[k] for k in ("sweep_id", "cancelled", "kept")})
        return
    console.print(
        f"sweep {outcome['sweep_id']} cancelled: {outcome['cancelled']} job(s) cancelled, "
        f"{outcome['kept']} kept their result"
    )
