"""The `tvmbench` entry point: the CLI (tvmbench/cli/) with its signals handled.

Ctrl-C or SIGTERM at any moment, even while the CLI's modules are still being imported (a second or
so), ends with one line and exit status 130 (Ctrl-C) or 143 (SIGTERM), never a traceback. Writes are
transactions, so an interrupted command leaves whole rows or none. A running
sweep says more: that finished jobs are stored and how to resume (tvmbench/cli/sweep.py).

Output that cannot be written is no traceback either: a reader that went away (``| head``) ends the
command quietly with exit 0 (``_reader_gone``); a full disk or a failing device under a redirection is one
line on stderr and exit 1. A path too long for the file system, wherever it was given, is one line and
exit 2. Any other error of a file tvmbench writes itself (a full disk, a read-only TVMBENCH_HOME, a file
where its folder should be) is one line naming the file and what to do, exit 1. A terminal or pipe whose
encoding is not UTF-8 (``PYTHONIOENCODING=ascii``, a Latin-1 locale) gets ASCII look-alikes of the few
other characters the tables use (µs is "us").
"""

from __future__ import annotations

import codecs
import errno
import os
import sys

# Errors of writing the output itself (stdout redirected to a full disk, a quota, a dying device).
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


# What the tables and notes print beyond ASCII, and what stands for it where the output cannot encode it.
LOOK_ALIKES = {
    "µ": "u",
    "×": "x",
    "±": "+/-",
    "≤": "<=",
    "≥": ">=",
    "→": "->",
    "·": "-",
    "–": "-",
    "—": "-",
    "…": "...",
}


def _look_alike(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(LOOK_ALIKES.get(c, "?") for c in text), error.end


def _encode_what_the_output_can() -> None:
    """Output in a non-UTF-8 encoding: characters it lacks print as look-alikes, not as a UnicodeEncodeError."""
    codecs.register_error("tvmbench-look-alike", _look_alike)
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding not in ("utf8", "utf8sig") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="tvmbench-look-alike")


def _interrupted(exc: BaseException) -> None:
    from orchestrator import interrupts

    interrupts.ignore_from_now()
    sys.stderr.write(f"interrupted ({interrupts.signal_name(exc)})\n")
    sys.stderr.flush()
    raise SystemExit(interrupts.exit_code(exc))


def main() -> None:
    """Run the CLI; an interrupt typer did not report (imports, its own Exit(130)) is one line here."""
    from orchestrator import interrupts

    interrupts.install()
    _encode_what_the_output_can()
    stdout = sys.stdout
    try:
        from tvmbench.cli import app

        app()
    except KeyboardInterrupt as exc:  # during the imports, before typer runs
        _interrupted(exc)
    except BrokenPipeError:  # raised outside click's own handling of it (see the SystemExit below)
        if not _reader_left(stdout):
            raise
        _reader_gone()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # a path given anywhere (sweep file, model, -o): bad input
            sys.stderr.write(f"error: {_shorten(exc.filename)}: {exc.strerror}; give a shorter path\n")
            raise SystemExit(2) from None
        if exc.filename is not None:  # a file of tvmbench's own (TVMBENCH_HOME, an artifact, a log), not stdout
            shown = _shorten(exc.filename, keep=120)  # whole unless absurd: the user must find that file
            sys.stderr.write(f"error: {shown}: {exc.strerror or exc}; {_advice(exc.errno)}\n")
            raise SystemExit(1) from None
        if exc.errno not in OUTPUT_ERRNOS:
            raise
        _discard_stdout()
        sys.stderr.write(f"error: could not write the output: {exc.strerror or exc}\n")
        raise SystemExit(1) from None
    except SystemExit as exc:
        # typer turns an interrupt inside a command into a silent Exit(130): say it, with the right status.
        cause = _interrupt_cause(exc)
        if cause is not None:
            _interrupted(cause)
        # rich ends a print that met EPIPE with SystemExit(1) raised while handling it (its consoles write
        # to stdout and stderr only), stdout already pointed at /dev/null.
        if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):
            _reader_gone()
        # click ends a command that met EPIPE with exit 1, wrapping sys.stdout so that the flush at exit stays
        # quiet: that swap is the one sign of it that reaches here. The EPIPE may have been a socket's (a
        # tracker gone): only a stdout whose reader left is the quiet exit 0.
        if sys.stdout is not stdout and getattr(sys.stdout, "wrapped", None) is stdout and _reader_left(stdout):
            _reader_gone()
        _flush_stdout()  # what is still buffered fails here, not as "Exception ignored" (exit 120) at exit
        raise
    finally:  # the command is over: a Ctrl-C now would only break the exit hooks (Ray's shutdown)
        interrupts.ignore_from_now()


# What to do about an error of a file tvmbench writes itself; what was stored before it stays stored.
_FILE_ADVICE = {
    errno.ENOSPC: "free space on that disk and run the command again (`tvmbench sweep resume ID` finishes a sweep)",
    errno.EDQUOT: "the disk quota is used up: free space and run the command again",
    errno.EROFS: "that file system is read-only: point TVMBENCH_HOME (or --db) at a writable folder",
    errno.EACCES: "no permission there: fix its owner or mode, or point TVMBENCH_HOME at a folder of yours",
    errno.EPERM: "no permission there: fix its owner or mode, or point TVMBENCH_HOME at a folder of yours",
    errno.EEXIST: "a file stands where tvmbench keeps a folder: move it out of the way",
    errno.ENOTDIR: "a file stands where tvmbench keeps a folder: move it out of the way",
    errno.EISDIR: "a folder stands where tvmbench keeps a file: move it out of the way",
}


def _advice(code: int | None) -> str:
    return _FILE_ADVICE.get(code or 0, "check that path, then run the command again")


def _shorten(name: object, keep: int = 30) -> str:
    """The path an OSError names, as one readable line."""
    from tvmbench.core.printable import printable, shortened

    return printable(shortened(os.fsdecode(name), keep)) if isinstance(name, str | bytes) else "a path"


def _reader_gone() -> None:
    """The reader of stdout went away (``| head -1``, ``grep -q``, a pager quit): end quietly, exit 0.

    0, not click's 1 nor the shell's 141 (SIGPIPE): the reader had what it wanted, nothing failed, and under
    ``set -o pipefail`` a non-zero status would fail a script's ``tvmbench results list | head -1``.
    """
    _discard_stdout()
    raise SystemExit(0) from None


def _reader_left(stdout: object) -> bool:
    """Whether ``stdout`` is a pipe whose reading end is closed (poll reports an error or hang-up on it)."""
    import select

    try:
        fd = stdout.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
    if not hasattr(select, "poll"):  # Windows: no way to ask; click's reading of the EPIPE stands
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _flush_stdout() -> None:
    """Flush stdout now; a reader that went away meanwhile costs nothing (the command's status stands)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # what the command had to say is said; only its last lines found no reader
        _discard_stdout()
    except (OSError, ValueError):  # a full disk, a closed stream: Python's own report at exit, as before
        pass


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered would fail again when Python flushes it at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no stdout to point anywhere
        pass


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
