"""What a board's state was while it was timed: clocks, temperatures, load, and the session's memory.

The reading half (``read_state``, ``session_memory``) runs on the board, inside the RPC session process,
through the board agent: it uses the standard library only, so it can be copied to a board next to
``board_agent.py``. The judging half (``assess``) runs on the orchestrator and turns a before/after pair
into the warnings stored with a run.

Anything a board cannot tell is ``{"available": False, "reason": ...}``, never a zero: a VM without
cpufreq has no governor, which is not the same as a governor that is fine.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Any

CPU_ROOT = "/sys/devices/system/cpu"
THERMAL_ROOT = "/sys/class/thermal"
# Beyond these a run's figures are suspect: clocks that moved by more than 5 % or a board that warmed
# by more than 5 degrees while it was being timed (thermal throttling lowers clocks on small boards).
FREQ_DRIFT = 0.05
TEMP_DRIFT_C = 5.0
GOOD_GOVERNOR = "performance"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _int(path: str) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def cpufreq(root: str = CPU_ROOT) -> dict[str, Any]:
    """Governor and min/max/current frequency (kHz) of every core that exposes cpufreq."""
    cores = []
    paths = [p for p in glob.glob(os.path.join(root, "cpu[0-9]*")) if os.path.basename(p)[3:].isdigit()]
    for path in sorted(paths, key=lambda p: int(os.path.basename(p)[3:])):
        freq = os.path.join(path, "cpufreq")
        if not os.path.isdir(freq):
            continue
        cores.append(
            {
                "cpu": int(os.path.basename(path)[3:]),
                "governor": _read(os.path.join(freq, "scaling_governor")),
                "min_khz": _int(os.path.join(freq, "scaling_min_freq")),
                "max_khz": _int(os.path.join(freq, "scaling_max_freq")),
                "cur_khz": _int(os.path.join(freq, "scaling_cur_freq")),
            }
        )
    if not cores:
        return {
            "available": False,
            "reason": f"no {root}/cpu*/cpufreq: the kernel exposes no frequency scaling "
            "(a virtual machine, a container without sysfs, or a fixed-clock CPU)",
        }
    return {"available": True, "cores": cores}


def thermal(root: str = THERMAL_ROOT) -> dict[str, Any]:
    """Temperature (degrees C) of every thermal zone in /sys/class/thermal."""
    zones = []
    for path in sorted(glob.glob(os.path.join(root, "thermal_zone*"))):
        millideg = _int(os.path.join(path, "temp"))
        if millideg is None:
            continue
        zones.append(
            {"zone": os.path.basename(path), "type": _read(os.path.join(path, "type")), "temp_c": millideg / 1000}
        )
    if not zones:
        return {"available": False, "reason": f"no readable thermal zone under {root}"}
    return {"available": True, "zones": zones}


THREADS_ENV = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")  # what TVM's runtime reads, in its order


def physical_cores(root: str = CPU_ROOT) -> int:
    """The cores this process may run on, SMT siblings counted once."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    cores = {_read(os.path.join(root, f"cpu{cpu}", "topology", "thread_siblings_list")) or str(cpu) for cpu in cpus}
    return max(1, len(cores))


def use_every_core(root: str = CPU_ROOT) -> dict[str, Any]:
    """Give TVM's runtime one thread per physical core unless the environment names a count; say which.

    TVM's default is ``hardware_concurrency() / 2`` on x86-64, taking every second logical CPU for a
    hyper-thread. Where there are no hyper-threads (most cloud VMs, this 2-vCPU machine) that is half the
    cores: every TVM program was timed on one thread of two, and its thread pool pinned the session to
    CPU 0, while ONNX Runtime used both. Call before the runtime's first parallel loop (it reads the
    variable once); the RPC server's session processes inherit it.
    """
    for name in THREADS_ENV:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return {"threads": max(1, int(value)), "source": name}
            except ValueError:
                break  # TVM's atoi reads garbage as 0, then 1 thread: count the cores instead
    threads = physical_cores(root)
    os.environ["TVM_NUM_THREADS"] = str(threads)
    return {"threads": threads, "source": "cores"}


def read_state() -> dict[str, Any]:
    """The board's state now: cpufreq per core, thermal zones, load average."""
    try:
        load: Any = list(os.getloadavg())
    except OSError:
        load = None
    return {"time": time.time(), "cpufreq": cpufreq(), "thermal": thermal(), "load_avg": load}


def session_memory(status_path: str = "/proc/self/status") -> dict[str, Any]:
    """VmRSS and VmHWM (peak resident set) in kB of this process: the RPC server forks one per session,
    so on the board this is what the session (the uploaded model and its runs) holds."""
    text = _read(status_path)
    if text is None:
        return {"available": False, "reason": f"{status_path} is not readable (not Linux?)"}
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key.lower() + "_kb"] = int(rest.split()[0])
    if len(values) < 2:
        return {"available": False, "reason": f"{status_path} has no VmRSS/VmHWM"}
    return {"available": True, **values}


# --- the orchestrator's half: judging a before/after pair ---------------------------------------------


def _cores(state: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    freq = (state or {}).get("cpufreq") or {}
    return {c["cpu"]: c for c in freq.get("cores", [])} if freq.get("available") else {}


def _zones(state: dict[str, Any] | None) -> dict[str, float]:
    th = (state or {}).get("thermal") or {}
    return {z["zone"]: z["temp_c"] for z in th.get("zones", [])} if th.get("available") else {}


def _cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def assess(
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    *,
    freq_drift: float = FREQ_DRIFT,
    temp_drift_c: float = TEMP_DRIFT_C,
) -> list[str]:
    """Warnings for the figures timed between ``before`` and ``after`` (empty: nothing to warn about).

    Only what the board reported is judged: missing cpufreq or thermal data gives no warning (it is
    stored as unavailable, with the reason).
    """
    warnings: list[str] = []
    cores_b, cores_a = _cores(before), _cores(after)
    bad: dict[str, list[int]] = {}
    for cpu, core in (cores_a or cores_b).items():
        governor = core.get("governor")
        if governor and governor != GOOD_GOVERNOR:
            bad.setdefault(governor, []).append(cpu)
    for governor, cpus in sorted(bad.items()):
        warnings.append(
            f"governor {governor!r} on cpu {_cpu_list(cpus)} (not {GOOD_GOVERNOR!r}): clocks may change while timing"
        )
    moved = []
    for cpu, core in cores_b.items():
        f0, f1 = core.get("cur_khz"), cores_a.get(cpu, {}).get("cur_khz")
        if f0 and f1 and abs(f1 - f0) / f0 > freq_drift:
            moved.append(f"cpu{cpu} {f0 / 1000:.0f}->{f1 / 1000:.0f} MHz")
    if moved:
        warnings.append(f"clock moved by more than {freq_drift:.0%} during the samples: " + ", ".join(moved))
    zones_b, zones_a = _zones(before), _zones(after)
    warmed = [
        f"{zone} {t0:.1f}->{zones_a[zone]:.1f} C"
        for zone, t0 in zones_b.items()
        if zone in zones_a and abs(zones_a[zone] - t0) > temp_drift_c
    ]
    if warmed:
        warnings.append(f"temperature moved by more than {temp_drift_c:g} C during the samples: " + ", ".join(warmed))
    return warnings
