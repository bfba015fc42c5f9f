"""The toolchains of this machine: TVMBENCH_HOME/toolchains/<name>/toolchain.json, plus the installed one."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from db.store import default_home
from workers.toolchains.spec import ToolchainSpec, parse
from workers.toolchains.toolchain import INSTALLED, RECORD_FILE, Toolchain, ToolchainError, installed


def root() -> Path:
    """Where toolchains live: TVMBENCH_HOME/toolchains (not created here)."""
    return default_home() / "toolchains"


def directory(name: str) -> Path:
    """The folder of toolchain ``name`` (its venv, for a release or a wheel, and its record)."""
    return root() / name


def load(name: str) -> Toolchain | None:
    """The recorded toolchain ``name``, None when none is (an unfinished ``add`` has no record)."""
    if name == INSTALLED:
        return installed()
    path = directory(name) / RECORD_FILE
    if not path.is_file():
        return None
    try:
        return Toolchain.from_json(path.read_text())
    except (ValueError, TypeError, KeyError) as exc:
        raise ToolchainError(
            f"toolchain record {path} is unreadable ({exc}): remove that folder and add it again"
        ) from None


def all_toolchains() -> list[Toolchain]:
    """The installed toolchain first, then every recorded one by name."""
    found = [installed()]
    if root().is_dir():
        for record in sorted(root().glob(f"*/{RECORD_FILE}")):
            toolchain = load(record.parent.name)
            if toolchain is not None:
                found.append(toolchain)
    return found


def spec_of(spec: Any) -> ToolchainSpec | None:
    """``spec`` parsed, or None when it is a plain toolchain name (such as "installed" or "wheel-0.26.0")."""
    if isinstance(spec, str) and (spec == INSTALLED or (root() / spec / RECORD_FILE).is_file()):
        return None
    return parse(spec)


def find(spec: Any) -> Toolchain | None:
    """The toolchain a spec or a name stands for, None when it is not added (or is no spec nor name)."""
    try:
        parsed = spec_of(spec)
    except ToolchainError:
        return None
    if parsed is None:
        return load(spec)
    if parsed.kind == "interpreter":
        wanted = str(Path(parsed.value).absolute())
        return next((t for t in all_toolchains()[1:] if t.kind == "interpreter" and t.spec == wanted), None)
    if parsed.kind == "wheel":
        wanted = str(Path(parsed.value).absolute())
        return next((t for t in all_toolchains()[1:] if t.kind == "wheel" and t.spec == wanted), None)
    return load(parsed.name())


def remove(spec: Any) -> Toolchain:
    """Delete a toolchain's folder (its venv and record); ToolchainError for the installed or an unknown one."""
    toolchain = find(spec)
    if toolchain is None:
        shown = spec["python"] if isinstance(spec, dict) else spec
        raise ToolchainError(f"no toolchain {shown!r}: `tvmbench toolchains list` shows the toolchains added here")
    if toolchain.kind == INSTALLED:
        raise ToolchainError(
            "the installed toolchain is the TVM tvmbench itself runs on and cannot be removed: remove an added one"
        )
    shutil.rmtree(directory(toolchain.name))
    return toolchain
