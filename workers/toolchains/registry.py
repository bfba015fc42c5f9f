"""The toolchains of this machine: TVMBENCH_HOME/toolchains/<name>/toolchain.json, plus the installed one."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import IO, Any

from db.store import default_home
from workers.toolchains.spec import ToolchainSpec, parse
from workers.toolchains.toolchain import INSTALLED, RECORD_FILE, Toolchain, ToolchainError, installed


def root() -> Path:
    """Where toolchains live: TVMBENCH_HOME/toolchains (not created here)."""
    return default_home() / "toolchains"


def directory(name: str) -> Path:
    """The folder of toolchain ``name`` (its venv, for a release or a wheel, and its record)."""
    return root() / name


def lock_file(name: str) -> Path:
    """The lock of toolchain ``name``: exclusive while ``add`` provisions it or ``remove`` deletes it, shared
    while a sweep builds or measures with it (``hold``) and while a farm's board agent runs its runtime."""
    return root() / f".{name}.lock"


def hold(name: str) -> IO[str]:
    """A shared hold on toolchain ``name`` (waits for an ``add`` of it to finish): ``remove`` refuses while
    it is open. Closing the file (or the process ending, however) lets go of it."""
    root().mkdir(parents=True, exist_ok=True)
    lock = open(lock_file(name), "a")  # noqa: SIM115 - the caller keeps it open for the sweep
    fcntl.flock(lock, fcntl.LOCK_SH)
    return lock


def lock_holders(path: Path, *, include_self: bool = False) -> list[int]:
    """The pids holding a lock on ``path``, this process left out unless ``include_self`` (Linux /proc/locks;
    [] where it cannot be read)."""
    try:
        st = os.stat(path)
        wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  READ  1234 08:01:5678 0 EOF" (a blocked waiter's line has "->" after the number)
        if wanted in fields:
            pid = fields[fields.index(wanted) - 1]
            if pid.isdigit() and (include_self or int(pid) != os.getpid()):
                pids.append(int(pid))
    return sorted(set(pids))


def _exclusive(name: str) -> IO[str]:
    """The toolchain's lock taken exclusively at once (ToolchainError naming who holds it)."""
    root().mkdir(parents=True, exist_ok=True)
    lock = open(lock_file(name), "a")  # noqa: SIM115 - closed by the caller
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        holders = lock_holders(lock_file(name))
        by = f" by process {', '.join(map(str, holders))}" if holders else ""
        raise ToolchainError(
            f"toolchain {name} is in use{by} (a sweep that builds or measures with it, a farm board that runs "
            "its runtime, or an add of it): its builds would fail as the release's own; wait for it to end "
            "(`tvmbench sweep cancel ID` stops a sweep, `tvmbench farm down` a farm's boards), then remove it"
        ) from None
    return lock


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


def remove(spec: Any) -> Toolchain | Path:
    """Delete a toolchain's folder (its venv and record); ToolchainError for the installed or an unknown one,
    or one in use. A folder an unfinished ``add`` left (no record) is deleted too: its path is returned."""
    toolchain = find(spec)
    if toolchain is None:
        leftover = _unfinished(spec)
        if leftover is not None:
            with _exclusive(leftover.name):  # an add still provisioning it holds it
                shutil.rmtree(leftover, ignore_errors=True)
            return leftover
        shown = spec["python"] if isinstance(spec, dict) else spec
        raise ToolchainError(f"no toolchain {shown!r}: `tvmbench toolchains list` shows the toolchains added here")
    if toolchain.kind == INSTALLED:
        raise ToolchainError(
            "the installed toolchain is the TVM tvmbench itself runs on and cannot be removed: remove an added one"
        )
    # A sweep using it holds it (orchestrator/toolchains.ensure): deleting its venv under the sweep turned
    # every build left into a final `build` row blaming the release ("No module named 'tvm'").
    with _exclusive(toolchain.name):
        shutil.rmtree(directory(toolchain.name))
    return toolchain


def _unfinished(spec: Any) -> Path | None:
    """The folder an unfinished ``add`` of a release or a wheel left (a venv without a record), or None."""
    try:
        parsed = parse(spec)
    except ToolchainError:
        return None
    if parsed.kind == "interpreter":  # an interpreter's add makes no folder before its record
        return None
    folder = directory(parsed.name())
    return folder if folder.is_dir() and not (folder / RECORD_FILE).exists() else None
