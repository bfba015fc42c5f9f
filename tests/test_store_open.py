"""Opening the store: the schema check reads the migrations' head without alembic, a read-only open
loads no migration machinery, and ``missing="empty"`` reads a missing SQLite file as an empty database."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from db.schema import head_revision
from db.store import EMPTY_DB, MIGRATIONS, ResultStore, StoreError, make_engine

ROOT = Path(__file__).resolve().parents[1]


def test_head_revision_is_alembics_head() -> None:
    assert head_revision() == ScriptDirectory(str(MIGRATIONS)).get_current_head()


def _loads_alembic(url: str, **options: object) -> bool:
    """Whether opening ResultStore(url, **options) in a fresh interpreter imports alembic."""
    code = (
        "import sys; from db.store import ResultStore; "
        f"ResultStore({url!r}, **{options!r}).close(); print('alembic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


def test_opening_a_database_at_head_loads_no_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert _loads_alembic(url), "a new database is migrated (alembic)"
    assert not _loads_alembic(url, read_only=True), "a read-only open must not load alembic"
    assert not _loads_alembic(url), "a writer on a database at head has nothing to migrate"
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert not _loads_alembic(missing, read_only=True, missing="empty"), "an empty read has nothing to migrate"


def test_an_older_schema_is_refused_read_only_and_upgraded_by_a_writer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0004")
    engine.dispose()
    with pytest.raises(StoreError, match=f"schema is at revision 0004, this tvmbench needs {head_revision()}"):
        ResultStore(url, read_only=True)
    ResultStore(url).close()
    ResultStore(url, read_only=True).close()  # upgraded: now it opens


def test_missing_empty_reads_a_missing_file_as_an_empty_database(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    with pytest.raises(StoreError, match="no results database at"):
        ResultStore(f"sqlite:///{path}", read_only=True)
    store = ResultStore(f"sqlite:///{path}", read_only=True, missing="empty")
    assert store.url == EMPTY_DB and store.board_states() == {} and store.get_sweep("abc") is None
    store.close()
    assert not path.exists(), "an empty read must create nothing on disk"
    with pytest.raises(StoreError, match="folder"):  # a missing folder is still an error
        ResultStore(f"sqlite:///{tmp_path / 'no' / 'r.db'}", read_only=True, missing="empty")
    (tmp_path / "zero.db").write_bytes(b"")
    with pytest.raises(StoreError, match="is not a tvmbench database"):
        ResultStore(f"sqlite:///{tmp_path / 'zero.db'}", read_only=True, missing="empty")
    with pytest.raises(ValueError, match="missing='nothing'"):
        ResultStore(f"sqlite:///{path}", read_only=True, missing="nothing")  # type: ignore[arg-type]
