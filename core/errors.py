"""One way to turn an exception into the one line a person reads (a row's error, a CLI message)."""

from __future__ import annotations

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
