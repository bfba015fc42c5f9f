"""The `tvmbench` entry point: the CLI (tvmbench/cli/) with its signals handled.

Ctrl-C or SIGTERM at any moment, even while the CLI's modules are still being imported (a second or
so), ends with one line and exit status 130 (Ctrl-C) or 143 (SIGTERM), never a traceback. Writes are
transactions, so an interrupted command leaves whole rows or none. A running
sweep says more: that finished jobs are stored and how to resume (tvmbench/cli/sweep.py).
"""

from __future__ import annotations

import sys


def _interrupted(exc: BaseException) -> None:
    from orchestrator import interrupts

    sys.stderr.write(f"interrupted ({interrupts.signal_name(exc)})\n")
    sys.stderr.flush()
    raise SystemExit(interrupts.exit_code(exc))


def main() -> None:
    """Run the CLI; an interrupt typer did not report (imports, its own Exit(130)) is one line here."""
    from orchestrator import interrupts

    interrupts.install()
    try:
        from tvmbench.cli import app

        app()
    except KeyboardInterrupt as exc:  # during the imports, before typer runs
        _interrupted(exc)
    except SystemExit as exc:
        # typer turns an interrupt inside a command into a silent Exit(130): say it, with the right status.
        cause = _interrupt_cause(exc)
        if cause is not None:
            _interrupted(cause)
        raise


def _interrupt_cause(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt typer converted into this exit, if any (its Exit is ``raise ... from`` it)."""
    seen = exc
    for _ in range(4):  # SystemExit <- click Exit <- KeyboardInterrupt
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            return None
        if isinstance(nxt, KeyboardInterrupt):
            return nxt if seen.__cause__ is nxt else None  # a command that reported it raised Exit itself
        seen = nxt
    return None


if __name__ == "__main__":
    main()
