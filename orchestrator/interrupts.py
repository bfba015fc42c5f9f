"""SIGTERM ends a command the way Ctrl-C does: a ``KeyboardInterrupt`` in the main thread, so the same
cleanup runs (finished jobs stay stored, the farm and Ray are stopped) and one line says how to go on.

Python's default SIGTERM kills the process at once; ``ray.init`` installs two handlers of its own in
the driver (Ray's node ``sigterm_handler``, which exits 1, and absl's failure signal handler, which
prints a native crash dump and exits 134). ``keep_handlers`` puts ours back after Ray starts.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGINT_EXIT = 128 + signal.SIGINT  # 130, what a shell reports for a Ctrl-C
SIGTERM_EXIT = 128 + signal.SIGTERM  # 143


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised in the main thread like Ctrl-C's KeyboardInterrupt."""


# Ray's blocking calls (ray.wait, ray.get) run the handler and then raise a plain KeyboardInterrupt of their
# own in place of ours: what the handler saw is remembered here, so the exit still says SIGTERM.
_terminated = False


def _raise_terminated(_signum: int, _frame: FrameType | None) -> None:
    global _terminated
    _terminated = True
    raise Terminated()


def _by_sigterm(exc: BaseException) -> bool:
    return isinstance(exc, Terminated) or _terminated


def install() -> None:
    """SIGTERM raises ``Terminated`` in the main thread from now on (call from the main thread)."""
    global _terminated
    _terminated = False
    signal.signal(signal.SIGTERM, _raise_terminated)


def ignore_from_now() -> None:
    """Ignore Ctrl-C and SIGTERM for the rest of this process (main thread only; elsewhere nothing).

    Called once a command has decided to end: a second Ctrl-C, pressed while Ray shuts down or the
    interrupt is reported, would otherwise break the cleanup with a traceback of its own (``Exception
    ignored in atexit callback``) and change the exit status. What a cleanup cut short leaves behind,
    the reaper (orchestrator/local_ray.py) stops anyway.
    """
    import threading

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def exit_code(exc: BaseException) -> int:
    """The exit status of a command ended by ``exc``: 143 after SIGTERM, 130 after Ctrl-C."""
    return SIGTERM_EXIT if _by_sigterm(exc) else SIGINT_EXIT


def signal_name(exc: BaseException) -> str:
    return "SIGTERM" if _by_sigterm(exc) else "Ctrl-C"


@contextmanager
def keep_handlers() -> Iterator[None]:
    """Restore this process's SIGTERM and SIGINT handlers after the block (``ray.init`` replaces them)."""
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set them
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except SystemExit as exc:
        # Ray's SIGTERM handler, in place while ray.init starts the node (seconds), exits with the signal's
        # number: a silent exit 15. Where ours was in place, end as our SIGTERM does (one line, 143).
        if exc.code == signal.SIGTERM and saved[signal.SIGTERM] is _raise_terminated:
            _raise_terminated(signal.SIGTERM, None)
        raise
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: set outside Python; nothing to restore it with
                signal.signal(sig, handler)
