"""`tvmbench db ...`: the results database's schema."""

from __future__ import annotations

import typer

from db.urls import shown_url
from tvmbench.cli.common import DbOpt, console, open_store

app = typer.Typer(no_args_is_help=True, help="The results database.")


@app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Apply the schema migrations to the database (done automatically on open too)."""
    from db.schema import head_revision  # SQLAlchemy: imported by the command, not by `tvmbench --help`

    store = open_store(db)
    shown, head, before = shown_url(store.url), head_revision(), store.revision_before
    if before == head:
        said = f"database {shown} is at the newest schema (revision {head}); nothing to do"
    elif before is None:
        said = f"database {shown}: created the tvmbench schema (revision {head})"
    else:
        said = f"database {shown}: upgraded the schema from revision {before} to {head}"
    console.print(said, highlight=False)
