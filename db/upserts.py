"""INSERT ... ON CONFLICT for the two supported dialects: the writes several writers may race on.

Rows that several writers may create at once (models, sweeps, jobs, builds, boards, runs, tuning
records) are written this way, so drivers on several machines sharing one PostgreSQL database never
trip over each other's rows, and a retried write leaves one row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from db import models as m

_STATEMENTS: dict[tuple[Any, ...], Any] = {}


def _dialect_insert(dialect: str) -> Any:
    """The dialect's INSERT construct, imported on first use (the PostgreSQL dialect module pulls in asyncio
    and asyncpg's adapter: a read-only SQLite command should not pay for that at start-up)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise ValueError(f"unsupported database {dialect!r}: use sqlite:///path or postgresql+psycopg://host/db")
    return insert


def conflict_insert(
    session: Session,
    model: type[m.Base],
    columns: Any,
    conflict: list[str],
    *,
    update: bool = False,
    returning: str | None = None,
) -> Any:
    """INSERT ... ON CONFLICT (conflict) DO NOTHING (or, with ``update``, DO UPDATE of ``columns``).

    The values go to ``session.execute`` as parameters: the statement is built once per shape rather
    than once per row (building it with ``.values()`` each time was most of a write's cost in a sweep).
    It is built on the model's table, not the mapped class: an INSERT of the class runs SQLAlchemy's ORM
    bulk-insert machinery on every call, which was half of each run's write (no-op jobs: 2.7 ms a run).
    PostgreSQL and SQLite, the two supported backends, both have ON CONFLICT.
    """
    dialect = session.get_bind().dialect.name
    key = (dialect, model, tuple(columns), tuple(conflict), update, returning)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        table = model.__table__
        insert = _dialect_insert(dialect)(table)
        if update:
            changed = {k: insert.excluded[k] for k in columns if k not in conflict}
            stmt = insert.on_conflict_do_update(index_elements=conflict, set_=changed)
        else:
            stmt = insert.on_conflict_do_nothing(index_elements=conflict)
        if returning is not None:
            stmt = stmt.returning(table.c[returning])
        _STATEMENTS[key] = stmt
    return stmt


def insert_ignore(session: Session, model: type[m.Base], values: dict[str, Any], conflict: list[str]) -> bool:
    """INSERT ... ON CONFLICT (conflict) DO NOTHING; True if this call created the row.

    A concurrent writer inserting the same key makes this one wait for its commit and then do nothing,
    instead of failing with an IntegrityError that would roll back the whole transaction.
    """
    # RETURNING rather than rowcount: drivers differ in what rowcount says for a skipped row.
    stmt = conflict_insert(session, model, values, conflict, returning=conflict[0])
    return session.execute(stmt, values).first() is not None


def upsert(session: Session, model: type[m.Base], values: dict[str, Any], conflict: list[str]) -> None:
    """INSERT ... ON CONFLICT (conflict) DO UPDATE: the row ends up with ``values`` whoever wrote first."""
    session.execute(conflict_insert(session, model, values, conflict, update=True), values)
