"""`tvmbench db ...`: the results database's schema."""

from __future__ import annotations

import typer

from db.urls import shown_url
from tvmbench.cli.common import INVALID, DbOpt, console, fail, open_store

app = typer.Typer(no_args_is_help=True, help="The results database.")


@app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Apply the schema migrations to the database (done automatically on open too)."""
    from db.engine import in_memory
    from db.schema import head_revision  # SQLAlchemy: imported by the command, not by `tvmbench --help`

    if db is not None and in_memory(db):  # db is TVMBENCH_DB too (typer reads it): both named below
        # Nothing to upgrade in it, and ":memory:" as a path once made a file of that name here.
        fail(
            f"database {db} (--db or TVMBENCH_DB): an in-memory SQLite database holds nothing to upgrade; "
            "give the file or URL of the database to upgrade, e.g. --db results.db",
            INVALID,
        )
    store = open_store(db)
    shown, head, before = shown_url(store.url), head_revision(), store.revision_before
    if before == head:
        said = f"database {shown} is at the newest schema (revision {head}); nothing to do"
    elif before is None:
        said = f"database {shown}: created the tvmbench schema (revision {head})"
    else:
        said = f"database {shown}: upgraded the schema from revision {before} to {head}"
    console.print(said, highlight=False)
