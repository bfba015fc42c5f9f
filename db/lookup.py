"""The one way an id the user typed (a sweep id, job key or board id, or a prefix of one) finds its row.

An exact value wins; otherwise the value must be the only one starting with what was typed. ``%`` and
``_`` are matched as themselves (SQL LIKE would take them as wildcards and `farm reset %` would reset
every board), and a prefix that several values share is refused with the candidates listed rather than
answered with whichever row the database returns first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select

#: Candidates an ambiguity error lists (then "and N more").
SHOWN = 5


class QueryError(ValueError):
    """A question the results database cannot answer as asked (unknown or ambiguous id, bad column...);
    the message is one line saying what to do. answers.query re-exports it."""


def ambiguous(what: str, ref: str, candidates: list[str], total: int | None = None) -> QueryError:
    """The error for ``ref`` starting several ``candidates`` (``total``: how many, when more than listed)."""
    total = total or len(candidates)
    listed = ", ".join(candidates[:SHOWN]) + (f" and {total - SHOWN} more" if total > SHOWN else "")
    return QueryError(f"{what} {ref!r} is ambiguous, {total} start with it: {listed}; give more characters")


def pick_prefix(what: str, ref: str, values: Iterable[str]) -> str | None:
    """The one of ``values`` equal to ``ref``, else the only one starting with it; None if none does.

    For lookups outside the database (Ray job ids); QueryError when several start with ``ref``.
    """
    distinct = sorted(set(values))
    if ref in distinct:
        return ref
    found = [v for v in distinct if v.startswith(ref)]
    if len(found) > 1:
        raise ambiguous(what, ref, found)
    return found[0] if found else None


def resolve_prefix(session: Any, column: Any, ref: str, what: str, *where: Any) -> str | None:
    """The value of ``column`` that ``ref`` names: equal to it, else the only one starting with it.

    Args:
        session: a Session or Connection to read with.
        column: the ORM column looked up (``m.Sweep.id``, ``m.Job.job_key``, ``m.Board.id``).
        ref: what the user typed; LIKE wildcards in it match only themselves.
        what: the thing's name for the error ("sweep", "job key", "board").
        where: further conditions (a job key within one sweep).

    Returns None when nothing matches; QueryError, listing the candidates, when several values do, or
    when ``ref`` is blank (the prefix of everything: with one sweep stored it would name that one).
    """
    if not ref.strip():
        raise QueryError(f"{what} {ref!r} is blank: give an id or a unique prefix of one")
    if session.scalars(select(column).where(column == ref, *where).limit(1)).first() is not None:
        return ref
    stmt = select(column).where(column.startswith(ref, autoescape=True), *where).distinct()
    found = list(session.scalars(stmt.order_by(column).limit(SHOWN + 1)))
    if len(found) > 1:
        total = session.scalar(select(func.count()).select_from(stmt.subquery())) if len(found) > SHOWN else None
        raise ambiguous(what, ref, found, total)
    return found[0] if found else None
