"""What this machine is to a compiler: its architecture (``uname -m``) and LLVM's name for its CPU."""

from __future__ import annotations

import platform
from typing import Any

_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def host_arch() -> str:
    """The machine name of this host, normalised like ``uname -m`` on Linux."""
    machine = platform.machine().lower()
    return _MACHINE_ALIASES.get(machine, machine)


def _cpu_fingerprint() -> str:
    """What names this machine's CPU to LLVM: machine, model and feature flags, and the TVM wheel's version."""
    import hashlib
    from importlib import metadata

    lines = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.partition(":")[0].strip()
                if key in ("model name", "flags", "Features", "CPU implementer", "CPU part", "uarch", "isa"):
                    lines.append(line.strip())
                if not line.strip() and lines:  # the first processor's block is enough
                    break
    except OSError:
        pass
    try:
        version = metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        version = "?"
    text = "\n".join([platform.machine(), platform.processor(), version, *lines])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _ask_llvm_for_cpu() -> str | None:
    """LLVM's name for this CPU, from TVM (in this process if TVM is loaded, else in a child: 2 s of imports)."""
    import subprocess
    import sys

    if "tvm" in sys.modules:
        from tvm.target import codegen

        name = str(codegen.llvm_get_system_cpu())
    else:
        code = "from tvm.target import codegen; print(codegen.llvm_get_system_cpu())"
        try:
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        name = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return name if name and name != "generic" else None


def host_cpu() -> str | None:
    """LLVM's name for this machine's CPU (znver4, skylake-avx512, neoverse-n1, ...), or None if unknown.

    The ``host`` preset builds for it: without an ``mcpu``, LLVM targets a generic CPU (SSE2 on x86-64)
    and tuned kernels never use the machine's vector units (a tuned small conv net ran 3.7x slower
    here). TVMBENCH_HOST_MCPU overrides it ("generic": none). Asked once per machine and TVM version,
    then read from ~/.cache/tvmbench/host-cpu.json, so planning a sweep never imports TVM for it.
    """
    import json
    import os
    from pathlib import Path

    override = os.environ.get("TVMBENCH_HOST_MCPU")
    if override is not None:
        return None if override in ("", "generic") else override
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tvmbench" / "host-cpu.json"
    key = _cpu_fingerprint()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if key not in known:
        known[key] = _ask_llvm_for_cpu()
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.part")
            tmp.write_text(json.dumps(known))
            tmp.replace(cache)
        except OSError:  # a read-only home: ask again next time
            pass
    value = known[key]
    return value if isinstance(value, str) and value else None


def host_target() -> dict[str, Any]:
    """The TVM target of the ``host`` preset: LLVM for this CPU where it is known."""
    cpu = host_cpu()
    return {"kind": "llvm", "mcpu": cpu} if cpu else {"kind": "llvm"}
