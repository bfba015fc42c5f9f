"""One way to turn an exception into the one line a person reads (a row's error, a CLI message), and one
way to say what a path is when it is not the file asked for."""

from __future__ import annotations

import stat
from pathlib import Path

LIMIT = 400
_NOISE = ("(Background on this error at",)


def one_line(exc: BaseException, limit: int = LIMIT) -> str:
    """``Type: message`` with the most telling line of ``exc``, at most ``limit`` characters.

    TVM errors carry a C++ traceback before the message, so the last line that names an error wins;
    other exceptions (a refused connection, a driver's error) keep their last non-empty line.
    """
    # SQLAlchemy appends a documentation link that mentions "error": it is never the telling line.
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.strip().startswith(_NOISE)]
    message = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_missing(path: Path) -> str:
    """What ``path`` is when it is not a regular file ("is a directory", "does not exist", ...).

    Only ``stat``: a FIFO or a device is never opened (reading one blocks or never ends)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "is a symlink to nothing" if path.is_symlink() else "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    for test, what in (
        (stat.S_ISDIR, "is a directory"),
        (stat.S_ISFIFO, "is a FIFO (named pipe)"),
        (stat.S_ISCHR, "is a character device"),
        (stat.S_ISBLK, "is a block device"),
        (stat.S_ISSOCK, "is a socket"),
    ):
        if test(mode):
            return f"{what}, not a file"
    return "is not a regular file"
