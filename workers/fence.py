"""The host fence: nothing builds on a machine while a program is timed on a board that shares its cores.

The sweep driver fences its own measurements by counting the builds it has in flight, but tuning times
candidates from *inside* a build task, and that task's candidate builds are Ray tasks of their own: the
driver sees none of it. So the fence is a named Ray actor, one per machine, that every party asks:

- a build (a job's build, a candidate build) holds it in ``build`` mode; many builds at once are fine;
- a timing (a candidate on a host board) holds it in ``time`` mode, alone: no build, no other timing.

A waiting timing blocks new builds (otherwise a busy build queue would starve the measurements). A hold
names the process that asked when it runs on the fence's machine (the fence lives on the driver's node),
so a hold whose process is gone (a worker killed by ``sweep cancel``, the OOM killer, a segfault in LLVM:
no release sent) is dropped at the next ask, not when its time-to-live runs out (30 minutes for a
build). The time-to-live remains for a holder that lives on and never lets go. Callers poll with short
sleeps; an actor call costs about a millisecond.

The driver creates the fence for its own host (``create_fence``) because boards that share cores are
decided relative to it (``orchestrator.scheduler.host_sharing_keys``); tasks find it by name. Without a
Ray instance or with no fence created, ``Fence(None)`` is a no-op, so ``build_job`` stays callable alone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tvmbench.core.liveness import pid_alive

NAMESPACE = "tvmbench"
POLL_S = 0.02
BUILD_TTL_S = 1800.0  # a job build of a big model can take many minutes
TIME_TTL_S = 300.0


def fence_name(host: str) -> str:
    return f"tvmbench-fence:{host}"


class _HostFenceState:
    """The fence's state; a plain class so it is testable without Ray (the actor wraps it)."""

    def __init__(self) -> None:
        self.builds: dict[str, float] = {}  # holder -> expiry (monotonic)
        self.timing: dict[str, float] = {}
        self.waiting_timers: dict[str, float] = {}  # holder -> when it last asked
        self.pids: dict[str, int] = {}  # holder -> the process that asked (holds of a dead one are dropped)
        self.refused_builds = 0  # build asks refused so far: a build that waited shows here (tests)

    def _expire(self, now: float) -> None:
        for table in (self.builds, self.timing):
            for holder in [h for h, exp in table.items() if exp < now or not self._holder_alive(h)]:
                del table[holder]
                self.pids.pop(holder, None)
        # A timer that stopped asking (killed) no longer blocks builds.
        for holder in [h for h, asked in self.waiting_timers.items() if now - asked > 5.0]:
            del self.waiting_timers[holder]

    def _holder_alive(self, holder: str) -> bool:
        pid = self.pids.get(holder)
        return pid is None or pid_alive(pid)

    def try_build(self, holder: str, ttl_s: float, pid: int | None = None) -> bool:
        """A build hold for ``holder`` (shared with other builds); ``pid``: the process it is for."""
        now = time.monotonic()
        self._expire(now)
        if holder in self.builds or not (self.timing or self.waiting_timers):
            self.builds[holder] = now + ttl_s
            self._note_pid(holder, pid)
            return True
        self.refused_builds += 1
        return False

    def try_time(self, holder: str, ttl_s: float, pid: int | None = None) -> bool:
        """A timing hold for ``holder``, alone; refused, it blocks new builds for 5 s (ask again before)."""
        now = time.monotonic()
        self._expire(now)
        if not self.builds and (not self.timing or holder in self.timing):
            self.waiting_timers.pop(holder, None)
            self.timing[holder] = now + ttl_s
            self._note_pid(holder, pid)
            return True
        self.waiting_timers[holder] = now
        return False

    def _note_pid(self, holder: str, pid: int | None) -> None:
        if pid is not None:
            self.pids[holder] = pid

    def release(self, holder: str) -> None:
        self.builds.pop(holder, None)
        self.timing.pop(holder, None)
        self.waiting_timers.pop(holder, None)
        self.pids.pop(holder, None)

    def reset(self) -> None:
        """Forget every hold: the driver calls it after a cancel killed the holders."""
        self.builds.clear()
        self.timing.clear()
        self.waiting_timers.clear()
        self.pids.clear()

    def refused(self) -> int:
        return self.refused_builds

    def state(self) -> dict[str, int]:
        self._expire(time.monotonic())
        return {"builds": len(self.builds), "timing": len(self.timing), "waiting_timers": len(self.waiting_timers)}


_FENCES: dict[str, Any] = {}  # host -> the fence actor's handle, for this driver's life


def create_fence(host: str | None = None) -> str:
    """Create (or find) the fence actor of ``host`` (default: this machine); returns the host name."""
    import ray

    host = host or socket.gethostname()
    # The handle that created the actor is what keeps it: a second sweep of this process replaced it with
    # the handle get_if_exists gives, Ray ended the actor with the first, and every hold of that sweep was
    # granted unchecked (the fence was dead in every second sweep of a process, alive again in the third).
    if host in _FENCES and _answers(_FENCES[host]):
        return host
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor = ray.remote(num_cpus=0)(_HostFenceState)
    # On this node: it tells a dead holder by its process id, which names a process only on this machine
    # (holders elsewhere send none: ``Fence._pid``).
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    # Kept: Ray deletes a non-detached actor once its last handle goes, name or not, and every hold was
    # then granted unchecked (builds and tuning candidates' timings were not fenced at all).
    _FENCES[host] = actor.options(
        name=fence_name(host), namespace=NAMESPACE, get_if_exists=True, lifetime=None, scheduling_strategy=here
    ).remote()
    return host


def _answers(actor: Any) -> bool:
    """Whether the fence actor behind ``actor`` is alive (Ray shut down and started again ends it)."""
    import ray

    try:
        ray.get(actor.state.remote(), timeout=30)
    except Exception:
        return False
    return True


def reset_fence(host: str) -> None:
    """Drop every hold of ``host``'s fence (its holders were just cancelled, so none will release)."""
    import ray

    with contextlib.suppress(Exception):  # no fence: nothing to reset
        ray.get(ray.get_actor(fence_name(host), namespace=NAMESPACE).reset.remote(), timeout=30)


class Fence:
    """A handle on the fence of one host (``None``: no fence, every hold is granted at once)."""

    def __init__(self, host: str | None) -> None:
        self.host = host
        self._actor: Any = None
        if host is not None:
            import ray

            try:
                self._actor = ray.get_actor(fence_name(host), namespace=NAMESPACE)
            except ValueError:  # no fence was created (a build outside a sweep): nothing to fence
                self._actor = None

    @property
    def active(self) -> bool:
        return self._actor is not None

    def _call(self, method: str, *args: Any) -> Any:
        import ray

        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=30)
        except Exception:
            # The fence died with its driver (sweep over or cancelled): there is nobody left to fence for.
            self._actor = None
            return True

    def _pid(self) -> int | None:
        """This process' id for a hold, when it runs on the fence's machine (a pid elsewhere means nothing there)."""
        return os.getpid() if self.host == socket.gethostname() else None

    def _acquire(self, method: str, holder: str, ttl_s: float, stop: Any = None) -> float:
        """Poll until the hold is granted; returns the seconds waited. ``stop()`` true abandons it."""
        started = time.monotonic()
        while self._actor is not None and not self._call(method, holder, ttl_s, self._pid()):
            if stop is not None and stop():
                self._call("release", holder)
                raise RuntimeError("stopped while waiting for the host fence")
            time.sleep(POLL_S)
        return time.monotonic() - started

    def _release(self, holder: str) -> None:
        if self._actor is not None:
            self._call("release", holder)

    def try_hold(self, kind: str, holder: str, ttl_s: float) -> bool:
        """One ask, no wait: a ``"build"`` or ``"time"`` hold for ``holder`` (True: granted, or no fence).

        For a proxy that asks on another process' behalf (workers/toolchains/tuning.py): a waiting timer
        must ask again within 5 s or it stops blocking builds, and the hold is the proxy's: it goes when the
        proxy's process does.
        """
        if self._actor is None:
            return True
        return bool(self._call("try_build" if kind == "build" else "try_time", holder, ttl_s, self._pid()))

    def release(self, holder: str) -> None:
        """Let go of ``holder``'s hold (any kind)."""
        self._release(holder)

    @contextlib.contextmanager
    def building(self, ttl_s: float = BUILD_TTL_S, holder: str | None = None) -> Iterator[Hold]:
        """Hold the fence while compiling on this host (shared with other builds).

        ``holder``: the hold's name, for a caller that may have to let go of it on the builder's behalf
        (a candidate build it force-cancels never reaches its own release); default a fresh one.
        """
        hold = Hold(self, holder or uuid.uuid4().hex, ttl_s)
        hold.waited_s = self._acquire("try_build", hold.holder, ttl_s)
        try:
            yield hold
        finally:
            self._release(hold.holder)

    @contextlib.contextmanager
    def timing(self, ttl_s: float = TIME_TTL_S, stop: Any = None) -> Iterator[float]:
        """Hold the fence alone while a board on this host times a program; yields the seconds waited."""
        holder = uuid.uuid4().hex
        waited = self._acquire("try_time", holder, ttl_s, stop)
        try:
            yield waited
        finally:
            self._release(holder)

    def state(self) -> dict[str, int] | None:
        if self._actor is None:
            return None
        value = self._call("state")
        return value if isinstance(value, dict) else None


class Hold:
    """A build hold; ``paused()`` lets go of it for a while (a tuning build while its candidates are timed)."""

    def __init__(self, fence: Fence, holder: str, ttl_s: float) -> None:
        self.fence, self.holder, self.ttl_s = fence, holder, ttl_s
        self.waited_s = 0.0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.fence._release(self.holder)
        try:
            yield
        finally:
            self.fence._acquire("try_build", self.holder, self.ttl_s)


class WorkHold:
    """A build hold taken through ``building`` (a ``Fence``'s or a toolchain child's ``FileFence``'s) for as
    long as this object is entered, let go of while ``paused()``: the hold of a thread that works on this
    machine's cores between waits (a tuning search), where ``Hold`` is a build task's own."""

    def __init__(self, building: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
        self._building = building
        self._held: contextlib.AbstractContextManager[Any] | None = None

    def __enter__(self) -> WorkHold:
        self._take()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._let_go()

    def _take(self) -> None:
        held = self._building()
        held.__enter__()
        self._held = held

    def _let_go(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(None, None, None)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self._let_go()
        try:
            yield
        finally:
            self._take()


def local_fence(fence_host: str | None) -> Fence:
    """The fence a build on this machine must hold: the driver's, when this machine is the driver's."""
    if fence_host is None or fence_host != socket.gethostname():
        return Fence(None)
    return Fence(fence_host)
