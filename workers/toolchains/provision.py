"""``toolchains add``: one venv per release or wheel under TVMBENCH_HOME/toolchains/<name>, proven by an import check.

A release gets ``python -m venv`` (this interpreter's Python, so records and pickles cross the boundary),
then ``pip install apache-tvm==X apache-tvm-ffi==<pin> <build needs>`` with pip's progress passed on line by
line, then the full import check (``probe.import_check``); only then is ``toolchain.json`` written, so an
interrupted ``add`` leaves no toolchain, and the next ``add`` starts that folder again. An interpreter is
checked and recorded, never changed. Measured here through ``add`` (2 cores shared with other work, load
average 10-15, wheels in pip's cache): 0.26.0 in 95 s and 117 s, 0.25.0.post1 in 271 s, the 0.26.0 wheel in
154 s; the same pip installs on a quieter machine took 40 s and 105 s. A cold cache downloads ~100 MB more.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeGuard

from workers.toolchains import pins, probe, registry
from workers.toolchains.spec import ToolchainSpec, check_wheel, parse
from workers.toolchains.toolchain import Toolchain, ToolchainError, installed, write_record

Progress = Callable[[str], None]
PIP_TIMEOUT_S = 1800.0  # a cold cache downloads ~100 MB per release; a stuck index must still end
INDEX_TIMEOUT_S = 120.0
# pip's lines worth passing on (the rest is resolver chatter and the config's find-links warnings).
_PIP_PROGRESS = re.compile(r"^(Collecting|Downloading|Installing collected|Successfully installed|Using cached)")


def _quiet(_line: str) -> None:
    pass


def index_versions(package: str = "apache-tvm") -> list[str] | None:
    """The versions of ``package`` on the package index (newest first), None when the index cannot be asked."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", package],
            capture_output=True,
            text=True,
            timeout=INDEX_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.M)
    if found:
        return [v.strip() for v in found.group(1).split(",")]
    return [] if "No matching distribution" in done.stderr else None


def check_release(release: str) -> pins.Pin:
    """The pin of a release tvmbench supports (ToolchainError: not on the index, or on it without a pin)."""
    pin = pins.PINS.get(release)
    if pin is not None:
        return pin
    supported = ", ".join(pins.PINS)
    # "0.27" or "0.27.0" where the pinned release is 0.27.0.post1: name it, without asking the index.
    meant = [name for name in pins.PINS if name.startswith(release + ".")]
    if meant:
        raise ToolchainError(
            f"TVM release {release} is not a version tvmbench pins: write {meant[-1]} "
            f"(the pinned release{'s' if len(meant) > 1 else ''} it matches: {', '.join(meant)})"
        )
    on_index = index_versions()
    if on_index is None:
        raise ToolchainError(
            f"TVM release {release} has no pin here and the package index cannot be asked: use one of {supported}"
        )
    if release not in on_index:
        raise ToolchainError(
            f"TVM release {release} is not on the package index (apache-tvm has {', '.join(on_index) or 'none'}): "
            f"use one of {supported}"
        )
    raise ToolchainError(
        f"TVM release {release} is on the package index but has no apache-tvm-ffi pin in workers/toolchains/pins.py "
        f"(releases load only with the ffi they were built with): use one of {supported}, or pin it there"
    )


def stale_pin(toolchain: Toolchain) -> str | None:
    """Why a release's venv no longer matches the pin table (tvmbench's pins changed since its add), or None."""
    pin = pins.PINS.get(toolchain.tvm_version)
    if toolchain.kind != "release" or pin is None or pin.ffi == toolchain.ffi_version:
        return None
    return f"toolchain {toolchain.name} has tvm-ffi {toolchain.ffi_version}, but the pin is now {pin.ffi}"


def _pip_install(python: Path, requirements: list[str], label: str, progress: Progress) -> None:
    """pip install into a toolchain's venv, passing pip's progress lines on (ToolchainError with pip's last error)."""
    command = [str(python), "-m", "pip", "install", "--progress-bar", "off", "--no-input", *requirements]
    progress(f"{label}: pip install {' '.join(Path(r).name if r.endswith('.whl') else r for r in requirements)}")
    tail: list[str] = []
    # pip dies with this process: an ``add`` killed with SIGKILL left pip installing into the folder the
    # next ``add`` was clearing ("Directory not empty"), then writing half a venv into the new one.
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_die_with_parent
    ) as pip:
        watchdog = threading.Timer(PIP_TIMEOUT_S, pip.kill)  # a silent, stuck pip ends too
        watchdog.start()
        try:
            assert pip.stdout is not None
            for line in pip.stdout:
                line = line.rstrip()
                if "is ignored: it is neither a file nor a directory" in line:
                    continue
                tail = [*tail[-20:], line]
                if _PIP_PROGRESS.match(line.strip()):
                    progress(f"{label}: {line.strip()}")
        finally:
            watchdog.cancel()
    if pip.returncode == -signal.SIGKILL:
        raise ToolchainError(f"{label}: pip install ran over {PIP_TIMEOUT_S:g} s: is the package index reachable?")
    if pip.returncode != 0:
        errors = [line for line in tail if line.startswith("ERROR")] or tail or ["no output"]
        raise ToolchainError(f"{label}: pip install failed: {errors[-1].strip()}")


def _die_with_parent() -> None:
    """In pip's child before exec: SIGKILL when the ``add`` that started it dies (Linux prctl).

    The thread that forks waits for pip to the end (``_pip_install``), so the signal never comes early.
    (orchestrator/farm/processes.py has the farm's own copy: workers cannot import the orchestrator.)
    """
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _make_venv(directory: Path, label: str, progress: Progress) -> Path:
    """A fresh venv in ``directory`` (what an unfinished ``add`` left there goes first); its python."""
    if directory.exists():
        try:
            shutil.rmtree(directory)
        except OSError as exc:
            culprit = exc.filename or directory
            raise ToolchainError(
                f"{label}: cannot clear what an unfinished add left in {directory} ({exc.strerror or exc}: "
                f"{culprit}): a pip of an add that was killed may still be writing there; wait for it to end "
                f"(`pgrep -af '{directory}'`), or delete the folder, then add it again"
            ) from None
    progress(f"{label}: creating a Python {sys.version_info.major}.{sys.version_info.minor} venv in {directory}")
    done = subprocess.run([sys.executable, "-m", "venv", str(directory)], capture_output=True, text=True)
    if done.returncode != 0:
        raise ToolchainError(f"{label}: cannot create a venv in {directory}: {probe.last_line(done.stderr)}")
    return directory / "bin" / "python"


def _record(
    name: str, parsed: ToolchainSpec, spec_text: str, python: Path, facts: dict[str, Any], started: float
) -> Toolchain:
    return Toolchain(
        name=name,
        kind=parsed.kind,  # type: ignore[arg-type]
        spec=spec_text,
        python=str(python),
        tvm_version=facts["tvm_version"],
        ffi_version=facts["ffi_version"],
        libraries=tuple(facts.get("libraries") or ()),
        python_version=facts.get("python_version"),
        provision_s=round(time.monotonic() - started, 1),
        created_at=time.time(),
    )


@contextmanager
def _locked(name: str, progress: Progress = _quiet) -> Iterator[None]:
    """One ``add`` of a toolchain at a time on this machine (a second waits, then finds it added); a sweep
    using it (a shared hold, registry.hold) is waited for too, and the wait is said."""
    registry.root().mkdir(parents=True, exist_ok=True)
    with open(registry.lock_file(name), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            everyone = registry.lock_holders(registry.lock_file(name), include_self=True)
            if everyone == [os.getpid()]:  # waiting would be waiting for ourselves, for ever
                raise ToolchainError(
                    f"toolchain {name} is held by this process (a sweep it runs builds with it): "
                    "end that sweep first, then add or remove it"
                ) from None
            holders = ", ".join(str(pid) for pid in everyone if pid != os.getpid()) or "another"
            progress(f"toolchain {name}: waiting for process {holders} (an add of it, or a sweep using it) to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def add(spec: Any, progress: Progress = _quiet) -> Toolchain:
    """Provision (release, wheel) or record (interpreter) the toolchain ``spec`` names; the one there if added.

    ``progress`` gets one line per step (venv, each package pip fetches, the import check).
    ToolchainError, one line, for a release not on the index, a missing or non-wheel file, an interpreter
    without a working TVM, or an environment whose import check fails.
    """
    parsed = parse(spec)
    if parsed.kind == "interpreter":  # nothing is built: the record is written atomically, no lock needed
        return _add(parsed, spec, progress)
    if parsed.kind == "wheel":  # bad input is refused before any folder or lock file is made for it
        check_wheel(Path(parsed.value))
    else:
        check_release(parsed.value)
        if parsed.value == (here := installed()).tvm_version:
            # Its venv would never be used: `[axes] tvm` and `farm up --tvm` take the installed TVM for it.
            progress(f"TVM {parsed.value} is the installed toolchain, the TVM tvmbench runs on: nothing to add")
            return here
    # Added already: no lock to take, so a sweep holding it (a shared hold) is no reason to wait.
    if _current(existing := registry.find(spec), progress):
        return existing
    with _locked(parsed.name(), progress):
        return _add(parsed, spec, progress)


def _current(existing: Toolchain | None, progress: Progress) -> TypeGuard[Toolchain]:
    """Whether ``existing`` (the toolchain a spec names, None when not added) is added with current pins (said)."""
    if existing is None or stale_pin(existing) is not None:
        return False
    progress(f"toolchain {existing.name} is added already (TVM {existing.tvm_version})")
    return True


def _add(parsed: ToolchainSpec, spec: Any, progress: Progress) -> Toolchain:
    # Looked up again under the lock: another add may have finished meanwhile.
    if _current(existing := registry.find(spec), progress):
        return existing
    stale = stale_pin(existing) if existing is not None else None
    if stale is not None:
        progress(f"{stale}: provisioning it again")
    started = time.monotonic()
    if parsed.kind == "interpreter":
        python = Path(parsed.value).absolute()
        progress(f"interpreter {python}: import check")
        pythonpath = os.environ.get("PYTHONPATH", "")  # a TVM source build is found through it: kept
        facts = probe.import_check(str(python), what="interpreter", pythonpath=pythonpath)
        toolchain = _record(parsed.name(facts["tvm_version"]), parsed, str(python), python, facts, started)
        toolchain = replace(toolchain, extra={"pythonpath": pythonpath})
        write_record(registry.directory(toolchain.name), toolchain)
        return toolchain
    if parsed.kind == "wheel":
        wheel = Path(parsed.value).absolute()
        version = check_wheel(wheel)
        requirements, spec_text, expected = pins.pip_requirements(str(wheel), version), str(wheel), version
    else:
        requirements = pins.pip_requirements(f"apache-tvm=={parsed.value}", parsed.value)
        spec_text, expected = parsed.value, parsed.value
    label = f"toolchain {parsed.name()}"
    directory = registry.directory(parsed.name())
    try:
        python = _make_venv(directory, label, progress)
        _pip_install(python, requirements, label, progress)
        progress(f"{label}: import check (tvm, tvm.relax.frontend.onnx, tvm.s_tir.meta_schedule, the build path)")
        facts = probe.import_check(str(python), what=f"{label}: python")
        if facts["tvm_version"] != expected:
            raise ToolchainError(f"{label}: the venv imports TVM {facts['tvm_version']}, not {expected}")
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)  # no half environment left to be mistaken for one
        raise
    toolchain = _record(parsed.name(), parsed, spec_text, python, facts, started)
    write_record(directory, toolchain)
    progress(
        f"{label}: ready in {toolchain.provision_s:g} s (TVM {toolchain.tvm_version}, tvm-ffi {toolchain.ffi_version})"
    )
    return toolchain
