"""Whether a sweep's driver is still alive: the rule that turns a `running` row whose driver is gone into
`interrupted`.

A driver records its host (hostname), pid and a heartbeat on its sweep row when it starts and refreshes
the heartbeat every ``HEARTBEAT_S`` from its event loop (orchestrator/scheduler.py). A reader decides:
- on the driver's own host, by the pid: a pid that no longer exists is a driver that is gone (kill -9,
  OOM, a closed terminal), however fresh the heartbeat;
- on another host (a sweep submitted to a Ray cluster runs its driver on a cluster node), by the
  heartbeat: older than ``STALE_AFTER_S`` is gone. The threshold is generous (many heartbeats missed)
  so that a busy driver or a clock a little off is not called dead.
A row without driver facts (written before migration 0007) cannot be judged and keeps its status.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HEARTBEAT_S = 5.0  # how often a driver refreshes its heartbeat (at most)
STALE_AFTER_S = 60.0  # a heartbeat older than this, seen from another host, is a driver that is gone
ACTIVE_STATUSES = ("running", "cancelling")  # statuses that claim a driver is at work
INTERRUPTED = "interrupted"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (one owned by another user counts; a zombie,
    dead but not yet reaped by its parent, does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits for its parent to reap it (Linux /proc; False where unreadable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]  # the name in (...) may hold spaces and parentheses


def driver_gone(
    host: str | None,
    pid: int | None,
    heartbeat_at: datetime | None,
    *,
    now: datetime | None = None,
    this_host: str | None = None,
    alive: Callable[[int], bool] = pid_alive,
) -> bool | None:
    """True if the driver recorded as (host, pid, heartbeat_at) is gone, False if it may be alive, None if
    the row has no driver facts to judge by (a database written before drivers recorded them).

    Args:
        now: the time to judge the heartbeat at (default: now, UTC).
        this_host: the reader's hostname (default: socket.gethostname()).
        alive: the pid check (a seam for unit tests).
    """
    if not host or (pid is None and heartbeat_at is None):
        return None
    here = this_host if this_host is not None else socket.gethostname()
    if host == here and pid is not None:
        return not alive(pid)
    if heartbeat_at is None:
        return None
    if heartbeat_at.tzinfo is None:  # SQLite hands back naive datetimes; they were stored in UTC
        heartbeat_at = heartbeat_at.replace(tzinfo=UTC)
    age = ((now or datetime.now(UTC)) - heartbeat_at).total_seconds()
    return age > STALE_AFTER_S


def shown_status(status: str, host: str | None, pid: int | None, heartbeat_at: datetime | None, **kw: Any) -> str:
    """The status to show for a sweep row: ``interrupted`` for an active one whose driver is gone.

    ``kw`` goes to ``driver_gone`` (now, this_host, alive).
    """
    if status in ACTIVE_STATUSES and driver_gone(host, pid, heartbeat_at, **kw):
        return INTERRUPTED
    return status


def resume_hint(sweep_id: str) -> str:
    """The command that finishes an interrupted sweep."""
    return f"tvmbench sweep resume {sweep_id}"
