"""The results database's schema: which revision it is at, whether a command can use it, and migrations.

Revisions are read from the migration files as text (a read command's start must not import alembic);
``upgrade`` runs alembic. ``open_for_reading`` is the read commands' door: a read-only engine on a database
at the newest schema, or one StoreError line saying what is wrong with it and what to run.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DatabaseError

from db.engine import MIGRATIONS, StoreError, make_engine, sqlite_path
from tvmbench.core.errors import one_line

_MIGRATION_LOCK = 0x7476_6D62  # "tvmb": the PostgreSQL advisory lock key that serialises migrations

_REVISION_LINE = re.compile(r"^(down_revision|revision)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|None)", re.MULTILINE)


def head_revision() -> str:
    """The newest migration's revision, read from the migration files as text.

    Opening a database for reading compares its revision with this; reading the files' two assignment
    lines costs well under a millisecond, where alembic's ScriptDirectory imports alembic and every
    migration module (a few hundred milliseconds of a read command's start). tests/test_migration_0005.py
    checks that both agree.
    """
    revisions, parents = _revisions()
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"migrations in {MIGRATIONS} have {len(heads)} heads ({sorted(heads)}), expected one")
    return heads.pop()


def known_revisions() -> set[str]:
    """Every revision this tvmbench's migrations know (a database at any other was written by a newer one)."""
    return _revisions()[0]


def _revisions() -> tuple[set[str], set[str]]:
    """The revisions of the migration files and those that some file names as its parent."""
    revisions, parents = set(), set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        found = {name: a or b or None for name, a, b in _REVISION_LINE.findall(path.read_text())}
        if found.get("revision"):
            revisions.add(found["revision"])
        if found.get("down_revision"):
            parents.add(found["down_revision"])
    return revisions, parents


def newer_schema(current: str | None) -> str | None:
    """What to say when revision ``current`` is none of this tvmbench's (a newer one wrote it); else None."""
    if current is None or current in known_revisions():
        return None
    # `tvmbench db upgrade` cannot help: alembic here knows no path from a revision it has never seen.
    return (
        f"it was written by a newer tvmbench (schema revision {current} is unknown to this one, which knows "
        f"up to {head_revision()}): upgrade tvmbench, or use another --db"
    )


def current_revision(conn: Connection) -> str | None:
    """The revision the database's alembic_version row names; None when it has no tvmbench schema."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:
        raise StoreError(f"the database's alembic_version table holds {len(rows)} revisions ({rows}), expected one")
    return rows[0] if rows else None


#: What a half-made schema is and what to do: `db upgrade` would fail on it ("table boards already exists").
HALF_MADE = (
    "its tvmbench tables exist but are all empty and it records no schema revision: an older tvmbench was "
    "stopped while creating it (they made a new database in place, not all at once); delete the file (it "
    "holds nothing) and run the command again"
)


def half_made(conn: Connection) -> bool:
    """Whether a SQLite database with no revision holds only tvmbench's tables, at least one, all empty.

    An older tvmbench built a new database in place, and SQLite commits each CREATE TABLE by itself
    (pysqlite opens no transaction for DDL): a creation killed midway left such a file. A database
    with a row anywhere, or a table of another program, is never taken for one.
    """
    if conn.dialect.name != "sqlite":  # PostgreSQL migrates in one transaction: nothing is left half made
        return False
    from db.models import Base  # the tables' names; imported here, where only a schema-less file is asked

    names = set(conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'").scalars())
    ours = set(Base.metadata.tables) | {"alembic_version"}
    # _alembic_tmp_*: the copy a batch migration (render_as_batch) makes while it rebuilds a table.
    if not names - {"alembic_version"} or not all(n in ours or n.startswith("_alembic_tmp_") for n in names):
        return False
    for name in names:
        quoted = '"' + name.replace('"', '""') + '"'
        if conn.exec_driver_sql(f"SELECT 1 FROM {quoted} LIMIT 1").first() is not None:
            return False
    return True


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (alembic upgrade head)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Two processes opening a fresh database at once (a submitted driver and its submitter) would
            # both CREATE TABLE alembic_version; the lock holds the second until the first commits.
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def upgrade_if_behind(engine: Engine) -> str | None:
    """``upgrade`` unless the schema is at the newest migration already (then alembic is not even loaded);
    returns the revision the database was at before (None: it held no tvmbench schema)."""
    with engine.connect() as conn:
        current = current_revision(conn)
        left_half_made = current is None and half_made(conn)
    shown = engine.url.render_as_string(hide_password=True)
    if left_half_made:  # alembic would fail on its first CREATE TABLE ("table boards already exists")
        raise StoreError(f"results database {sqlite_path(shown) or shown}: {HALF_MADE}")
    newer = newer_schema(current)
    if newer:
        raise StoreError(f"results database {shown}: {newer}")
    if current != head_revision():
        upgrade(engine)
    return current


def schema_problem(engine: Engine, shown: str = "...") -> str | None:
    """None when the database's schema is at the newest migration, else what is wrong and what to run
    (``shown``: the database as the command to run names it)."""
    head = head_revision()
    with engine.connect() as conn:
        current = current_revision(conn)
        left_half_made = current is None and half_made(conn)
    if current == head:
        return None
    if left_half_made:
        return HALF_MADE
    if current is None:
        return (
            "it is not a tvmbench database (it holds no tvmbench schema: empty, or another program's); give the "
            "path of a results database, or run a sweep or `tvmbench db upgrade` to make this one"
        )
    newer = newer_schema(current)
    if newer:
        return newer
    return f"its schema is at revision {current}, this tvmbench needs {head}: run `tvmbench db upgrade --db {shown}`"


def open_for_reading(url: str, path: Path | None) -> Engine:
    """A read-only engine on an existing tvmbench database at the newest schema, else StoreError."""
    if path is not None and not path.is_file():
        raise StoreError(f"no results database at {path}: run a sweep first, or give --db (or TVMBENCH_DB)")
    engine = make_engine(url, read_only=True)
    shown = make_url(url).render_as_string(hide_password=True)
    try:
        problem = schema_problem(engine, shown)
    except DatabaseError as exc:
        engine.dispose()
        if path is None or "not a database" not in str(exc):
            raise
        raise StoreError(
            f"{path} is not a tvmbench database (SQLite says: {one_line(exc.orig)}): give the path of a "
            "results database"
        ) from None
    if problem:
        engine.dispose()
        raise StoreError(f"results database {path or shown}: {problem}")
    if path is not None:
        try:
            probe_tables(engine)
        except StoreError:
            engine.dispose()
            raise
    return engine


def probe_tables(engine: Engine) -> None:
    """Read the first row of every table of a SQLite database: DamagedDatabase when one cannot be read."""
    # A few microseconds a table, so a read command says at open (one line) that a table's top page is
    # damaged. Damage deeper down fails the query that meets it, named all the same by _name_failures.
    with engine.connect() as conn:
        names = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'").scalars().all()
        for name in names:
            quoted = '"' + name.replace('"', '""') + '"'
            conn.exec_driver_sql(f"SELECT * FROM {quoted} LIMIT 1").all()
