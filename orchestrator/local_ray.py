"""tvmbench's own local Ray instance: loopback only, quiet about its auth token, gone when its driver dies.

Three things Ray 2.60 does not do by itself for a local ``ray.init()``:

- **Loopback.** Ray picks the machine's network address as the node address and every process (driver,
  gcs_server, raylet, workers, dashboard agent, runtime-env agent, monitor) listens on it or on all
  interfaces. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray use 127.0.0.1 as the node address, and then
  every one of them binds loopback. Ray reads it when ``ray`` is first imported
  (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``), so it is set before that import, and the constant is
  corrected if something imported Ray earlier. ``ray.init(_node_ip_address="127.0.0.1")`` alone does not
  do it (checked: the node still takes the machine's address).
- **Quiet auth.** Ray turns token authentication on for a new local cluster and logs a WARNING saying so
  on every start. tvmbench keeps the token auth and drops only that one record.
- **Fate sharing.** gcs_server and raylet die with the driver (Ray sets PR_SET_PDEATHSIG), but the
  dashboard and runtime-env agents notice their raylet is gone and then wait 60 s trying to report it to
  the dead GCS. A small reaper process holds a pipe from the driver; when the driver dies (even by
  SIGKILL) the pipe closes and the reaper kills every process the driver started that is still running.

- **Warm workers.** Ray kills a worker idle for more than 1 s once there are more workers than CPUs, and a
  tuning build always has more (its own task, the candidate builders, the measure tasks): every batch of
  candidates after a search or a measurement started a fresh worker, which imports TVM again (2 s on a
  quiet 2-core machine, 17 s on a loaded one) before its first candidate. Idle workers are kept for
  ``KEEP_IDLE_WORKERS_MS`` instead (``RAY_idle_worker_killing_time_threshold_ms`` for a cluster's nodes:
  infra/ray).

And one thing it does slowly: **exit** (2.3 s here, now 0.75 s). Ray's exit hook sleeps 0.5 s so that
workers' log lines reach the driver (tvmbench forwards none: ``log_to_driver=False``), then stops the GCS
before the autoscaler monitor, whose SIGTERM handler reports to the gone GCS until Ray kills it a second
later. tvmbench's own exit hook shuts the instance down first, the monitor (which holds nothing for a local
instance) killed before the rest.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Longer than a search or a measurement between two candidate batches; short enough to give the memory of
# a sweep's workers back within minutes of its end.
KEEP_IDLE_WORKERS_MS = 300_000
_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"
_reaper: subprocess.Popen | None = None


def hold_ray_to_loopback() -> None:
    """Make a Ray instance started from this process (and its children) use 127.0.0.1 as its address."""
    os.environ.setdefault(LOOPBACK_ENV, "0")
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # Ray was imported before the variable was set: correct what it read
        constants.ENABLE_RAY_CLUSTER = os.environ[LOOPBACK_ENV].lower() not in ("0", "false")


class _DropAuthNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_AUTH_NOTICE)


def quiet_auth_notice() -> None:
    """Drop Ray's "token authentication is enabled" WARNING (auth itself stays on)."""
    logger = logging.getLogger(_AUTH_LOGGER)
    if not any(isinstance(f, _DropAuthNotice) for f in logger.filters):
        logger.addFilter(_DropAuthNotice())


def start_local_ray(num_cpus: int | None = None) -> None:
    """Start tvmbench's local Ray instance: loopback, no dashboard, reaped when this process dies."""
    hold_ray_to_loopback()
    start_reaper()  # before ray.init: a driver killed while Ray starts leaves its agents too
    import ray

    quiet_auth_notice()
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
        configure_logging=True,
        _system_config={"idle_worker_killing_time_threshold_ms": KEEP_IDLE_WORKERS_MS},
    )
    atexit.register(stop_local_ray)  # registered after `import ray` registered Ray's hook: runs before it


def stop_local_ray() -> None:
    """Shut the local instance down, the monitor first (see the module docstring); nothing if it is down."""
    import ray

    if ray.is_initialized():
        _kill_monitor()
        ray.shutdown()


def _kill_monitor() -> None:
    # Ray's private process table; a Ray without it just exits the slow way.
    node = getattr(sys.modules.get("ray._private.worker"), "_global_node", None)
    for info in (getattr(node, "all_processes", None) or {}).get("monitor", ()):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            info.process.kill()
            info.process.wait(timeout=1)


def start_reaper() -> None:
    """Start (once) the process that kills what this process started once this process is gone."""
    global _reaper
    if _reaper is not None and _reaper.poll() is None:
        return
    # stdin is the pipe the reaper waits on; this process never writes to it, and the kernel closes it
    # when this process ends, however it ends. Its own session, so a ^C to the driver does not reach it.
    # Run by path, not `-m orchestrator.local_ray`: a folder named orchestrator in the cwd must not shadow it.
    _reaper = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


REAPER_POLL_S = 0.5  # how often the reaper refreshes its list of the driver's descendants


def _descendants(pid: int) -> dict[int, float]:
    """pid -> start time of every process under ``pid`` (the start time tells a reused pid apart)."""
    import psutil

    found = {}
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                found[child.pid] = child.create_time()
    return found


def _reap() -> None:
    """Wait for the driver to go (EOF on stdin), then kill what it started that is still running.

    What it started: every process seen under the driver (a list refreshed every REAPER_POLL_S while
    the driver lives), and Ray's processes that name one of those as their raylet (``RAY_RAYLET_PID``):
    workers and agents started after the last refresh.
    """
    import select

    import psutil

    driver = os.getppid()
    seen: dict[int, float] = {}
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], REAPER_POLL_S)
        if readable and not os.read(sys.stdin.fileno(), 4096):
            break  # EOF: the driver is gone
        seen = {pid: t for pid, t in seen.items() if psutil.pid_exists(pid)}
        seen.update(_descendants(driver))
    raylets = {str(pid) for pid in seen}
    procs = []
    for proc in psutil.process_iter(["pid", "create_time"]):
        if proc.pid == os.getpid():
            continue
        ours = seen.get(proc.pid) == proc.info["create_time"]
        if not ours:
            with contextlib.suppress(psutil.Error):
                ours = proc.environ().get("RAY_RAYLET_PID") in raylets
        if ours:
            procs.append(proc)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)


if __name__ == "__main__":
    _reap()
