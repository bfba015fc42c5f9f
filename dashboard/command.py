"""The `tvmbench serve` command (added to the CLI by one line in orchestrator/cli.py)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            envvar="TVMBENCH_DB",
            help="SQLAlchemy URL of the results database (default: SQLite in TVMBENCH_HOME).",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(help="Address to bind. Anything but loopback shows every result to the network: --allow-remote."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8321,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="Allow a non-loopback --host (the dashboard has no login).")
    ] = False,
    tracker: Annotated[
        str | None,
        typer.Option("--tracker", help="HOST:PORT of a TVM RPC tracker: the Farm page also shows its boards."),
    ] = None,
) -> None:
    """A live, read-only dashboard of the results database in the browser: sweeps, jobs, compare, history, farm.

    Opens the database read-only (SQLite mode=ro, PostgreSQL read-only transactions).
    Binds 127.0.0.1 unless --host and --allow-remote say otherwise.
    """
    from dashboard.server import ServeError
    from dashboard.server import serve as run

    try:
        run(db, host, port, allow_remote=allow_remote, tracker=tracker)
    except ServeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:  # the port is taken, or the address is not this machine's
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port", err=True)
        raise typer.Exit(1) from None
