"""`tvmbench db ...`: the results database's schema."""

from __future__ import annotations

import typer

from db.urls import shown_url
from tvmbench.cli.common import DbOpt, console, open_store

app = typer.Typer(no_args_is_help=True, help="The results database.")


@app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Apply the schema migrations to the database (done automatically on open too)."""
    store = open_store(db)
    console.print(f"database {shown_url(store.url)} is at the newest schema", highlight=False)
