"""`tvmbench report`: one sweep's self-contained HTML report, to a file or to stdout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tvmbench.cli.common import DbOpt, console, err, fail, failures_as_lines, open_store
from tvmbench.cli.results import name_notes


def report_cmd(
    sweep: Annotated[str, typer.Argument(help="Sweep id, id prefix or label.")],
    # A string, not a Path: Path("./-") is Path("-"), and `-o ./-` must still name a file called "-".
    output: Annotated[
        str, typer.Option("-o", "--output", metavar="FILE", help="HTML file to write; - writes it to stdout.")
    ] = "report.html",
    png: Annotated[Path | None, typer.Option("--png", help="Also write each plot as a PNG into this folder.")] = None,
    db: DbOpt = None,
) -> None:
    """One self-contained HTML report of a sweep: latency plots, ranking, regressions, failures."""
    from tvmbench.answers import html_report

    name_notes()
    to_stdout = output == "-"  # the Unix convention: `report S -o - | gzip > r.html.gz`
    path = Path(output)
    if not to_stdout and path.is_dir():
        fail(f"-o {output} is a directory: give a file path such as {path / 'report.html'}", code=2)
    if png is not None and png.exists() and not png.is_dir():
        fail(f"--png {png} is a file, not a folder: give a folder for the PNGs (made if missing)", code=2)
    if to_stdout:
        sys.stdout.flush()  # nothing the text stream holds may land after (or inside) the page's bytes
    target = sys.stdout.buffer if to_stdout else path
    try:
        with failures_as_lines():
            written = html_report.write_report(open_store(db, read_only=True), sweep, target, png_dir=png)
    except OSError as exc:  # a full disk, a read-only folder, /dev/full: one line, not a traceback
        if to_stdout and exc.filename is None:
            raise  # stdout itself: a reader gone (| head) or a full disk is the entry point's (cli/main.py)
        fail(f"cannot write the report to {exc.filename or output}: {exc.strerror or exc}")
    where = "to stdout" if written.html is None else str(written.html)
    said = f"report {where} ({written.plots} plot(s))" + (f", PNGs in {png}" if png else "")
    said_to = err if to_stdout else console  # with -o - stdout carries the page alone: the summary to stderr
    said_to.print(said, soft_wrap=not said_to.is_terminal)  # long paths: one line in a pipe
