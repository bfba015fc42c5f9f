"""The toolchains a sweep's ``tvm`` axis needs: which are added here, which are missing, provisioning them.

A job of the axis carries its toolchain as text (``Job.toolchain``), written here by ``canonical``: a
release as itself ("0.26.0"), a wheel as its absolute path, an interpreter as ``python:`` and its absolute
path (symlinks kept: a venv's python is a link to the base interpreter, which has no TVM of its own). An
entry naming the installed release is a job of that release built by the installed toolchain (no venv).
A job of another release is measured on boards of its release (``workers.toolchains.boards.release_key``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tvmbench.core.records import Job
from workers.toolchains.boards import installed_version, release_key
from workers.toolchains.spec import ToolchainSpec, check_wheel, parse
from workers.toolchains.toolchain import INSTALLED, Toolchain, ToolchainError, installed

# The spec loader imports this module for ``canonical``: the registry (db.store, SQLAlchemy), provisioning
# and the probe are imported where they are used, so loading a sweep file stays as cheap as it was.

INTERPRETER = "python:"


def canonical(parsed: ToolchainSpec, base: Path) -> str:
    """A job's toolchain text for a parsed entry of the axis; relative paths resolve against ``base``."""
    if parsed.kind == "release":
        return parsed.value
    path = os.path.abspath(base / Path(parsed.value).expanduser())  # abspath: no symlink resolved
    return INTERPRETER + path if parsed.kind == "interpreter" else path


def spec_of(text: str) -> Any:
    """What ``registry.find`` and ``provision.add`` take for a job's toolchain text."""
    return {"python": text[len(INTERPRETER) :]} if text.startswith(INTERPRETER) else text


def shown(text: str) -> str:
    """How a line names a toolchain text: the release, the wheel's path, or ``python = PATH``."""
    return f"python = {text[len(INTERPRETER) :]}" if text.startswith(INTERPRETER) else text


def add_command(text: str) -> str:
    """The command that adds the toolchain ``text``."""
    if text.startswith(INTERPRETER):
        return f"tvmbench toolchains add --python {text[len(INTERPRETER) :]}"
    return f"tvmbench toolchains add {text}"


@dataclass(frozen=True)
class Need:
    """One toolchain a sweep needs: its text, the TVM release it builds with, and the toolchain when added."""

    text: str
    tvm_version: str
    toolchain: Toolchain | None  # None: not added here (``sweep run`` provisions it)

    @property
    def missing(self) -> bool:
        return self.toolchain is None

    def row(self) -> dict[str, Any]:
        """What `sweep plan --json` says of it."""
        return {
            "toolchain": self.text,
            "tvm_version": self.tvm_version,
            "name": self.toolchain.name if self.toolchain else None,
            "installed": self.toolchain is not None and self.toolchain.kind == INSTALLED,
            "missing": self.missing,
            "add": add_command(self.text) if self.missing else None,
        }


def need(text: str) -> Need:
    """The toolchain ``text`` stands for (ToolchainError, one line: an unknown release, a missing or
    non-wheel file, an interpreter that cannot import TVM). Nothing is provisioned here."""
    from workers.toolchains import probe, provision, registry

    spec = spec_of(text)
    parsed = parse(spec)
    if parsed.kind == "release":
        if text == installed_version():
            return Need(text, text, installed())
        found = registry.find(text)
        if found is None:
            provision.check_release(text)  # not on the index, or without a pin: its one line
        return Need(text, text, found)
    found = registry.find(spec)
    if parsed.kind == "wheel":
        version = check_wheel(Path(parsed.value))  # the file may have gone since it was added
        return Need(text, found.tvm_version if found else version, found)
    if found is not None:
        return Need(text, found.tvm_version, found)
    facts = probe.run_facts(parsed.value, quick=True, what="interpreter", pythonpath=os.environ.get("PYTHONPATH", ""))
    return Need(text, facts["tvm_version"], None)


def needs(toolchains: tuple[str, ...]) -> list[Need]:
    """``need`` of each toolchain of a sweep's axis, in the axis' order."""
    return [need(text) for text in toolchains]


class Held(dict):  # type: ignore[type-arg]  # dict[str, Toolchain]
    """The toolchains of a sweep, each held (registry.hold) for as long as this mapping lives.

    The sweep keeps the mapping to its end, so ``toolchains remove`` refuses meanwhile; when the mapping is
    dropped (or the process ends, however) the holds go with it. It pickles as a plain dict.
    """

    def __init__(self) -> None:
        super().__init__()
        self.holds: list[IO[str]] = []

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))

    def release(self) -> None:
        """Let go of every hold now (what dropping the mapping does)."""
        for lock in self.holds:
            lock.close()
        self.holds.clear()

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *_exc: object) -> None:
        # Now, not when the mapping is collected: a traceback that keeps it alive kept the holds, and an
        # ``add`` of the same toolchain in this process then waited for its own lock.
        self.release()


def ensure(
    toolchains: tuple[str, ...], *, provision_missing: bool = True, progress: Callable[[str], None] = lambda _l: None
) -> Held:
    """Each toolchain text -> its toolchain, the missing ones provisioned first (with ``progress`` lines), every
    added one held while the mapping lives (``Held``).

    With ``provision_missing`` False a missing toolchain is a ToolchainError naming it and its ``add``.
    Use it as a context manager to let go of the holds at a known point (``Held.release``).
    """
    found = Held()
    try:
        _find_each(found, toolchains, provision_missing, progress)
    except BaseException:
        found.release()  # a refusal or Ctrl-C half-way holds nothing (a traceback kept the holds alive)
        raise
    return found


def _find_each(
    found: Held, toolchains: tuple[str, ...], provision_missing: bool, progress: Callable[[str], None]
) -> None:
    from workers.toolchains import provision, registry

    provisioned: list[str] = []  # by this call, for the line a Ctrl-C gets
    for wanted in needs(toolchains):
        toolchain = wanted.toolchain
        if toolchain is None:
            if not provision_missing:
                raise ToolchainError(
                    f"toolchain {shown(wanted.text)} (TVM {wanted.tvm_version}) is not added here: "
                    f"`{add_command(wanted.text)}` provisions it, or run without --no-provision"
                )
            progress(f"toolchain {shown(wanted.text)}: not added here, provisioning it (minutes the first time)")
            try:
                toolchain = provision.add(spec_of(wanted.text), progress)
            except KeyboardInterrupt:
                # Ctrl-C: the toolchains provisioned so far are kept (each is whole once recorded); say so.
                kept = f"; {', '.join(provisioned)} provisioned and kept" if provisioned else ""
                progress(
                    f"toolchain {shown(wanted.text)}: provisioning interrupted, nothing of it kept{kept}; "
                    "run the command again to provision the rest"
                )
                raise
            provisioned.append(toolchain.name)
        if toolchain.kind != INSTALLED:
            found.holds.append(registry.hold(toolchain.name))
        found[wanted.text] = toolchain


def version_of(job: Job, toolchains: Mapping[str, Toolchain], default: str) -> str:
    """The TVM release that builds ``job``: its toolchain's, or ``default`` (the installed one) without."""
    return default if job.toolchain is None else toolchains[job.toolchain].tvm_version


def foreign(job: Job, toolchains: Mapping[str, Toolchain]) -> Toolchain | None:
    """The toolchain that builds ``job`` in a child process, or None when it builds in this interpreter."""
    if job.toolchain is None:
        return None
    toolchain = toolchains[job.toolchain]
    return None if toolchain.kind == INSTALLED else toolchain


def board_key(job: Job, toolchains: Mapping[str, Toolchain]) -> str:
    """The tracker key of the boards that run ``job``'s artifact: those of its release."""
    if job.toolchain is None:
        return job.target.board_key
    return release_key(job.target.board_key, toolchains[job.toolchain].tvm_version)


def board_runtimes(toolchains: Mapping[str, Toolchain], *, installed_too: bool = False) -> list[Toolchain] | None:
    """One toolchain per release the axis needs, for an ephemeral farm to start boards of each (None:
    no axis, the installed release's boards only). The installed release's boards keep the plain key.

    ``installed_too``: the sweep also has jobs of no release (an ONNX Runtime baseline), which run on the
    installed release's boards even when the axis does not name it.
    """
    if not toolchains:
        return None
    by_version: dict[str, Toolchain] = {installed_version(): installed()} if installed_too else {}
    for toolchain in toolchains.values():
        version = toolchain.tvm_version
        by_version.setdefault(version, installed() if version == installed_version() else toolchain)
    return list(by_version.values())
