"""Builds (and local runs) under a toolchain's interpreter: a child process per request, never TVM here.

A child, not an import: two TVM releases cannot share a process (each loads its own libtvm and tvm_ffi),
and a release whose libraries no longer load takes the child down, not the worker. Whatever goes wrong in
the child (the import breaks, a segfault, a timeout) comes back as a Build with status "build" whose error
names the toolchain and its release, so the job ends as a ``build`` row and the sweep goes on.
"""

from __future__ import annotations

import json
import pickle
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tvmbench.core.records import Build, Job
from workers.toolchains.probe import PROJECT_ROOT, child_env, exit_reason, last_line
from workers.toolchains.toolchain import Toolchain

BUILD_TIMEOUT_S = 1800.0  # an untuned build of a large model on a loaded 2-core machine
RUN_TIMEOUT_S = 600.0
TRIAL_TIMEOUT_S = 60.0  # a tuned build's time limit grows by this per trial of its budget
# How often a tuned build's records, progress and fence asks are answered (a cancel loses at most this
# much of its records; each candidate's fence hold waits about this long).
POLL_S = 0.2


def _child(
    toolchain: Toolchain,
    mode: str,
    directory: Path,
    timeout_s: float,
    on_poll: Callable[[], None] | None = None,
) -> str | None:
    """Run the child entry in ``directory``; None when it exited 0, else why not (one line).

    ``on_poll`` is called about every POLL_S while the child runs and once after it ends (a tuned build's
    records and progress); an exception from it kills the child and is the reason given.
    """
    command = [toolchain.python, "-m", "workers.toolchains.child", mode, str(directory)]
    stderr_path = directory / f"{mode}.stderr"
    try:
        with open(stderr_path, "wb") as stderr:  # a file, not a pipe: a chatty child never blocks on it
            proc = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=child_env(toolchain.pythonpath),
                cwd=PROJECT_ROOT,
            )
    except OSError as exc:
        return f"its python {toolchain.python} cannot run ({exc.strerror or exc})"
    deadline = time.monotonic() + timeout_s
    why: str | None = None
    try:
        while True:
            try:
                proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            if on_poll is not None:
                on_poll()
            if time.monotonic() > deadline:
                why = f"the {mode} ran over {timeout_s:g} s"
                break
        if why is None and on_poll is not None:
            on_poll()  # what the child wrote last
    except Exception as exc:
        why = f"the {mode}'s parent failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if why is not None:
        return why
    if proc.returncode != 0:
        stderr_text = stderr_path.read_text(errors="replace")
        return f"the {mode} process {exit_reason(proc.returncode)}: {last_line(stderr_text)}"
    return None


def failed_build(toolchain: Toolchain, job: Job, why: str) -> Build:
    """The Build of a job whose toolchain could not build it: status "build", the error naming the release."""
    return Build(
        build_key=job.build_key(toolchain.tvm_version),
        status="build",
        error=f"toolchain {toolchain.label}: {why}",
        tvm_version=toolchain.tvm_version,
        ffi_version=toolchain.ffi_version,
        host=socket.gethostname(),
    )


def build_in_toolchain(
    toolchain: Toolchain,
    job: Job,
    model_bytes: bytes,
    *,
    tuning_env: Any = None,
    hold: Any = None,
    timeout_s: float | None = None,
) -> tuple[Build, bytes | None]:
    """Build ``job`` under the toolchain's TVM: the Build its Builder returns there, and the artifact's bytes.

    The Build carries that TVM's versions and its build key (``job.build_key(tvm_version)``). A child that
    fails to start, crashes or runs over ``timeout_s`` gives a "build" Build naming the release, no bytes.
    A tuned job (``job.tuning`` > 0) tunes in the child with ``tuning_env`` (a workers.tuning.stage
    TuningEnv; its ``board_key`` the release's boards): its records go in and out of the SQL store here
    (workers/toolchains/tuning.py), stored as they are measured; ``hold`` (this task's build hold) is let
    go of while it tunes, and the host fence is asked for on its behalf.
    """
    if timeout_s is None:
        timeout_s = BUILD_TIMEOUT_S + TRIAL_TIMEOUT_S * (job.tuning or 0)
    with tempfile.TemporaryDirectory(prefix="tvmbench-toolchain-build-") as tmp:
        directory = Path(tmp)
        (directory / "job.pkl").write_bytes(pickle.dumps(job))
        (directory / "model.onnx").write_bytes(model_bytes)
        bridge = None
        if job.tuning:
            from workers.toolchains.tuning import RecordsBridge
            from workers.tuning.stage import TuningEnv

            env = tuning_env or TuningEnv(tracker="")
            bridge = RecordsBridge(directory, job, env, job.build_key(toolchain.tvm_version), hold)
            bridge.write_request()
        try:
            why = _child(toolchain, "build", directory, timeout_s, bridge.poll if bridge else None)
        finally:
            if bridge is not None:
                bridge.close()
        result, failure = directory / "build.pkl", directory / "failure.txt"
        if why is None and failure.is_file():
            why = f"the build failed: {failure.read_text().strip()}"
        if why is not None or not result.is_file():
            return failed_build(toolchain, job, why or "the build process wrote no result"), None
        build: Build = pickle.loads(result.read_bytes())
        if bridge is not None and bridge.sql and build.tuning:
            # The child tuned with a JSON database; its records are in the SQL store now.
            build = replace(build, tuning={**build.tuning, "database": "sql"})
        artifact = directory / "program.so"
        return build, (artifact.read_bytes() if artifact.is_file() else None)


def run_in_toolchain(
    toolchain: Toolchain, artifact: bytes, inputs: dict[str, np.ndarray], *, timeout_s: float = RUN_TIMEOUT_S
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Run an artifact in a Relax VM under the toolchain's own runtime, on this host's CPU.

    Returns the outputs of "main" and ``{"tvm_version", "mean_ms"}``; RuntimeError naming the toolchain
    when the child fails. (An artifact loads only in the runtime of the release that built it.)
    """
    with tempfile.TemporaryDirectory(prefix="tvmbench-toolchain-run-") as tmp:
        directory = Path(tmp)
        (directory / "program.so").write_bytes(artifact)
        np.savez(directory / "inputs.npz", **inputs)
        why = _child(toolchain, "run", directory, timeout_s)
        if why is not None:
            raise RuntimeError(f"toolchain {toolchain.label}: {why}")
        with np.load(directory / "outputs.npz") as data:
            outputs = [data[name] for name in data.files]
        return outputs, json.loads((directory / "run.json").read_text())


def tasks_in_toolchain(
    toolchain: Toolchain, job: Job, model_bytes: bytes, *, timeout_s: float = RUN_TIMEOUT_S
) -> dict[str, Any]:
    """A tuned job's tasks as its toolchain extracts them: ``{"scope": TuningScope fields, "tasks": [{name,
    weight, flops, hash}]}`` (RuntimeError naming the toolchain when the child fails)."""
    with tempfile.TemporaryDirectory(prefix="tvmbench-toolchain-tasks-") as tmp:
        directory = Path(tmp)
        (directory / "job.pkl").write_bytes(pickle.dumps(job))
        (directory / "model.onnx").write_bytes(model_bytes)
        why = _child(toolchain, "tasks", directory, timeout_s)
        failure = directory / "failure.txt"
        if why is None and failure.is_file():
            why = f"extracting its tuning tasks failed: {failure.read_text().strip()}"
        if why is not None:
            raise RuntimeError(f"toolchain {toolchain.label}: {why}")
        return json.loads((directory / "tasks.json").read_text())
