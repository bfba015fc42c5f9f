"""What every command group of the CLI shares: the consoles, the common options, the one-line failure."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook
from rich.segment import Segment
from rich.text import Text

from db.urls import redact
from orchestrator.farm.errors import MAX_BOARDS  # noqa: F401  (re-exported: the --boards options' bound)
from tvmbench.cli.lazy import lazy

# The library (SQLAlchemy, numpy, onnx, TVM, Ray) loads inside the commands that use it: `tvmbench --help`
# and a query of the results stay fast (benchmarks/startup.py; tests/test_cli_startup.py).
if TYPE_CHECKING:
    from db.store import ResultStore
    from orchestrator.spec import SweepSpec

table = lazy("tvmbench.answers.table")  # the tables' options, set by every command that prints one

T = TypeVar("T")


class _EscapeControls(RenderHook):
    """Whatever the CLI prints goes through ``printable``: a name or an error from a model or a database
    never reaches the terminal as an escape sequence (tvmbench/core/printable.py), nor as a bidi override
    that reverses the rest of its line (``table.shown``)."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Escaped(r) for r in renderables]


class _Escaped:
    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.inner, options):
            # Control segments (cursor moves of a progress display) are rich's own: kept as they are.
            yield segment if segment.control else Segment(table.shown(segment.text), segment.style)


# Piped output (CI logs, `| less`) gets wide tables rather than rich's 80-column default. No markup:
# model paths, keys, presets, job ids and messages are user text ("[axes]", "[/x]") and print as written;
# styles are given as rich Text.
console = Console(width=None if sys.stdout.isatty() else 200, markup=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200, markup=False)
for _console in (console, err):
    _console.push_render_hook(_EscapeControls())

NOT_FOUND = 2  # the exit status of every lookup that finds nothing (sweep, job, board), like a bad argument
INVALID = 2  # bad input: a sweep file, an option, a --db that is no database (1 is "some jobs failed")

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="TVMBENCH_DB",
        help="The results database: a SQLAlchemy URL or a SQLite file's path (default: SQLite in TVMBENCH_HOME).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
WideOpt = Annotated[bool, typer.Option("--wide", help="Every column of the table, however wide.")]
ColumnsOpt = Annotated[
    str | None,
    typer.Option("--columns", help="Only these columns, in this order, comma-separated (a wrong name lists them)."),
]
TsvOpt = Annotated[bool, typer.Option("--tsv", help="Tab-separated values (every column, full ids) for spreadsheets.")]


def tables(wide: bool = False, columns: str | None = None, tsv: bool = False, as_json: bool = False) -> None:
    """Set how this command prints its tables (--wide, --columns, --tsv); a wrong column name, or --tsv with
    --json (two formats for one stdout), exits 2.

    With --tsv, stdout carries the TSV alone: the lines a command prints around its tables go to stderr.
    """
    if tsv and as_json:
        fail("--json and --tsv are two formats for one output: choose one", INVALID)
    names = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    table.current = table.Options(wide=wide, columns=names, tsv=tsv, on_error=lambda m: fail(f"--columns: {m}", 2))
    console.file = sys.stderr if tsv else None  # type: ignore[assignment]  (None: sys.stdout at each print)


def fail(message: str, code: int = 1) -> None:
    """Print one error line (database passwords masked) and exit non-zero."""
    err.print(Text.assemble(("error:", "bold red"), " ", redact(message)), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def checked_tracker(value: str | None) -> str | None:
    """The --tracker value when it is HOST:PORT with a port in 1-65535; else one error line (exit 2)."""
    if value is None:
        return None
    from workers.tracker_client import parse_addr

    try:
        parse_addr(value.strip())
    except ValueError:
        fail(f"tracker {value!r} (--tracker or TVMBENCH_TRACKER): expected HOST:PORT, e.g. 127.0.0.1:9190", code=2)
    return value.strip()


TrackerOpt = Annotated[
    str | None,
    typer.Option(
        "--tracker",
        envvar="TVMBENCH_TRACKER",
        callback=checked_tracker,
        help="HOST:PORT of a TVM RPC tracker (default: the farm from `farm up`/`farm connect`, else a local one).",
    ),
]


def check_range(option: str, value: float, low: float, high: float | None = None, *, open_low: bool = False) -> None:
    """Exit 2 naming ``option`` unless low <(=) value <(=) high (``nan`` never passes, unlike click's ranges).

    Infinity never passes either: no option of a command means "without bound" by it (the dashboard's
    forms refuse it too), and arithmetic on it gives nan where a figure is printed.
    """
    if isinstance(value, float) and not math.isfinite(value):
        fail(f"{option} {value:g}: must be a finite number", code=2)
    above = value > low if open_low else value >= low
    if not (above and (high is None or value < high)):
        bounds = f"{'above' if open_low else 'at least'} {low:g}" + (f" and below {high:g}" if high is not None else "")
        fail(f"{option} {value:g}: must be {bounds}", code=2)


def note(message: str) -> None:
    """A progress note on stderr (dimmed), for long steps such as provisioning a board."""
    # One line in a pipe or a log (not cut at the console's 200 columns); wrapped between words in a terminal.
    err.print(redact(message), style="dim", highlight=False, soft_wrap=not err.is_terminal)


def home() -> Path:
    """TVMBENCH_HOME, created if missing (one error line when it cannot be a folder: exit 2, bad input)."""
    from db.store import StoreError, ensure_home

    try:
        return ensure_home()
    except StoreError as exc:
        fail(str(exc), code=INVALID)
        raise  # unreachable: fail exits


def open_store(db: str | None, read_only: bool = False) -> ResultStore:
    """The results database, or one error line naming it (password masked, exit 2: the --db is bad input).

    ``read_only``: for commands that only read. Nothing is created or migrated: a file that is not a
    tvmbench database and an older schema are each one line; a database it cannot write (a read-only
    mount) works; a SQLite file that does not exist yet (a fresh machine) reads as an empty database.
    """
    from db.engine import DatabaseLocked, DiskFull, refuse_in_memory
    from db.store import ResultStore, StoreError
    from tvmbench.core.errors import one_line

    try:
        refuse_in_memory(db)
        return ResultStore(db, read_only=read_only, missing="empty")
    except (DatabaseLocked, DiskFull) as exc:  # not bad input: the same command works once the lock or space is freed
        fail(str(exc), code=1)
        raise  # unreachable: fail exits
    except StoreError as exc:
        fail(redact(f"cannot open results database: {exc}", db), code=INVALID)
        raise  # unreachable: fail exits
    except Exception as exc:  # the driver's own error: wrong host, port, user, password, not a database file
        fail(redact(f"cannot open results database {db or '(default)'}: {one_line(exc)}", db), code=INVALID)
        raise  # unreachable: fail exits


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def load(path: Path, label: str | None = None) -> SweepSpec:
    """The validated sweep file, or its one-line error (exit 2)."""
    from orchestrator.spec import SpecError, load_spec

    try:
        return load_spec(path, label=label)
    except SpecError as exc:
        fail(str(exc), code=2)
        raise  # unreachable: fail exits


@contextmanager
def failures_as_lines() -> Iterator[None]:
    """The library's own errors (each one line saying what to do) end the command: exit 2 for bad input, else 1."""
    try:
        yield
    except Exception as exc:
        code = _failure_code(exc)
        if code is None:
            raise
        fail(str(exc), code=code)


# (module, exception, exit status): the library's errors that end a command with their one line. An error
# whose module was never imported cannot have been raised, so only loaded modules are asked (no import here).
_LIBRARY_FAILURES = (
    ("db.lookup", "QueryError", 2),
    ("tvmbench.answers.query", "QueryError", 2),
    ("tvmbench.answers.query", "NoSuchJob", 2),
    ("orchestrator.spec", "SpecError", 2),
    ("orchestrator.submit", "NotFound", 2),
    ("workers.toolchains.toolchain", "ToolchainError", 2),  # a toolchain of the tvm axis: unknown, missing, bad
    ("orchestrator.farm", "FarmError", 1),
    ("db.writes", "SweepBusy", 1),  # another live driver runs the sweep
    ("db.engine", "DamagedDatabase", 2),  # met by a query after the open's check (a page deep in a table)
    ("db.engine", "DatabaseLocked", 1),  # another program's transaction outlasted the busy timeout
    ("db.engine", "DiskFull", 1),  # the database's disk filled up: what was stored stays, the rest resumes
    ("db.engine", "DatabaseGone", 1),  # the SQLite file was deleted or replaced under an open store
    ("orchestrator.submit", "SubmitError", 1),
)


def _failure_code(exc: Exception) -> int | None:
    """The exit status of a library error (2 bad input or nothing found, 1 otherwise); None for anything else."""
    for module, name, code in _LIBRARY_FAILURES:
        loaded = sys.modules.get(module)
        kind = getattr(loaded, name, None) if loaded is not None else None
        if isinstance(kind, type) and isinstance(exc, kind):
            return code
    return None


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with ``failures_as_lines``."""
    with failures_as_lines():
        return fn(*args, **kwargs)
    raise AssertionError("unreachable")
