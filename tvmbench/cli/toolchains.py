"""`tvmbench toolchains list | add SPEC | remove SPEC`: the TVM environments builds can run in.

A SPEC is a release ("0.26.0"), a path to an apache-tvm wheel, or (``--python PATH``) an interpreter where
some TVM imports. The running interpreter's TVM is the implicit toolchain "installed".
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tvmbench.cli.common import INVALID, ColumnsOpt, JsonOpt, TsvOpt, WideOpt, console, fail, note, print_json, tables

app = typer.Typer(no_args_is_help=True, help="TVM toolchains: one environment per release, wheel or interpreter.")

SpecArg = Annotated[
    str | None, typer.Argument(help='A release ("0.26.0"), a wheel\'s path, or a toolchain name from `list`.')
]
PythonOpt = Annotated[
    str | None, typer.Option("--python", help="An interpreter where TVM imports, instead of SPEC.", metavar="PATH")
]


def _spec(spec: str | None, python: str | None) -> Any:
    """SPEC or ``{"python": PATH}``: exactly one of them (exit 2 otherwise)."""
    if (spec is None) == (python is None):
        fail("give one SPEC (a release such as 0.26.0, a wheel's path, a toolchain's name) or --python PATH", INVALID)
    return {"python": python} if python is not None else spec


def _row(toolchain: Any) -> dict[str, Any]:
    return {
        "name": toolchain.name,
        "kind": toolchain.kind,
        "tvm_version": toolchain.tvm_version,
        "ffi_version": toolchain.ffi_version,
        "python": toolchain.python,
        "spec": toolchain.spec,
        "provision_s": toolchain.provision_s,
    }


@app.command("list")
def toolchains_list(
    check: Annotated[bool, typer.Option("--check", help="Also import each toolchain's TVM (seconds each).")] = False,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
) -> None:
    """The toolchains of this machine: the installed one, then those added, with their TVM and tvm-ffi."""
    tables(wide, only, tsv, as_json)
    from tvmbench.answers import columns, report
    from workers.toolchains import probe, registry
    from workers.toolchains.toolchain import ToolchainError

    try:
        found = registry.all_toolchains()
    except ToolchainError as exc:
        fail(str(exc), code=INVALID)
    rows = [_row(t) for t in found]
    if check:
        for row, toolchain in zip(rows, found, strict=True):
            row["status"] = "ok" if toolchain.kind == "installed" else (probe.check(toolchain) or "ok")
    if as_json:
        print_json(rows)
        return
    report.simple_table(console, rows, f"toolchains in {registry.root()}", columns.TOOLCHAINS)


@app.command("add")
def toolchains_add(spec: SpecArg = None, python: PythonOpt = None, as_json: JsonOpt = False) -> None:
    """Provision a release or a wheel in its own venv (or record an interpreter), proven by an import check."""
    from workers.toolchains import provision
    from workers.toolchains.toolchain import ToolchainError

    try:
        toolchain = provision.add(_spec(spec, python), progress=note)
    except ToolchainError as exc:
        fail(str(exc), code=INVALID)
    if as_json:
        print_json(_row(toolchain))
        return
    console.print(
        f"toolchain {toolchain.name}: TVM {toolchain.tvm_version}, tvm-ffi {toolchain.ffi_version} ({toolchain.python})"
    )


@app.command("remove")
def toolchains_remove(spec: SpecArg = None, python: PythonOpt = None) -> None:
    """Delete an added toolchain (its venv and record; an interpreter itself is never touched)."""
    from workers.toolchains import registry
    from workers.toolchains.toolchain import ToolchainError

    try:
        toolchain = registry.remove(_spec(spec, python))
    except ToolchainError as exc:
        fail(str(exc), code=INVALID)
    if isinstance(toolchain, Path):
        console.print(f"removed {toolchain}: what an unfinished add left (no toolchain was recorded there)")
        return
    console.print(f"removed toolchain {toolchain.name} (TVM {toolchain.tvm_version})")
