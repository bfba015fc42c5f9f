"""The Toolchain record: one Python environment with a TVM, as ``toolchains add`` recorded it."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

Kind = Literal["installed", "release", "wheel", "interpreter"]
INSTALLED = "installed"  # the name of the implicit default: the running interpreter's TVM
RECORD_FILE = "toolchain.json"


class ToolchainError(Exception):
    """One line naming the toolchain or spec at fault and what to do (the CLI exits 2 with it)."""


@dataclass(frozen=True)
class Toolchain:
    """A Python interpreter whose TVM builds (and runs) artifacts of one release.

    ``spec`` is what was asked for: the release string, the wheel's path or the interpreter's path.
    ``libraries`` are the TVM shared libraries its import loaded at ``add`` (what ``check`` looks for).
    """

    name: str
    kind: Kind
    spec: str
    python: str
    tvm_version: str
    ffi_version: str
    libraries: tuple[str, ...] = ()
    python_version: str | None = None
    provision_s: float | None = None  # how long ``add`` took (venv, pip, import check)
    created_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pythonpath(self) -> str | None:
        """An interpreter's PYTHONPATH as it was at add ("" when unset); None for a venv (it gets none)."""
        return self.extra.get("pythonpath", "") if self.kind in ("interpreter", "installed") else None

    @property
    def label(self) -> str:
        """How error lines name it: the name, and the TVM release when the name does not say it."""
        return self.name if self.name == self.tvm_version else f"{self.name} (TVM {self.tvm_version})"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Toolchain:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}  # a newer tvmbench's record still reads
        data["libraries"] = tuple(data.get("libraries") or ())
        return cls(**data)


def installed() -> Toolchain:
    """The implicit default toolchain: this interpreter and its TVM (versions read without importing TVM)."""
    from workers.build_common import tvm_versions

    tvm_version, ffi_version = tvm_versions()
    return Toolchain(
        INSTALLED,
        "installed",
        sys.executable,
        sys.executable,
        tvm_version,
        ffi_version,
        extra={"pythonpath": os.environ.get("PYTHONPATH", "")},
    )


def write_record(directory: Path, toolchain: Toolchain) -> None:
    """Write ``toolchain.json`` atomically: a folder without one is an unfinished ``add``, never listed."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{RECORD_FILE}.{os.getpid()}"
    tmp.write_text(toolchain.to_json())
    tmp.replace(directory / RECORD_FILE)
