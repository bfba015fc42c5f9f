"""A Relax VM program as bytes and on a board: codegen and export, the board's device, upload and load.

Apart from the VM executors (workers/executors/relax_vm.py) so that the tuning stage's check build
(workers/tuning/check.py) builds and times a program the same way without importing the executors,
which import the stage.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tvmbench.core.records import Job
from workers.targets import target_kind


def codegen_export(job: Job, lowered: Any, target: Any) -> bytes:
    """Relax VM codegen of the lowered module and the exported library's bytes (cross-compiled if asked)."""
    from tvm import relax

    executable = relax.build(lowered, target, relax_pipeline=None, exec_mode=job.executor.removeprefix("vm-"))
    with tempfile.TemporaryDirectory(prefix="tvmbench-build-") as tmp:
        lib_path = Path(tmp) / "program.so"
        if job.target.cross_compiler:
            from tvm.support import cc

            executable.export_library(str(lib_path), fcompile=cc.cross_compiler(job.target.cross_compiler))
        else:
            executable.export_library(str(lib_path))
        return lib_path.read_bytes()


def device(remote: Any, job: Job) -> Any:
    """The remote device the job's target runs on."""
    kind = target_kind(job.target.tvm_target)
    if kind in ("cuda", "rocm", "vulkan", "metal", "opencl"):
        return getattr(remote, kind)(0)
    return remote.cpu(0)


def artifact_name(sha256: str) -> str:
    """The file name an artifact is uploaded under on a board."""
    return f"tvmbench-{sha256[:16]}.so"


def load_vm(remote: Any, artifact: bytes, sha256: str, dev: Any) -> Any:
    """Upload an artifact under its hash and open a Relax VM on it."""
    from tvm import relax

    name = artifact_name(sha256)
    remote.upload(bytearray(artifact), name)
    return relax.VirtualMachine(remote.load_module(name), dev)
