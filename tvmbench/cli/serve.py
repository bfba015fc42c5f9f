"""`tvmbench serve`: the read-only web dashboard (package tvmbench/dashboard/) over the results database."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.farm import LOOPBACK
from tvmbench.cli.common import DbOpt, check_range, checked_tracker, fail


def serve(
    db: DbOpt = None,
    host: Annotated[
        str,
        typer.Option(help="Address to bind. Anything but loopback shows every result to the network: --allow-remote."),
    ] = LOOPBACK,
    port: Annotated[int, typer.Option(help="Port to listen on (0: a free one, printed).")] = 8321,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="Allow a non-loopback --host (the dashboard has no login).")
    ] = False,
    tracker: Annotated[
        str | None,
        typer.Option(
            "--tracker",
            callback=checked_tracker,
            help="HOST:PORT of a TVM RPC tracker: the Farm page also shows its boards.",
        ),
    ] = None,
) -> None:
    """A live, read-only dashboard of the results database in the browser: sweeps, jobs, compare, history, farm.

    Opens the database read-only (SQLite mode=ro, PostgreSQL read-only transactions).
    Binds 127.0.0.1 unless --host and --allow-remote say otherwise.
    """
    from tvmbench.dashboard.server import ServeError
    from tvmbench.dashboard.server import serve as run

    check_range("--port", port, 0, 65536)
    try:
        run(db, host, port, allow_remote=allow_remote, tracker=tracker)
    except ServeError as exc:
        fail(str(exc), code=2)
    except OSError as exc:  # the port is taken, or the address is not this machine's
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port", code=2)
