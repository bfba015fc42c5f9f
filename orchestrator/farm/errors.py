"""The farm's one error, and the deadline poll every step of starting a farm waits with."""

from __future__ import annotations

import time
from typing import Any

MAX_BOARDS = 64  # board agents one command may start here: each is a process holding a TVM runtime


class FarmError(RuntimeError):
    """The farm could not be started or reached; the message says what to do."""


def check_board_count(boards: int) -> int:
    """``boards`` if it is a number of host boards this machine may start (0 to MAX_BOARDS), else FarmError."""
    if isinstance(boards, bool) or not isinstance(boards, int) or not 0 <= boards <= MAX_BOARDS:
        raise FarmError(f"boards = {boards!r}: give a number of host boards from 0 to {MAX_BOARDS}")
    return boards


def wait_until(condition: Any, timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    """Poll ``condition()`` until it returns a truthy value or the deadline passes (FarmError)."""
    deadline = time.monotonic() + timeout_s
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # the thing polled may not be up yet
            last_exc = exc
        time.sleep(interval_s)
    raise FarmError(f"timed out after {timeout_s:g}s waiting for {what}" + (f" ({last_exc})" if last_exc else ""))
