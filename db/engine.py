"""Where the results database is and how it is opened: home and URL configuration, engines with their
per-backend settings (SQLite pragmas, read-only engines). The schema's revision, its check and its
migrations are db/schema.py.

SQLite (the default) runs in WAL mode with synchronous=FULL and a busy timeout, so a result that was
acknowledged survives a crash of the orchestrator. PostgreSQL connections give up after CONNECT_TIMEOUT_S
unless the URL (or PGCONNECT_TIMEOUT) says otherwise.

Every engine turns a damaged database (SQLite's "database disk image is malformed", text that is not
UTF-8, PostgreSQL's data_corrupted), a full disk and a server that never answers into a StoreError
naming the database and what to do, wherever the read or write that met it runs.

A new SQLite database is made all at once (``create_sqlite``): built in a temporary file beside it and
published complete, so a creation killed midway leaves no file rather than a half-made schema.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import QueuePool

from db.urls import as_url
from tvmbench.core.errors import describe_missing, one_line

MIGRATIONS = Path(__file__).parent / "migrations"
SUPPORTED_BACKENDS = ("sqlite", "postgresql")
#: Threads that read through one read-only engine at once: Starlette's threadpool (anyio's 40 tokens).
READ_THREADS = 40
#: Seconds a PostgreSQL connection may take: psycopg's own default is 130 s, which is how long a --db
#: pointing at a port where something else listens (Redis, SSH) used to hang before saying anything.
CONNECT_TIMEOUT_S = 10
_READ_ONLY_OPTION = "-c default_transaction_read_only=on"
BUSY_TIMEOUT_S = 30  # how long a SQLite connection waits for another's lock before "database is locked"
_SQLITE_CORRUPT = 11  # SQLite's primary result code for a damaged file (extended codes keep it in the low byte)
_SQLITE_FULL = 13  # SQLite's primary result code for "database or disk is full"
_SQLITE_IOERR = 10  # SQLite's primary result code for an I/O error (EFBIG past RLIMIT_FSIZE among them)
_SQLITE_READONLY_DBMOVED = 8 | (4 << 8)  # the file was unlinked or renamed under an open connection
_PG_DISK_FULL = "53100"  # SQLSTATE disk_full
_PG_CORRUPTED = ("XX001", "XX002")  # SQLSTATE data_corrupted, index_corrupted
_UTF8_COLUMN = re.compile(r"Could not decode to UTF-8 column '([^']*)'")


class StoreError(RuntimeError):
    """The results database cannot be opened as asked; the message names the path and what to do."""


class DamagedDatabase(StoreError):
    """The results database's file or data is damaged: no command can read it as it is."""


class DatabaseLocked(StoreError):
    """Another program held the SQLite file's lock for longer than the busy timeout."""


class DiskFull(StoreError):
    """The disk holding the database is full: the write that met it was rolled back, what was stored stays.

    ``problem`` says which database and disk; ``then`` what to run once there is space (a sweep's driver
    says `sweep resume ID`: db/store.py knows the sweep, the engine does not).
    """

    #: What frees the way for the write (the disk's room; a size limit says how to raise it).
    fix = "free space there"

    def __init__(self, problem: str, then: str = "run the command again") -> None:
        self.problem, self.then = problem, then
        super().__init__(f"{problem}: {self.fix}, then {then}")


class FileSizeLimit(DiskFull):
    """A write went past this process's file size limit (``ulimit -f``): SQLite says only "disk I/O error"."""

    fix = "raise the limit (`ulimit -f unlimited` in the shell that runs tvmbench)"


class DatabaseGone(StoreError):
    """The SQLite file was deleted or replaced while it was open: writes went to a file no path names."""


def default_home() -> Path:
    """Where tvmbench keeps its database, artifact cache and farm state (TVMBENCH_HOME)."""
    # Set but empty (`TVMBENCH_HOME= tvmbench ...`) is unset, as for TVMBENCH_DB: not the current folder.
    return Path(os.environ.get("TVMBENCH_HOME") or Path.home() / ".tvmbench")


def ensure_home() -> Path:
    """TVMBENCH_HOME, created if missing; StoreError naming it when it is not (and cannot be) a folder."""
    home = default_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "is a file, not a folder" if home.is_file() else f"cannot be created ({exc.strerror or exc})"
        raise StoreError(
            f"TVMBENCH_HOME {home} {what}: point TVMBENCH_HOME at a folder tvmbench may write (default ~/.tvmbench)"
        ) from None
    return home


def default_url() -> str:
    """TVMBENCH_DB, else a SQLite file under TVMBENCH_HOME."""
    url = os.environ.get("TVMBENCH_DB")
    if url:
        return as_url(url)
    return f"sqlite:///{ensure_home() / 'results.db'}"


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///path`` URL (None for other backends and in-memory databases)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def check_sqlite_path(path: Path) -> None:
    """Fail at once (not after the write retries) when ``path`` cannot be a SQLite database file."""
    if path.exists() and not path.is_file():
        # A file inside a folder is the likely meaning; inside /dev/null it is none.
        example = path / "results.db" if path.is_dir() else "results.db"
        raise StoreError(f"{path} {describe_missing(path)}: give the path of a database file, e.g. {example}")
    if not path.parent.is_dir():
        raise StoreError(f"{path}: folder {path.parent} {describe_missing(path.parent)}: create it or fix the path")


def check_backend(url: str) -> None:
    """StoreError unless ``url`` is a SQLAlchemy URL of a supported backend (not, say, a driver import error)."""
    try:
        backend = make_url(url).get_backend_name()
    except Exception as exc:  # sqlalchemy.exc.ArgumentError, ValueError: not a URL at all
        raise StoreError(
            f"{url!r} is not a database URL ({one_line(exc)}): use sqlite:///path/results.db or "
            "postgresql+psycopg://user@host/db"
        ) from None
    if backend not in SUPPORTED_BACKENDS:
        raise StoreError(
            f"{url}: {backend!r} databases are not supported: use sqlite:///path/results.db or "
            "postgresql+psycopg://user@host/db"
        )


def in_memory(given: str) -> bool:
    """Whether the database a person gave (a URL or a path) is SQLite in memory."""
    # SQLite's own name for it, given as a path: as_url would make it a file named ":memory:" in the
    # working directory (created by a writer, reported as .../%3Amemory%3A).
    if given.strip() == ":memory:":
        return True
    try:
        parsed = make_url(as_url(given))
    except Exception:  # not a URL: check_backend says so
        return False
    return parsed.get_backend_name() == "sqlite" and (
        parsed.database in (None, "", ":memory:") or "memory" in str(parsed.query.get("mode"))
    )


def refuse_in_memory(given: str | None) -> None:
    """StoreError if the database a person gave (``given``, else TVMBENCH_DB) is SQLite in memory.

    For URLs from people (``--db``, the Python API); the store itself opens an empty in-memory database
    on purpose, to read where no file exists yet (db/store.py's ``EMPTY_DB``).
    """
    given = given if given is not None else os.environ.get("TVMBENCH_DB")
    if given and in_memory(given):
        # A sweep run into it printed its table and lost every row at exit: no resume, no query.
        raise StoreError(
            f"{given}: an in-memory SQLite database keeps nothing after this command; give a file, "
            "e.g. sqlite:///results.db (or the path results.db)"
        )


def make_engine(url: str, *, read_only: bool = False, shown_as: Path | None = None) -> Engine:
    """An engine with the per-backend settings that make writes durable and concurrent.

    ``read_only``: SQLite opens the file read-only (``mode=ro``), or as immutable where its folder is
    not writable (a read-only mount: SQLite could not create the WAL index there, and nobody can write);
    PostgreSQL sessions start with ``default_transaction_read_only`` (ResultStore asks for that only
    with ``never_write``). ``shown_as``: the path errors name (a new database is built in a temporary file).
    """
    engine = _make_engine(url, read_only)
    _name_failures(engine, url, shown_as)
    return engine


def _make_engine(url: str, read_only: bool) -> Engine:
    path = sqlite_path(url) if url.startswith("sqlite") else None
    if path is not None and read_only:
        from urllib.parse import quote

        mode = "mode=ro" if os.access(path.parent, os.W_OK) else "immutable=1"
        target = f"file:{quote(str(path.resolve()))}?{mode}"
        # A file URL would get SQLAlchemy's QueuePool, but ``creator`` with "sqlite://" gets the in-memory
        # default, a SingletonThreadPool: one connection per thread, closed by whichever thread tidies the
        # pool, under the dashboard's worker threads (SIGSEGV, "Cannot operate on a closed database").
        # A QueuePool lends each connection to one thread at a time; it holds as many as Starlette's
        # threadpool runs at once, so no request waits for another's connection.
        engine = create_engine(
            "sqlite://",
            creator=lambda: _sqlite_connect(target),
            poolclass=QueuePool,
            pool_size=8,
            max_overflow=READ_THREADS - 8,
        )

        @event.listens_for(engine, "connect")
        def _read_pragmas(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA query_only=ON")

        return engine
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, connect_args=postgres_connect_args(url, read_only=read_only))


def postgres_connect_args(url: str, *, read_only: bool = False) -> dict[str, Any]:
    """Driver arguments added to ``url``'s own: a connect timeout, and for readers the read-only option."""
    query = make_url(url).query
    args: dict[str, Any] = {}
    if "connect_timeout" not in query and not os.environ.get("PGCONNECT_TIMEOUT"):
        args["connect_timeout"] = CONNECT_TIMEOUT_S
    if read_only:
        # connect_args replace the URL's query parameters of the same name: the URL's own options (say
        # -csearch_path=myschema) are repeated here, else a reader looked for the tables in public.
        given = query.get("options")
        # A URL may repeat the key (a tuple); without one, libpq would have read PGOPTIONS.
        own = " ".join(given) if isinstance(given, tuple) else given or os.environ.get("PGOPTIONS", "")
        args["options"] = f"{own} {_READ_ONLY_OPTION}".strip()
    return args


def _name_failures(engine: Engine, url: str, shown_as: Path | None = None) -> None:
    """Raise StoreError, naming the database, for a damaged one, a full disk, a deleted file and a server
    that never answered."""
    parsed = make_url(url)
    path = sqlite_path(url)
    if shown_as is not None:
        path = shown_as
    shown = str(path) if path is not None else parsed.render_as_string(hide_password=True)

    @event.listens_for(engine, "handle_error")
    def _named(context: Any) -> None:
        if context.is_pre_ping:  # the pool handles a dead pooled connection itself (it reconnects)
            return
        exc = context.original_exception
        damage = damage_of(exc)
        if damage is not None:
            raise DamagedDatabase(
                f"results database {shown} is damaged ({damage}): restore it from a backup, or run a new "
                "sweep into another --db"
            ) from None
        if path is not None and "database is locked" in str(exc):
            # WAL lets readers and one writer share the file; a lock held this long is another program's
            # open transaction (a sqlite3 shell after BEGIN, a database browser), or a file on a network mount.
            raise DatabaseLocked(
                f"results database {shown} stayed locked by another program for {BUSY_TIMEOUT_S} s: end that "
                "program's open transaction (a sqlite3 shell, a database browser) and run the command again; "
                "nothing stored was changed"
            ) from None
        if _is_disk_full(exc):
            # The transaction was rolled back: what earlier ones stored is intact (a traceback said nothing).
            raise DiskFull(f"results database {shown}: {_full_disk(path)}") from None
        limit = _file_size_limit(exc) if path is not None else None
        if limit is not None:
            # Python ignores SIGXFSZ, so a write past `ulimit -f` fails with EFBIG, which SQLite reports as a
            # bare "disk I/O error" (a traceback before): the limit is the likely culprit, so name it.
            raise FileSizeLimit(
                f"results database {shown}: a write failed (disk I/O error) and this process may write files of "
                f"at most {limit // 1024} KiB (`ulimit -f`); the database and its journal need more"
            ) from None
        if path is not None and getattr(exc, "sqlite_errorcode", None) == _SQLITE_READONLY_DBMOVED:
            raise DatabaseGone(
                f"results database {shown} was deleted or moved while this command had it open: what it wrote "
                "since is not in it; run the command again"
            ) from None
        timed_out = type(exc).__name__ == "ConnectionTimeout" or "timeout expired" in str(exc)
        if timed_out and parsed.get_backend_name() == "postgresql":
            address = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
            raise StoreError(
                f"results database {shown}: nothing PostgreSQL answered at {address} within "
                f"{_connect_timeout(parsed.query)} s ({one_line(exc)}): check the URL's host and port"
            ) from None


def damage_of(exc: BaseException) -> str | None:
    """What is damaged, when ``exc`` is a driver's error about a damaged database; else None."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == _SQLITE_CORRUPT:
        return str(exc)
    utf8 = _UTF8_COLUMN.search(str(exc))
    if utf8:  # Python's sqlite3 quotes the whole value after this: a pass trace can be megabytes
        return f"column {utf8.group(1)} holds text that is not UTF-8"
    if getattr(exc, "sqlstate", None) in _PG_CORRUPTED:
        return one_line(exc)
    return None


def _is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a driver's "the disk is full" (SQLite's SQLITE_FULL, PostgreSQL's disk_full)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == _SQLITE_FULL:
        return True
    return getattr(exc, "sqlstate", None) == _PG_DISK_FULL or "database or disk is full" in str(exc)


def _file_size_limit(exc: BaseException) -> int | None:
    """This process's file size limit in bytes when ``exc`` is SQLite's I/O error and a limit is set; else None."""
    code = getattr(exc, "sqlite_errorcode", None)
    if not (isinstance(code, int) and code & 0xFF == _SQLITE_IOERR):
        return None
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def _full_disk(path: Path | None) -> str:
    """Which disk is full, in words: the file system holding ``path`` and what it has free."""
    if path is None:  # PostgreSQL: the server's disk, which this machine cannot see
        return "the database server's disk is full"
    folder = path.parent.absolute()
    mount = folder
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        free = f", {shutil.disk_usage(folder).free // 1024} KiB free"
    except OSError:
        free = ""
    holds = "" if mount == folder else f", which holds {folder}"
    return f"the disk is full (the file system mounted at {mount}{holds}{free})"


def _connect_timeout(query: Any) -> str:
    """The connect timeout in force for a URL with query ``query`` (as text, for messages)."""
    given = query.get("connect_timeout") or os.environ.get("PGCONNECT_TIMEOUT")
    return str(given) if given else str(CONNECT_TIMEOUT_S)


def _sqlite_connect(uri: str) -> Any:
    import sqlite3

    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
