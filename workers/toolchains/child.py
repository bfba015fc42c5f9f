"""The toolchain's side of a build or a run: ``python -m workers.toolchains.child build|run DIR``.

Run by ``build.py`` under a toolchain's interpreter with the project root on ``sys.path``. It imports the
project's own build code (``workers.executors.registry``), so a build in a toolchain is the build of any
other worker, only with that toolchain's TVM: the same pass trace, fingerprint, kernel count and memory
plan, and the versions in the Build are that TVM's. The request and the result cross as files in DIR:
``job.pkl`` and ``model.onnx`` in; ``build.pkl`` and ``program.so`` out (``run``: ``program.so`` and
``inputs.npz`` in, ``outputs.npz`` and ``run.json`` out). A tuned job also finds ``tuning.json`` there
and tunes with a JSON database in ``records/`` that its parent fills from and empties into the SQL store
(workers/toolchains/tuning.py).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any

READY_WAIT_S = 300.0  # the parent hands the stored records over within a poll or two; this is its death
PARENT_POLL_S = 0.5


def watch_parent() -> None:
    """End this process when its parent goes (a cancelled sweep kills the Ray build task, not its child).

    A thread, not ``prctl(PR_SET_PDEATHSIG)`` in the parent: a ``preexec_fn`` in a threaded Ray worker is
    not safe, and the death signal follows the forking thread, not the process.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="tvmbench-watch-parent", daemon=True).start()


def _write_json(path: Path, value: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value))
    os.replace(partial, path)  # whole or not there: the parent polls for it


def tuning_env(directory: Path, job: Any) -> Any:
    """The TuningEnv of a tuned job in a toolchain: what the parent wrote, a JSON database it filled.

    Writes the records' scope (as this TVM computes it) for the parent, then waits until the parent has
    written the stored records of that scope into ``records/``. Raises with one line when this TVM lacks
    what tuning needs, or the cost model needs a package this interpreter does not have.
    """
    import importlib.util

    from workers.toolchains import tuning as files
    from workers.toolchains.compat import missing_surface
    from workers.tuning.database import make_scope
    from workers.tuning.stage import TuningEnv, tuning_target

    missing = missing_surface(tuning=True)
    if missing:
        raise RuntimeError(f"this TVM lacks what tuning needs: {'; '.join(missing[:3])}")
    settings = job.tuning_settings
    needs = {"xgb": "xgboost", "mlp": "torch"}.get(settings.cost_model)
    if needs and importlib.util.find_spec(needs) is None:
        raise RuntimeError(
            f'cost_model "{settings.cost_model}" needs {needs}, which this interpreter lacks: '
            'set [tuning] cost_model = "random", or install it there'
        )
    request = json.loads((directory / files.REQUEST_FILE).read_text())
    target = tuning_target(job.target.tvm_target, settings)
    scope = make_scope(target, job.target.board_key, module_equality=settings.module_equality)
    _write_json(directory / files.SCOPE_FILE, scope.__dict__)
    deadline = time.monotonic() + READY_WAIT_S
    while not (directory / files.READY_FILE).is_file():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the parent did not hand the stored records over in {READY_WAIT_S:g} s")
        time.sleep(0.1)
    return TuningEnv(
        tracker=request["tracker"],
        database={"kind": "json", "path": str(directory / files.RECORDS_DIR)},
        fence_host=None,  # the fence is a Ray actor: asked for through fence_dir, the parent holds it
        avoid=frozenset(request["avoid"]),
        boards=int(request["boards"]),
        profile=request["profile"],
        board_key=request["board_key"],
        builder="local",
        progress_file=str(directory / files.PROGRESS_FILE),
        fence_dir=str(directory / files.FENCE_DIR) if request.get("fence") else None,
        baseline=request.get("baseline"),
        tuned_by=request.get("tuned_by"),
    )


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
        env = tuning_env(directory, job) if job.tuning else None
        from workers.executors.registry import build_job
        from workers.executors.requests import BuildRequest

        result, artifact = build_job(BuildRequest(job, model, tuning_env=env))
    except Exception as exc:
        (directory / "failure.txt").write_text(telling(exc))
        return 0
    if artifact is not None:
        (directory / "program.so").write_bytes(artifact)
    (directory / "build.pkl").write_bytes(pickle.dumps(result))
    return 0


def tasks(directory: Path) -> int:
    """The tuning tasks of the job in ``directory`` as this TVM extracts them, for `sweep plan`: ``tasks.json``
    with the records' scope and per task its name, weight, FLOPs and workload hash (another release's
    TVM hashes the same PrimFunc differently, so only the job's own release can say what records cover)."""
    job = pickle.loads((directory / "job.pkl").read_bytes())
    try:
        import onnx
        import tvm
        from tvm.relax.frontend.onnx import from_onnx

        from workers.rewrites import rewritten_module
        from workers.tuning.database import make_scope, workload_hash
        from workers.tuning.stage import tuning_target
        from workers.tuning.tasks import extract, split_pipeline

        settings = job.tuning_settings
        target = tuning_target(job.target.tvm_target, settings)
        model = onnx.load_from_string((directory / "model.onnx").read_bytes())
        mod = from_onnx(model, shape_dict=job.model.shape_dict, keep_params_in_input=False)
        front, _ = split_pipeline(job.pipeline, target)
        with tvm.transform.PassContext(opt_level=job.opt_level), target:
            fused = front(rewritten_module(job, mod)[0])  # rewritten and converted, as the build does
        extracted, infos = extract(fused, target, settings.module_equality)
        scope = make_scope(target, job.target.board_key, module_equality=settings.module_equality)
        found = [
            {
                "name": i.name,
                "weight": i.weight,
                "flops": i.flops,
                "hash": workload_hash(extracted[i.index].dispatched[0], settings.module_equality),
            }
            for i in infos
        ]
    except Exception as exc:
        (directory / "failure.txt").write_text(telling(exc))
        return 0
    _write_json(directory / "tasks.json", {"scope": scope.__dict__, "tasks": found})
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
    watch_parent()
    sys.exit({"build": build, "run": run, "tasks": tasks}[mode](folder))
