"""Target presets: a name a sweep file can use for a TVM target, its cross compiler and its board key."""

from __future__ import annotations

import platform
from typing import Any

from tvmbench.core.records import TargetSpec
from workers.aot.boards import BOARDS, target_dict

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


def _host_target() -> dict[str, Any]:
    cpu = host_cpu()
    return {"kind": "llvm", "mcpu": cpu} if cpu else {"kind": "llvm"}


PRESETS: dict[str, TargetSpec] = {
    p.name: p
    for p in (
        TargetSpec(name="host", tvm_target=_host_target(), board_key="host", arch=host_arch()),
        TargetSpec(
            name="rpi4",
            tvm_target={"tag": "raspberry-pi/4b-aarch64"},
            board_key="rpi4",
            arch="aarch64",
            cross_compiler="aarch64-linux-gnu-gcc",
            cross_compiler_package="gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
        ),
        TargetSpec(
            name="arm64-emu",
            tvm_target={"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]},
            board_key="arm64-emu",
            arch="aarch64",
            cross_compiler="aarch64-linux-gnu-gcc",
            cross_compiler_package="gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
            emulated=True,
        ),
        # 32-bit hard-float Linux (Raspberry Pi 2/3 on Raspberry Pi OS 32-bit, BeagleBone, i.MX6...).
        # Without "mfloat-abi": "hard" LLVM emits soft-float calls and arm-linux-gnueabihf-gcc refuses
        # to link them ("uses VFP register arguments").
        TargetSpec(
            name="rpi3",
            tvm_target={
                "kind": "llvm",
                "mtriple": "armv7l-linux-gnueabihf",
                "mcpu": "cortex-a53",
                "mattr": ["+neon"],
                "mfloat-abi": "hard",
                "num-cores": 4,
            },
            board_key="rpi3",
            arch="armv7l",
            cross_compiler="arm-linux-gnueabihf-gcc",
            cross_compiler_package="gcc-arm-linux-gnueabihf libc6-dev-armhf-cross",
        ),
        TargetSpec(
            name="armv7",
            tvm_target={"kind": "llvm", "mtriple": "armv7l-linux-gnueabihf", "mattr": ["+neon"], "mfloat-abi": "hard"},
            board_key="armv7",
            arch="armv7l",
            cross_compiler="arm-linux-gnueabihf-gcc",
            cross_compiler_package="gcc-arm-linux-gnueabihf libc6-dev-armhf-cross",
        ),
        # RV64GC Linux boards (SiFive U74: VisionFive 2, HiFive Unmatched); lp64d matches Debian's ABI.
        TargetSpec(
            name="riscv64",
            tvm_target={
                "kind": "llvm",
                "mtriple": "riscv64-linux-gnu",
                "mcpu": "sifive-u74",
                "mattr": ["+64bit", "+m", "+a", "+f", "+d", "+c"],
                "mabi": "lp64d",
            },
            board_key="riscv64",
            arch="riscv64",
            cross_compiler="riscv64-linux-gnu-gcc",
            cross_compiler_package="gcc-riscv64-linux-gnu libc6-dev-riscv64-cross",
        ),
        # Jetson AGX Orin: CUDA kernels for sm_87, host code for its Cortex-A78AE cores. The .so
        # carries CUDA C source that the board compiles on load (nvrtc), so no nvcc is needed here.
        TargetSpec(
            name="jetson-orin",
            tvm_target={"tag": "nvidia/jetson-agx-orin-64gb"},
            board_key="jetson-orin",
            arch="aarch64",
            cross_compiler="aarch64-linux-gnu-gcc",
            cross_compiler_package="gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
        ),
        # An A100-class GPU server of this machine's architecture; builds here with no GPU.
        TargetSpec(
            name="cuda-sm80",
            tvm_target={"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}},
            board_key="cuda-sm80",
            arch=host_arch(),
        ),
    )
}


def _mcu_presets() -> dict[str, TargetSpec]:
    """Emulated Cortex-M boards (executor aot-c): firmware built with arm-none-eabi-gcc, run under QEMU."""
    return {
        b.name: TargetSpec(
            name=b.name,
            tvm_target=target_dict(b),
            board_key=b.board_key,
            arch=b.cpu,
            cross_compiler="arm-none-eabi-gcc",
            cross_compiler_package="gcc-arm-none-eabi libnewlib-arm-none-eabi",
            emulated=True,
        )
        for b in BOARDS.values()
    }


PRESETS.update(_mcu_presets())


def target_kind(tvm_target: dict[str, Any]) -> str:
    """The TVM target kind ("llvm", "cuda", ...) of a dict or {"tag": name} target."""
    if "kind" in tvm_target:
        return str(tvm_target["kind"])
    if "tag" in tvm_target:
        from tvm.target import Target

        return str(Target(tvm_target["tag"]).kind.name)
    return "llvm"


def presets_for(arch: str | None, board_key: str | None = None) -> list[str]:
    """Preset names that build for ``arch``; a preset whose board key is ``board_key`` comes first."""
    names = [p.name for p in PRESETS.values() if arch and p.arch == arch]
    names.sort(key=lambda n: PRESETS[n].board_key != board_key)
    return names


def resolve_target(name: str, table: dict[str, Any] | None = None) -> TargetSpec:
    """A preset by name, or a user-defined target from its sweep-file table.

    ``table`` holds ``target`` (TVM target dict), ``board_key``, ``arch`` and optionally
    ``cross_compiler``/``emulated``; keys given there override the preset's of the same name.
    """
    base = PRESETS.get(name)
    if table is None:
        if base is None:
            raise KeyError(name)
        return base
    fields: dict[str, Any] = {} if base is None else dict(base.__dict__)
    fields["name"] = name
    if "target" in table:
        fields["tvm_target"] = table["target"]
    for key in ("board_key", "arch", "cross_compiler", "emulated"):
        if key in table:
            fields[key] = table[key]
    fields.setdefault("board_key", name)
    return TargetSpec(**fields)
