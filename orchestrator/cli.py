"""The `tvmbench` command line. Each command calls one library function that tests call too."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator import farm as farm_mod
from orchestrator import report, tuning_cli
from orchestrator.spec import SpecError, load_spec

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Sweep TVM Relax build configurations across an RPC device farm; keep every result in SQL.",
)
sweep_app = typer.Typer(no_args_is_help=True, help="Plan and run sweeps.")
results_app = typer.Typer(no_args_is_help=True, help="Query the results database.")
farm_app = typer.Typer(no_args_is_help=True, help="The device farm: a TVM RPC tracker and its boards.")
targets_app = typer.Typer(no_args_is_help=True, help="Target presets.")
db_app = typer.Typer(no_args_is_help=True, help="The results database.")
app.add_typer(sweep_app, name="sweep")
app.add_typer(results_app, name="results")
app.add_typer(farm_app, name="farm")
app.add_typer(targets_app, name="targets")
app.add_typer(db_app, name="db")
app.add_typer(tuning_cli.app, name="tuning")

# Piped output (CI logs, `| less`) gets wide tables rather than rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db", envvar="TVMBENCH_DB", help="SQLAlchemy URL of the results database (default: SQLite in TVMBENCH_HOME)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def fail(message: str, code: int = 1) -> None:
    """Print one error line and exit non-zero."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _home() -> Path:
    from db.store import default_home

    home = default_home()
    home.mkdir(parents=True, exist_ok=True)
    return home


def _store(db: str | None):
    from db.store import ResultStore

    try:
        return ResultStore(db)
    except Exception as exc:
        fail(f"cannot open results database {db or '(default)'}: {exc.__class__.__name__}: {str(exc).splitlines()[0]}")


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _load(path: Path, label: str | None = None):
    try:
        return load_spec(path, label=label)
    except SpecError as exc:
        fail(str(exc), code=2)


# --- sweep ------------------------------------------------------------------------------------------


@sweep_app.command("plan")
def sweep_plan(
    path: Path,
    db: DbOpt = None,
    label: Annotated[str | None, typer.Option(help="Plan the sweep under this label.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Dry run: the job matrix, what is already built or measured, and what will run."""
    from orchestrator.plan import plan_jobs
    from workers.compile import tvm_versions

    spec = _load(path, label)
    store = _store(db)
    jobs = plan_jobs(spec)
    version = tvm_versions()[0]
    statuses = store.job_statuses(spec.sweep_id)
    rows = []
    for job in jobs:
        build = store.get_build(job.build_key(version))
        rows.append(
            {
                "job_key": job.key,
                "model": job.model.name,
                "target": job.target.name,
                "board_key": job.target.board_key,
                "executor": job.executor,
                "kernels_path": job.build_config().get("kernels"),  # aot-c only
                "opt_level": job.opt_level,
                "pipeline": job.pipeline,
                "built": bool(build and build.ok),
                "status": statuses.get(job.key, "new"),
                "tuning": job.tuning,
            }
        )
        if job.tuning and not rows[-1]["built"]:
            rows[-1]["tuning_plan"] = _tuning_plan(store, spec, job, version)
    if as_json:
        _print_json({"sweep_id": spec.sweep_id, "jobs": rows})
        return
    report.plan_table(console, spec.sweep_id, rows)


def _tuning_plan(store, spec, job, version: str) -> dict:
    """Tasks, trials and stored coverage of one tuned job (workers' front pipeline runs here: seconds)."""
    from orchestrator.tuning import plan_tuning, records_database, untuned_profile

    try:
        return plan_tuning(
            job,
            spec.model_paths[job.model.sha256].read_bytes(),
            records_database(store, _home(), job, version),
            untuned_profile(store, job),
        )
    except Exception as exc:  # the build would fail the same way; the plan says so instead of dying
        from workers.compile import one_line

        return {"budget": job.tuning, "error": one_line(exc), "tasks": []}


@contextmanager
def _farm_for_run(tracker: str | None, boards: int, board_keys: set[str] | None = None):
    """The configured farm, or an ephemeral local one that is stopped afterwards.

    The ephemeral farm also starts one emulated board for each key of ``board_keys`` this machine
    can emulate (an aarch64 board under qemu, provisioned the first time; a Cortex-M under QEMU).
    """
    home = _home()
    address = tracker or farm_mod.configured_tracker(home)
    if address:
        yield address
        return
    _reap_stale_farms(home)
    wanted: dict[str, int] = {"host": boards}
    roots: dict[str, str] = {}
    for key in sorted((board_keys or set()) & set(farm_mod.EMULATED_BOARDS)):
        root = farm_mod.board_root(key)
        if not farm_mod.is_provisioned(root):
            err.print(f"[dim]provisioning board {key} into {root} (once; about a minute)[/]")
        roots[key] = str(farm_mod.provision_board(key, root, log=home / "logs" / f"provision-{key}.log"))
        wanted[key] = 1
    from workers.mcu_agent import agent_command

    for key in sorted(k for k in (board_keys or set()) if agent_command(k) is not None):
        wanted[key] = 1
    described = ", ".join(f"{n} {k}" for k, n in wanted.items())
    err.print(f"[dim]no farm configured: starting a local tracker and board(s) {described} on 127.0.0.1[/]")
    # Its processes die with this driver even on SIGKILL (PR_SET_PDEATHSIG), and are recorded in a pid
    # file so that the next run or resume stops anything a killed driver left behind.
    local = farm_mod.LocalFarm.start(home / "logs" / "ephemeral-farm", wanted, board_roots=roots, die_with_parent=True)
    pid_file = home / "run" / f"ephemeral-farm-{os.getpid()}.json"
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(json.dumps({"driver_pid": os.getpid(), "farm": local.to_json()}))
    try:
        yield local.tracker
    finally:
        local.stop()
        pid_file.unlink(missing_ok=True)


def _reap_stale_farms(home: Path) -> None:
    """Stop ephemeral farms whose driver died (a pid file left in TVMBENCH_HOME/run)."""
    for pid_file in (home / "run").glob("ephemeral-farm-*.json"):
        try:
            data = json.loads(pid_file.read_text())
            os.kill(int(data["driver_pid"]), 0)
            continue  # that driver is alive: its farm is in use
        except ProcessLookupError:
            farm_mod.LocalFarm.from_json(data["farm"]).stop()
        except (OSError, ValueError, KeyError):
            pass
        pid_file.unlink(missing_ok=True)


def _progress_bar():
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )
    return progress


def _execute(
    spec,
    db: str | None,
    tracker: str | None,
    ray_address: str | None,
    boards: int,
    as_json: bool,
    farm_resource: str | None = None,
) -> None:
    from orchestrator.scheduler import check_farm_resource, ensure_ray, run_sweep
    from workers.artifacts import ArtifactCache

    store = _store(db)
    cache = ArtifactCache(_home() / "artifacts")
    try:
        with _farm_for_run(tracker, boards, {t.board_key for t in spec.targets}) as address:
            ensure_ray(ray_address)
            if farm_resource:
                try:
                    check_farm_resource(farm_resource)
                except ValueError as exc:
                    fail(str(exc))
            with _progress_bar() as bar:
                task = bar.add_task(f"sweep {spec.sweep_id}", total=None, detail="starting")

                def on_progress(_event: str, c: dict[str, int]) -> None:
                    done = c.get("ok", 0) + c.get("failed", 0) + c.get("waiting", 0)
                    bar.update(
                        task,
                        total=c.get("jobs"),
                        completed=done,
                        detail=f"built {c.get('built', 0)}/{c.get('to_build', 0)} "
                        f"(cached {c.get('cached', 0)}) · measured ok {c.get('ok', 0)} "
                        f"· failed {c.get('failed', 0)}"
                        + (
                            f" · tuning trials {c['trials_done']}/{c['trials_budget']}"
                            if c.get("trials_budget")
                            else ""
                        ),
                    )

                outcome = run_sweep(spec, store, address, cache, progress=on_progress, farm_resource=farm_resource)
    except farm_mod.FarmError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail(f"interrupted: finished jobs are stored; `tvmbench sweep resume {spec.sweep_id}` runs the rest", 130)
    rows = store.results(spec.sweep_id)
    if as_json:
        _print_json(
            {
                "sweep_id": spec.sweep_id,
                "outcome": {
                    "jobs": outcome.jobs,
                    "built": outcome.built,
                    "cached": outcome.cached,
                    "measured": outcome.measured,
                    "equivalent": outcome.equivalent,
                    "already_final": outcome.already_final,
                    "statuses": dict(outcome.statuses),
                },
                "results": rows,
            }
        )
    else:
        report.results_table(console, rows, title=f"sweep {spec.sweep_id} ({spec.name})")
        console.print(report.outcome_line(outcome))
    if not outcome.complete:
        raise typer.Exit(3)
    if any(status != "ok" for status in outcome.statuses):
        raise typer.Exit(1)


TrackerOpt = Annotated[
    str | None,
    typer.Option(
        "--tracker",
        envvar="TVMBENCH_TRACKER",
        help="HOST:PORT of a TVM RPC tracker (default: the farm from `farm up`/`farm connect`, else a local one).",
    ),
]
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


@sweep_app.command("run")
def sweep_run(
    path: Path,
    db: DbOpt = None,
    tracker: TrackerOpt = None,
    ray_address: RayOpt = None,
    label: Annotated[
        str | None, typer.Option(help="Run as a new sweep under this label (measures again; builds stay cached).")
    ] = None,
    boards: Annotated[int, typer.Option(help="Host boards of an ephemeral local farm.")] = 1,
    as_json: JsonOpt = False,
    farm_resource: FarmResourceOpt = None,
) -> None:
    """Run a sweep here: build on Ray, measure on the farm, store every outcome. Re-running finishes what is missing.

    Exit status: 0 all ok, 1 some jobs failed, 2 invalid sweep file, 3 jobs still wait for a device.
    """
    _execute(_load(path, label), db, tracker, ray_address, boards, as_json, farm_resource)


@sweep_app.command("resume")
def sweep_resume(
    sweep_id: str,
    db: DbOpt = None,
    tracker: TrackerOpt = None,
    ray_address: RayOpt = None,
    boards: Annotated[int, typer.Option(help="Host boards of an ephemeral local farm.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Finish a stored sweep: only jobs without a final row run."""
    from orchestrator.spec import parse_spec

    store = _store(db)
    sweep = store.get_sweep(sweep_id)
    if sweep is None:
        fail(f"no sweep {sweep_id!r} in {store.url}; `tvmbench results sweeps` lists them")
    try:
        spec = parse_spec(sweep.source, base=Path(sweep.source_path).resolve().parent, source_path=sweep.source_path)
    except SpecError as exc:
        fail(f"sweep {sweep.id} can no longer be loaded: {exc}", code=2)
    if sweep.label:
        spec = spec.__class__(**{**spec.__dict__, "label": sweep.label})
    if spec.sweep_id != sweep.id:
        fail(f"the models of sweep {sweep.id} changed on disk since it ran; run the file as a new sweep")
    _execute(spec, db, tracker, ray_address, boards, as_json)


# --- sweeps on a Ray cluster (orchestrator/submit.py) ---------------------------------------------

ClusterOpt = Annotated[
    str,
    typer.Option(
        "--ray-address",
        envvar="TVMBENCH_RAY_ADDRESS",
        help="Dashboard URL of the Ray cluster, e.g. http://HEAD:8265 (token: ~/.ray/auth_token or RAY_AUTH_TOKEN).",
    ),
]


def _submit_call(fn, *args, **kwargs):
    from orchestrator.submit import SubmitError

    try:
        return fn(*args, **kwargs)
    except SubmitError as exc:
        fail(str(exc))


@sweep_app.command("submit")
def sweep_submit(
    path: Path,
    ray_address: ClusterOpt,
    db: DbOpt = None,
    tracker: TrackerOpt = None,
    label: Annotated[str | None, typer.Option(help="Submit as a new sweep under this label.")] = None,
    farm_resource: FarmResourceOpt = None,
    boards: Annotated[int, typer.Option(help="Host boards of an ephemeral farm on the head (no --tracker).")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Send a sweep to a Ray cluster as a Ray job and return its sweep id at once.

    The sweep file and its models travel with the job; the job runs `tvmbench sweep run` on the head node
    against --db, which must be a database every node reaches (PostgreSQL). Follow it with
    `sweep status`, `sweep logs`, `sweep cancel` from any machine.
    """
    from orchestrator.submit import submit_sweep

    if not path.is_file():
        fail(f"{path}: no such sweep file; give the path to a .toml file", code=2)
    submitted = _submit_call(
        submit_sweep,
        path,
        ray_address=ray_address,
        db_url=db or "sqlite",
        tracker=tracker,
        label=label,
        farm_resource=farm_resource,
        boards=boards,
    )
    if as_json:
        _print_json(submitted.__dict__)
        return
    note = " (already running: nothing new submitted)" if submitted.already_running else ""
    console.print(f"{submitted.sweep_id}{note}", highlight=False)
    err.print(f"[dim]Ray job {submitted.submission_id}; follow with `tvmbench sweep status {submitted.sweep_id}`[/]")


@sweep_app.command("status")
def sweep_status_cmd(
    sweep_id: str,
    db: DbOpt = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", envvar="TVMBENCH_RAY_ADDRESS", help="Dashboard URL of the cluster.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Progress of a sweep: job counts from the database and the state of its Ray job."""
    from orchestrator.submit import sweep_status

    status = _submit_call(sweep_status, sweep_id, store=_store(db), ray_address=ray_address)
    if as_json:
        _print_json(status)
        return
    report.simple_table(console, [{k: v for k, v in status.items() if k != "statuses"}], title=f"sweep {sweep_id}")


@sweep_app.command("logs")
def sweep_logs_cmd(
    sweep_id: str,
    ray_address: ClusterOpt,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
) -> None:
    """The log of a submitted sweep's Ray job (the output of `sweep run` on the head node)."""
    from orchestrator.submit import sweep_logs

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    _submit_call(sweep_logs, sweep_id, ray_address=ray_address, follow=follow, write=write)


@sweep_app.command("cancel")
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
    if ray_address:
        from orchestrator.submit import cancel_sweep

        store = _store(db) if db else None
        outcome = _submit_call(cancel_sweep, sweep_id, ray_address=ray_address, store=store)
        if as_json:
            _print_json(outcome)
            return
        what = "stopped" if outcome["stopped"] else "had already ended"
        console.print(f"sweep {outcome['sweep_id']}: Ray job {outcome['submission_id']} {what}")
        return
    store = _store(db)
    sweep = store.get_sweep(sweep_id)
    if sweep is None:
        fail(f"no sweep {sweep_id!r} in {store.url}; `tvmbench results sweeps` lists them")
    before = store.request_cancel(sweep.id)
    if before in ("complete", "cancelled"):
        console.print(f"sweep {sweep.id} is already {before}: nothing to cancel")
        return
    if before in ("running", "cancelling"):
        # A driver polls the flag between events; a driver that was killed never answers.
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and store.sweep_status(sweep.id) == "cancelling":
            time.sleep(0.2)
    if store.sweep_status(sweep.id) != "cancelled":  # no driver (or a dead one): mark the rest here
        store.cancel_pending_jobs(sweep.id, "cancelled by `tvmbench sweep cancel`")
    statuses = store.job_statuses(sweep.id)
    done = sum(1 for s in statuses.values() if s == "cancelled")
    if as_json:
        _print_json({"sweep_id": sweep.id, "cancelled": done, "kept": len(statuses) - done})
        return
    console.print(f"sweep {sweep.id} cancelled: {done} job(s) cancelled, {len(statuses) - done} kept their result")


# --- results ----------------------------------------------------------------------------------------


@results_app.command("list")
def results_list(
    sweep: Annotated[str | None, typer.Option(help="Sweep id (or prefix); default: all.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One row per job: configuration, status, median latency, error against ONNX Runtime."""
    rows = _store(db).results(sweep)
    if as_json:
        _print_json(rows)
        return
    report.results_table(console, rows, title=f"sweep {sweep}" if sweep else "all sweeps")


@results_app.command("sweeps")
def results_sweeps(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The sweeps in the database, newest first."""
    rows = [
        {
            "sweep_id": s.id,
            "name": s.name,
            "label": s.label,
            "status": s.status,
            "jobs": s.job_count,
            "created_at": s.created_at.isoformat(),
            "tvm_version": s.tvm_version,
            "source": s.source_path,
        }
        for s in _store(db).list_sweeps()
    ]
    if as_json:
        _print_json(rows)
        return
    report.simple_table(console, rows, title="sweeps")


@results_app.command("show")
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
) -> None:
    """One job: configuration, build facts, pass trace, samples, errors, top kernels; --diff another job."""
    from orchestrator import analysis_views, why
    from orchestrator.query import resolve_sweep

    store = _store(db)
    with _query_errors():  # a sweep may be named by label too
        sweep = resolve_sweep(store, sweep).id if sweep else None
        diff_sweep = resolve_sweep(store, diff_sweep).id if diff_sweep else None
    detail = store.job_detail(job, sweep)
    if detail is None:
        fail(f"no job with key starting {job!r}; `tvmbench results list` shows the keys")
    other = None
    if diff is not None:
        other = store.job_detail(diff, diff_sweep)
        if other is None:
            fail(f"no job with key starting {diff!r} to diff against; `tvmbench results list` shows the keys")
    kernels = why.kernel_profile(store, detail["job_key"], detail["sweep_id"])
    trace_a = (detail.get("build") or {}).get("pass_trace") or []
    trace_b = ((other or {}).get("build") or {}).get("pass_trace") or []
    label_a, label_b = (f"{d['job_key'][:12]} {d['executor']} O{d['opt_level']}" for d in (detail, other or detail))
    pass_diff = why.pass_trace_diff(trace_a, trace_b, label_a, label_b) if other else None
    if as_json:
        extra = {"kernel_profile": kernels, "diff_job": other and other["job_key"], "pass_diff": pass_diff}
        _print_json({**detail, **extra})
        return
    report.job_detail(console, detail)
    analysis_views.print_kernels(console, kernels, top)
    if other is not None:
        console.print(f"[bold]pass trace diff[/] {label_a} -> {label_b}:", highlight=False)
        if not pass_diff:
            console.print(f"  identical ({len(trace_a)} passes)")
        for line in pass_diff or []:
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
            console.print(f"  [{style}]{line}[/]", highlight=False, markup=True)


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


def _when(value: str | None, option: str):
    from datetime import UTC, datetime

    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        fail(f"{option} {value!r} is not an ISO date/time; write e.g. 2026-11-29 or 2026-11-29T14:00")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _filters(sweep, model, target, board, executor, opt_level, pipeline, status, since, until):
    from orchestrator.query import Filters

    return Filters(
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


@contextmanager
def _query_errors():
    from orchestrator.query import QueryError

    try:
        yield
    except QueryError as exc:
        fail(str(exc), code=2)


TABLE_ROWS = 200


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


@results_app.command("query")
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
    db: DbOpt = None,
    as_json: JsonOpt = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.")] = False,
) -> None:
    """Filter results; optionally group (counts, median/fastest/slowest of ok medians) or pivot them."""
    from orchestrator import analysis_views, query

    filters = _filters(sweep, model, target, board, executor, opt_level, pipeline, status, since, until)
    table_only = not (group_by or pivot or as_json or as_csv)
    if table_only and limit is None:
        limit = TABLE_ROWS  # a terminal table of a million rows helps nobody; --csv/--json give them all
    with _query_errors():
        df = query.query(_store(db), filters, limit=limit)
        if pivot:
            df = query.pivot(df, _split(group_by), pivot)
        elif group_by:
            df = query.group(df, _split(group_by))
        elif not (as_json or as_csv):
            df = df[["job_key", "sweep_label", "model", "target", "board", "executor", "opt_level", "pipeline",
                     "status", "unit", "median", "std", "max_abs_err", "emulated"]]  # fmt: skip
    analysis_views.write_frame(console, df, filters.describe(), "json" if as_json else "csv" if as_csv else "table")
    if table_only and len(df) == limit:
        console.print(f"showing the first {limit} rows: --limit N shows more, --csv or --json all of them")


@results_app.command("best")
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
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per (model, board): the fastest configuration whose outputs were correct, its speed-ups and certainty."""
    from orchestrator import analysis_views, ranking

    filters = _filters(sweep, model, target, board, executor, None, pipeline, None, None, None)
    with _query_errors():
        rows = ranking.best(_store(db), filters, confidence=confidence)
    if as_json:
        _print_json(analysis_views.records(rows))
        return
    analysis_views.print_best(console, rows, confidence)


@results_app.command("compare")
def results_compare(
    sweep_a: Annotated[str, typer.Argument(help="Baseline sweep (id, prefix or label).")],
    sweep_b: Annotated[str, typer.Argument(help="Sweep to judge against it.")],
    threshold: Annotated[float, typer.Option(help="Relative change that counts (0.05 = 5 %).")] = 0.05,
    alpha: Annotated[float, typer.Option(help="Significance level of the Mann-Whitney U test.")] = 0.05,
    show_all: Annotated[bool, typer.Option("--all", help="List unchanged jobs too.")] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Matched jobs of two sweeps: ratio B/A, its CI, a rank test on the samples; exit 1 on regressions."""
    from orchestrator import analysis_views
    from orchestrator.compare import compare

    with _query_errors():
        result = compare(_store(db), sweep_a, sweep_b, threshold=threshold, alpha=alpha)
    if as_json:
        _print_json(
            {
                "sweep_a": result.sweep_a,
                "sweep_b": result.sweep_b,
                "summary": result.summary(),
                "geomean_ratio": analysis_views._jsonable(result.geomean_ratio),
                "only_a": result.only_a,
                "only_b": result.only_b,
                "rows": analysis_views.records(result.rows),
            }
        )
    else:
        analysis_views.print_compare(console, result, show_all)
    if result.count("regression") or result.count("broken"):
        raise typer.Exit(1)


@results_app.command("regressions")
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
) -> None:
    """Results slower than their own history (same model, target, executor, opt_level, pipeline, board key)."""
    from orchestrator import analysis_views, regressions

    filters = _filters(sweep, model, target, board, executor, None, None, None, None, None)
    params = regressions.Params(lookback=lookback, z=z, threshold=threshold)
    with _query_errors():
        rows = regressions.find(_store(db), filters, method=method, params=params, include_all=show_all)
    if as_json:
        _print_json(analysis_views.records(rows))
        return
    analysis_views.print_regressions(console, rows, method)


@app.command("report")
def report_cmd(
    sweep: Annotated[str, typer.Argument(help="Sweep id, id prefix or label.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="HTML file to write.")] = Path("report.html"),
    png: Annotated[Path | None, typer.Option("--png", help="Also write each plot as a PNG into this folder.")] = None,
    db: DbOpt = None,
) -> None:
    """One self-contained HTML report of a sweep: latency plots, ranking, regressions, failures."""
    from orchestrator import html_report

    with _query_errors():
        written = html_report.write_report(_store(db), sweep, output, png_dir=png)
    console.print(f"report {written.html} ({written.plots} plot(s))" + (f", PNGs in {png}" if png else ""))


# --- farm -------------------------------------------------------------------------------------------


@farm_app.command("up")
def farm_up(
    boards: Annotated[int, typer.Option(help="Number of host CPU boards.")] = 1,
    key: Annotated[str, typer.Option(help="Tracker key of the boards.")] = "host",
    host: Annotated[
        str, typer.Option(help="Address to bind. Anything but 127.0.0.1 exposes remote code execution.")
    ] = farm_mod.LOOPBACK,
    port: Annotated[int | None, typer.Option(help="Tracker port (default: a free one).")] = None,
    board: Annotated[
        list[str] | None,
        typer.Option(
            "--board",
            help="Also start an emulated board of this kind (repeatable): "
            + ", ".join(farm_mod.EMULATED_BOARDS)
            + ". Provisioned on first use, then cached.",
        ),
    ] = None,
) -> None:
    """Start a local tracker and N board agents that stay up until `farm down`."""
    home = _home()
    state = farm_mod.read_state(home)
    if state:
        fail(f"a farm is already configured at {state['tracker']}; run `tvmbench farm down` first")
    wanted: dict[str, int] = {key: boards} if boards else {}
    roots: dict[str, str] = {}
    for kind in board or []:
        if kind not in farm_mod.EMULATED_BOARDS:
            fail(
                f"--board {kind!r} is not a board this machine can emulate; "
                f"use one of: {', '.join(farm_mod.EMULATED_BOARDS)}"
            )
        root = farm_mod.board_root(kind)
        if not farm_mod.is_provisioned(root):
            err.print(f"[dim]provisioning board {kind} into {root} (once; about a minute)[/]")
        try:
            roots[kind] = str(farm_mod.provision_board(kind, root, log=home / "logs" / f"provision-{kind}.log"))
        except farm_mod.FarmError as exc:
            fail(str(exc))
        wanted[kind] = wanted.get(kind, 0) + 1
    if not wanted:
        fail("no boards asked for: give --boards N and/or --board KIND")
    try:
        local = farm_mod.LocalFarm.start(
            home / "logs" / "farm", wanted, host=host, tracker_port=port, board_roots=roots
        )
    except farm_mod.FarmError as exc:
        fail(str(exc))
    farm_mod.write_state(home, local.to_json())
    described = ", ".join(f"{n} with key {k!r}" for k, n in wanted.items())
    console.print(f"farm up: tracker {local.tracker}, boards: {described}")


@farm_app.command("down")
def farm_down() -> None:
    """Stop the farm `farm up` started, or forget the one `farm connect` recorded."""
    tracker = farm_mod.down(_home())
    console.print(f"farm at {tracker} stopped" if tracker else "no farm configured")


@farm_app.command("connect")
def farm_connect(address: str) -> None:
    """Use an existing TVM RPC tracker (HOST:PORT) as the farm."""
    home = _home()
    if farm_mod.read_state(home):
        fail("a farm is already configured; run `tvmbench farm down` first")
    try:
        summary = farm_mod.connect(home, address)
    except (farm_mod.FarmError, ValueError) as exc:
        fail(str(exc))
    keys = (
        ", ".join(f"{k} ({v.get('free', 0)} free)" for k, v in summary.get("queue_info", {}).items()) or "no boards yet"
    )
    console.print(f"farm: tracker {address}; keys: {keys}")


@farm_app.command("add")
def farm_add(key: Annotated[str, typer.Option(help="Tracker key of the new board.")] = "host") -> None:
    """Add one host CPU board to the farm `farm up` started."""
    home = _home()
    state = farm_mod.read_state(home)
    if not state or not state.get("managed"):
        fail("no local farm is up; run `tvmbench farm up` first")
    local = farm_mod.LocalFarm.from_json(state)
    board = local.add_board(key)
    farm_mod.write_state(home, local.to_json())
    console.print(f"board {key}@{local.host}:{board.port} registered")


@farm_app.command("list")
def farm_list(
    tracker: TrackerOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    live: Annotated[
        bool, typer.Option("--live/--no-live", help="Ask each free board for its facts (else the database's).")
    ] = True,
) -> None:
    """Every board the tracker knows: key, state (free/busy), and its facts (live, else from the database)."""
    address = tracker or farm_mod.configured_tracker(_home())
    if not address:
        fail("no farm configured: `tvmbench farm up` starts a local one, `tvmbench farm connect HOST:PORT` uses yours")
    try:
        rows = farm_mod.board_rows(address)
    except OSError as exc:
        fail(f"tracker {address} does not answer ({exc}); is it running? (`tvmbench farm up`)")
    known = {b.id: b for b in _store(db).boards()}
    try:
        fresh = farm_mod.live_board_facts(address) if live else {}
    except OSError:
        fresh = {}
    for row in rows:
        board = known.get(row["board"])
        facts = fresh.get(row["board"]) or (board.facts if board else None) or {}
        health = board.state if board else "new"
        # Answered now: free (or its recorded health if that is bad); not answered: in use.
        answered = "free" if health in ("new", "ok") else health
        state = answered if row["board"] in fresh else ("busy" if live else health)
        row.update(
            {
                "state": state,
                "agent": "tvmbench" if facts else ("stock" if row["board"] in fresh else None),
                "arch": facts.get("arch") or (board.arch if board else None),
                "emulated": facts.get("emulated", board.emulated if board else None),
                "cpu": facts.get("cpu_model"),
                "cores": facts.get("cores"),
                "mem_mb": facts.get("mem_total_mb"),
                "os": facts.get("os"),
                "tvm": facts.get("tvm_version"),
                "facts": facts or None,
            }
        )
    if as_json:
        _print_json({"tracker": address, "boards": rows})
        return
    report.simple_table(
        console, [{k: v for k, v in r.items() if k != "facts"} for r in rows], title=f"farm at {address}"
    )


@farm_app.command("reset")
def farm_reset(board: str, db: DbOpt = None) -> None:
    """End a board's quarantine (BOARD: its id from `farm list`, or a prefix): it gets work again."""
    ids = _store(db).reset_board(board)
    if not ids:
        fail(f"no board {board!r} in the results database; `tvmbench farm list` shows the board ids")
    console.print(f"reset to ok (health check runs before its next job): {', '.join(ids)}")


# --- targets and db ---------------------------------------------------------------------------------


@targets_app.command("list")
def targets_list(as_json: JsonOpt = False) -> None:
    """Target presets usable as preset = "NAME" in a sweep file."""
    from workers.targets import PRESETS

    rows = [
        {
            "preset": p.name,
            "board_key": p.board_key,
            "arch": p.arch,
            "tvm_target": json.dumps(p.tvm_target),
            "cross_compiler": p.cross_compiler or "",
            "debian_packages": p.cross_compiler_package or "",
            "emulated": p.emulated,
        }
        for p in PRESETS.values()
    ]
    if as_json:
        _print_json(rows)
        return
    report.simple_table(console, rows, title="target presets")


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Apply the schema migrations to the database (done automatically on open too)."""
    store = _store(db)
    console.print(f"database {store.url} is at the newest schema")


if __name__ == "__main__":
    app()
