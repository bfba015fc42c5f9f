"""The toolchain's side of a build or a run: ``python -m workers.toolchains.child build|run DIR``.

Run by ``build.py`` under a toolchain's interpreter with the project root on ``sys.path``. It imports the
project's own build code (``workers.executors.registry``), so a build in a toolchain is the build of any
other worker, only with that toolchain's TVM: the same pass trace, fingerprint, kernel count and memory
plan, and the versions in the Build are that TVM's. The request and the result cross as files in DIR:
``job.pkl`` and ``model.onnx`` in; ``build.pkl`` and ``program.so`` out (``run``: ``program.so`` and
``inputs.npz`` in, ``outputs.npz`` and ``run.json`` out).
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path


def telling(exc: BaseException) -> str:
    """``Type: line`` for an exception the Builder did not catch: the last line naming an error, else the
    first (TVM's "Cannot find library ...; searched directories:" lists the folders after it)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    line = next((ln for ln in reversed(lines) if "rror" in ln), lines[0] if lines else "")
    return f"{type(exc).__name__}: {line}"[:400] if line else type(exc).__name__


def build(directory: Path) -> int:
    """Build the job in ``directory`` with this interpreter's TVM; the Build (and artifact) next to it.

    An exception the Builder does not turn into a Build (TVM fails to import) goes to ``failure.txt``,
    one line, for the parent to name the toolchain.
    """
    job = pickle.loads((directory / "job.pkl").read_bytes())
    model = (directory / "model.onnx").read_bytes()
    try:
        if job.tuning:
            raise NotImplementedError("tuned builds do not run in a toolchain yet (untuned only)")
        from workers.executors.registry import build_job
        from workers.executors.requests import BuildRequest

        result, artifact = build_job(BuildRequest(job, model))
    except Exception as exc:
        (directory / "failure.txt").write_text(telling(exc))
        return 0
    if artifact is not None:
        (directory / "program.so").write_bytes(artifact)
    (directory / "build.pkl").write_bytes(pickle.dumps(result))
    return 0


def run(directory: Path) -> int:
    """Load ``program.so`` into a Relax VM on this host's CPU, run "main" on the inputs, time it once."""
    import numpy as np
    import tvm
    from tvm import relax

    dev = tvm.cpu(0)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(directory / "program.so")), dev)
    with np.load(directory / "inputs.npz") as data:
        args = [tvm.runtime.tensor(data[name], dev) for name in data.files]
    vm.set_input("main", *args)
    vm.invoke_stateful("main")
    outputs = vm.get_outputs("main")
    flat = [outputs] if hasattr(outputs, "numpy") else list(outputs)
    np.savez(directory / "outputs.npz", *[o.numpy() for o in flat])
    timer = vm.time_evaluator("main", dev, number=3, repeat=2)
    mean_ms = timer(*args).mean * 1e3
    (directory / "run.json").write_text(json.dumps({"tvm_version": tvm.__version__, "mean_ms": mean_ms}))
    return 0


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    sys.exit({"build": build, "run": run}[mode](folder))
