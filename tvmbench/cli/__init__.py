"""The `tvmbench` command line: one module per command group, each command one library call.

The groups share their options and helpers through ``tvmbench.cli.common``; a new group is a
module with its own ``typer.Typer()`` and one ``app.add_typer(...)`` line here.
"""

from __future__ import annotations

import typer

from tvmbench.cli import common, db, farm, report, results, serve, sweep, targets, toolchains, tuning

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Sweep TVM Relax build configurations across an RPC device farm; keep every result in SQL.",
)


@app.callback()
def _each_command() -> None:
    """Every command starts with the default table options (one process may run several: tests, a REPL)."""
    common.tables()


app.add_typer(sweep.app, name="sweep")
app.add_typer(results.app, name="results")
app.add_typer(farm.app, name="farm")
app.add_typer(targets.app, name="targets")
app.add_typer(db.app, name="db")
app.add_typer(tuning.app, name="tuning")
app.add_typer(toolchains.app, name="toolchains")
app.command("report")(report.report_cmd)
app.command("serve")(serve.serve)

if __name__ == "__main__":
    app()
