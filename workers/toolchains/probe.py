"""The import check: a child process of a toolchain's interpreter imports its TVM and reports the facts.

Run at ``toolchains add`` (the full check: the build path's modules and names, ``compat.py``) and by
``check`` (the cheap one: the recorded libraries are there and ``import tvm`` works). A child process,
because a TVM that does not load may not raise: a missing symbol is an OSError, a bad ffi a segfault.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from workers.toolchains.pins import PINS
from workers.toolchains.toolchain import Toolchain, ToolchainError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FACTS_PREFIX = "TVMBENCH-FACTS "
IMPORT_TIMEOUT_S = 300.0  # importing TVM takes seconds; a loaded 2-core machine takes far longer


# Variables that point Python or TVM at another installation: a venv's child must see its own TVM only.
_FOREIGN = ("PYTHONHOME", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__", "TVM_LIBRARY_PATH", "TVM_HOME")


def child_env(pythonpath: str | None = None) -> dict[str, str]:
    """The environment of a toolchain's child: the project importable, then ``pythonpath`` (an interpreter's
    own, recorded at add: a TVM source build is on it); for a venv none of the parent's paths or TVM."""
    keep = ("TVM_LIBRARY_PATH", "TVM_HOME") if pythonpath is not None else ()
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN or k in keep}
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *([pythonpath] if pythonpath else [])])
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a crash in TVM's libraries says where on stderr
    return env


_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception)\b|Fatal Python error|Segmentation fault)")
_FRAME = re.compile(r" in ((tvm|TVM)[\w:]*)")  # the first of TVM's native frames (``in tvm::ffi::ToJSONGraph(``)


def last_line(text: str) -> str:
    """The telling line of a child's stderr: the last that names an error (a traceback's exception line;
    TVM's messages go on over lines listing paths), else the last non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any("Segfault encountered" in line for line in lines):  # tvm_ffi's handler prints the native frames
        frame = next((_FRAME.search(line) for line in lines if _FRAME.search(line)), None)
        return f"segfault in {frame.group(1)}" if frame else "segfault"
    return next((line for line in reversed(lines) if _ERROR_LINE.match(line)), lines[-1] if lines else "no output")


def exit_reason(returncode: int) -> str:
    """'exited with status N' or 'killed by signal N' (a segfault in TVM's libraries is the latter)."""
    return f"killed by signal {-returncode}" if returncode < 0 else f"exited with status {returncode}"


def run_facts(
    python: str, *, quick: bool = False, what: str = "interpreter", pythonpath: str | None = None
) -> dict[str, Any]:
    """The facts ``compat.py`` reports under ``python`` (ToolchainError with one line when it cannot)."""
    if not Path(python).exists():
        raise ToolchainError(f"{what} {python} does not exist: give the path of a python that can import tvm")
    command = [python, "-m", "workers.toolchains.compat", *(["--quick"] if quick else [])]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=child_env(pythonpath),
            cwd=PROJECT_ROOT,
            timeout=IMPORT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{what} {python}: importing tvm took over {IMPORT_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise ToolchainError(f"{what} {python} cannot run ({exc.strerror or exc}): give a python interpreter") from None
    facts = [line for line in done.stdout.splitlines() if line.startswith(FACTS_PREFIX)]
    if done.returncode != 0 or not facts:
        # A segfault while saving IR as JSON (compat.serialise_smoke) is a mismatched apache-tvm-ffi.
        crashed = done.returncode < 0 or "Segmentation fault" in done.stderr
        doing = "fails the import check" if crashed and not quick else "cannot import TVM"
        hint = ": is its apache-tvm-ffi the one its TVM loads with? (workers/toolchains/pins.py)" if crashed else ""
        raise ToolchainError(
            f"{what} {python} {doing} ({exit_reason(done.returncode)}: {last_line(done.stderr)}){hint}"
        )
    return json.loads(facts[-1][len(FACTS_PREFIX) :])


def import_check(python: str, *, what: str = "interpreter", pythonpath: str | None = None) -> dict[str, Any]:
    """The full check at ``add``: TVM imports and the build path is all there (ToolchainError naming what is not)."""
    facts = run_facts(python, what=what, pythonpath=pythonpath)
    if facts["missing"]:
        shown = "; ".join(facts["missing"][:3]) + (
            f"; and {len(facts['missing']) - 3} more" if len(facts["missing"]) > 3 else ""
        )
        raise ToolchainError(
            f"{what} {python} has TVM {facts['tvm_version']} but not what the build needs ({shown}): "
            "install the missing packages into it (pip install onnx numpy), or use a supported release"
        )
    return facts


def check(toolchain: Toolchain) -> str | None:
    """None when the toolchain still imports its TVM, else one line naming it and how to mend it.

    Cheap: the recorded libraries exist, then a child imports ``tvm`` alone (a second or two) and must
    report the versions recorded at ``add``.
    """
    mend = (
        f"`tvmbench toolchains remove {toolchain.name}` and add it again"
        if toolchain.kind in ("release", "wheel")
        else "repair that interpreter's TVM, or remove the toolchain"
    )
    pin = PINS.get(toolchain.tvm_version)
    if toolchain.kind == "release" and pin is not None and pin.ffi != toolchain.ffi_version:
        return (
            f"toolchain {toolchain.label} has tvm-ffi {toolchain.ffi_version}, but that release loads with "
            f"{pin.ffi} (workers/toolchains/pins.py): `tvmbench toolchains add {toolchain.name}` provisions it again"
        )
    gone = [lib for lib in toolchain.libraries if not Path(lib).exists()]
    if gone:
        return (
            f"toolchain {toolchain.label} is broken: {Path(gone[0]).name} is gone from {Path(gone[0]).parent}: {mend}"
        )
    try:
        facts = run_facts(
            toolchain.python, quick=True, what=f"toolchain {toolchain.label}: python", pythonpath=toolchain.pythonpath
        )
    except ToolchainError as exc:
        return f"{exc}: {mend}"
    now = (facts["tvm_version"], facts["ffi_version"])
    if now != (toolchain.tvm_version, toolchain.ffi_version):
        return (
            f"toolchain {toolchain.label} changed: it now imports TVM {now[0]} with tvm-ffi {now[1]}, "
            f"not {toolchain.tvm_version} with {toolchain.ffi_version}: {mend}"
        )
    return None
