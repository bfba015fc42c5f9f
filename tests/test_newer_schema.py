"""A database a newer tvmbench wrote (a schema revision this one does not know) says so, readers and writers.

Before, readers advised `tvmbench db upgrade`, which then failed with alembic's "Can't locate revision".
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.schema import head_revision, known_revisions
from db.store import ResultStore, StoreError
from tests.conftest import one_error_line
from tvmbench.cli import app

NEWER = "9999"


@pytest.fixture
def newer(tmp_path: Path, home: Path) -> Path:
    """A tvmbench database whose alembic_version names a revision after this tvmbench's head."""
    path = tmp_path / "newer.db"
    ResultStore(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (NEWER,))
    conn.close()
    assert NEWER not in known_revisions()
    return path


def revision(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        found = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    conn.close()
    return found


def said(path: Path) -> str:
    return (
        f"results database {path}: it was written by a newer tvmbench (schema revision {NEWER} is unknown to "
        f"this one, which knows up to {head_revision()}): upgrade tvmbench, or use another --db"
    )


def test_known_revisions_include_the_head() -> None:
    assert head_revision() in known_revisions() and "0001" in known_revisions()


def test_readers_say_a_newer_tvmbench_wrote_it(newer: Path) -> None:
    with pytest.raises(StoreError) as refused:
        ResultStore(f"sqlite:///{newer}", read_only=True)
    assert str(refused.value) == said(newer)
    line = one_error_line(CliRunner().invoke(app, ["results", "sweeps", "--db", str(newer)]), exit_code=2)
    assert said(newer) in line and "db upgrade" not in line


def test_writers_and_db_upgrade_say_so_and_leave_it(newer: Path) -> None:
    with pytest.raises(StoreError, match="written by a newer tvmbench"):
        ResultStore(f"sqlite:///{newer}")
    line = one_error_line(CliRunner().invoke(app, ["db", "upgrade", "--db", str(newer)]), exit_code=2)
    assert "written by a newer tvmbench" in line and f"schema revision {NEWER} is unknown" in line
    assert "Can't locate revision" not in line
    assert revision(newer) == NEWER


def test_an_older_schema_still_gets_the_upgrade_advice(newer: Path) -> None:
    with sqlite3.connect(newer) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0007'")
    conn.close()
    with pytest.raises(StoreError, match=r"tvmbench needs .*: run `tvmbench db upgrade"):
        ResultStore(f"sqlite:///{newer}", read_only=True)
