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
from orchestrator import report
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
                "opt_level": job.opt_level,
                "pipeline": job.pipeline,
                "built": bool(build and build.ok),
                "status": statuses.get(job.key, "new"),
            }
        )
    if as_json:
        _print_json({"sweep_id": spec.sweep_id, "jobs": rows})
        return
    report.plan_table(console, spec.sweep_id, rows)


@contextmanager
def _farm_for_run(tracker: str | None, boards: int):
    """The configured farm, or an ephemeral local one that is stopped afterwards."""
    home = _home()
    address = tracker or farm_mod.configured_tracker(home)
    if address:
        yield address
        return
    _reap_stale_farms(home)
    err.print(f"[dim]no farm configured: starting a local tracker and {boards} host board(s) on 127.0.0.1[/]")
    # Its processes die with this driver even on SIGKILL (PR_SET_PDEATHSIG), and are recorded in a pid
    # file so that the next run or resume stops anything a killed driver left behind.
    local = farm_mod.LocalFarm.start(home / "logs" / "ephemeral-farm", {"host": boards}, die_with_parent=True)
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


def _execute(spec, db: str | None, tracker: str | None, ray_address: str | None, boards: int, as_json: bool) -> None:
    from orchestrator.scheduler import ensure_ray, run_sweep
    from workers.artifacts import ArtifactCache

    store = _store(db)
    cache = ArtifactCache(_home() / "artifacts")
    try:
        with _farm_for_run(tracker, boards) as address:
            ensure_ray(ray_address)
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
                        f"· failed {c.get('failed', 0)}",
                    )

                outcome = run_sweep(spec, store, address, cache, progress=on_progress)
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
) -> None:
    """Run a sweep here: build on Ray, measure on the farm, store every outcome. Re-running finishes what is missing.

    Exit status: 0 all ok, 1 some jobs failed, 2 invalid sweep file, 3 jobs still wait for a device.
    """
    _execute(_load(path, label), db, tracker, ray_address, boards, as_json)


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


@sweep_app.command("cancel")
def sweep_cancel(
    sweep_id: str,
    db: DbOpt = None,
    wait: Annotated[float, typer.Option(help="Seconds to wait for a running driver to stop its jobs.")] = 30.0,
) -> None:
    """Cancel a sweep: its driver closes sessions and frees boards; jobs without a result become `cancelled`."""
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
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One job: configuration, build facts, pass trace, samples, errors."""
    detail = _store(db).job_detail(job, sweep)
    if detail is None:
        fail(f"no job with key starting {job!r}; `tvmbench results list` shows the keys")
    if as_json:
        _print_json(detail)
        return
    report.job_detail(console, detail)


# --- farm -------------------------------------------------------------------------------------------


@farm_app.command("up")
def farm_up(
    boards: Annotated[int, typer.Option(help="Number of host CPU boards.")] = 1,
    key: Annotated[str, typer.Option(help="Tracker key of the boards.")] = "host",
    host: Annotated[
        str, typer.Option(help="Address to bind. Anything but 127.0.0.1 exposes remote code execution.")
    ] = farm_mod.LOOPBACK,
    port: Annotated[int | None, typer.Option(help="Tracker port (default: a free one).")] = None,
) -> None:
    """Start a local tracker and N board agents that stay up until `farm down`."""
    home = _home()
    state = farm_mod.read_state(home)
    if state:
        fail(f"a farm is already configured at {state['tracker']}; run `tvmbench farm down` first")
    try:
        local = farm_mod.LocalFarm.start(home / "logs" / "farm", {key: boards}, host=host, tracker_port=port)
    except farm_mod.FarmError as exc:
        fail(str(exc))
    farm_mod.write_state(home, local.to_json())
    console.print(f"farm up: tracker {local.tracker}, {boards} board(s) with key {key!r}")


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
def farm_list(tracker: TrackerOpt = None, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Every board the tracker knows, with its key and what the database knows of it."""
    address = tracker or farm_mod.configured_tracker(_home())
    if not address:
        fail("no farm configured: `tvmbench farm up` starts a local one, `tvmbench farm connect HOST:PORT` uses yours")
    try:
        rows = farm_mod.board_rows(address)
    except OSError as exc:
        fail(f"tracker {address} does not answer ({exc}); is it running? (`tvmbench farm up`)")
    known = {b.id: b for b in _store(db).boards()}
    for row in rows:
        board = known.get(row["board"])
        row.update(
            {
                "arch": board.arch if board else None,
                "state": board.state if board else "new",
                "emulated": board.emulated if board else None,
                "cpu": (board.facts or {}).get("cpu_model") if board else None,
            }
        )
    if as_json:
        _print_json({"tracker": address, "boards": rows})
        return
    report.simple_table(console, rows, title=f"farm at {address}")


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
