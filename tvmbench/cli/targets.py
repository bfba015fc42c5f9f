"""`tvmbench targets ...`: the target presets a sweep file can name."""

from __future__ import annotations

import json

import typer

from tvmbench.cli.common import ColumnsOpt, JsonOpt, TsvOpt, WideOpt, console, print_json, tables
from tvmbench.cli.lazy import lazy

columns = lazy("tvmbench.answers.columns")
report = lazy("tvmbench.answers.report")

app = typer.Typer(no_args_is_help=True, help="Target presets.")


@app.command("list")
def targets_list(as_json: JsonOpt = False, wide: WideOpt = False, only: ColumnsOpt = None, tsv: TsvOpt = False) -> None:
    """Target presets usable as preset = "NAME" in a sweep file."""
    from workers.targets import PRESETS

    tables(wide, only, tsv, as_json)
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
        print_json(rows)
        return
    report.simple_table(console, rows, "target presets", columns.TARGETS)
