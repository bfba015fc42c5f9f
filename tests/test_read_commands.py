"""Commands that only read never create, migrate or otherwise write a database.

Each read command is pointed at a 0-byte file, a file that is not SQLite, another program's SQLite
database and a tvmbench database at an older schema: it says what the file is in one line (exit 2) and
leaves the file byte for byte as it was. Where no file exists, reads answer as from an empty database
and create none; `sweep plan` on a machine with no database still plans (it sees nothing cached).
Before, `results sweeps --db sqlite:///empty.db` wrote the whole schema into the empty file.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from tests.conftest import write_sweep
from tests.synthetic import Result, add_sweep, noisy
from tvmbench.cli import app

TVMBENCH = [sys.executable, "-c", "from tvmbench.cli import app; app()"]
SWEEP = "syn00000001"
READS = [
    ("results", "sweeps"),
    ("results", "list"),
    ("results", "list", "--sweep", SWEEP),
    ("results", "query"),
    ("results", "best"),
    ("results", "regressions"),
    ("results", "show", "abc"),
    ("results", "history", "abc"),
    ("results", "compare", SWEEP, SWEEP),
    ("report", SWEEP),
    ("sweep", "status", SWEEP),
    ("tuning", "list"),
]


@pytest.fixture(autouse=True)
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in the test's folder (`report` writes report.html where it runs; it must not here)."""
    monkeypatch.chdir(tmp_path)


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file in ``folder`` by name, with the sha256 of its bytes; but a reader of a WAL database
    makes SQLite's shared-memory index (-shm) and an empty log (-wal) beside it, which write no data."""

    def data(p: Path) -> bool:
        return p.is_file() and not p.name.endswith("-shm") and not (p.name.endswith("-wal") and not p.stat().st_size)

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if data(p)}


def refused(args: tuple[str, ...], url: str, *words: str) -> None:
    result = CliRunner().invoke(app, [*args, "--db", url])
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, (args, result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.output)
    assert all(w in lines[0] for w in words), (args, words, lines[0])


def foreign(path: Path) -> None:
    """Another program's SQLite database."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        conn.execute("INSERT INTO notes (text) VALUES ('mine')")
    conn.close()


@pytest.mark.parametrize(
    ("kind", "make", "says"),
    [
        ("empty", lambda p: p.write_bytes(b""), "is not a tvmbench database"),
        ("not-sqlite", lambda p: p.write_bytes(b"just some notes\n" * 100), "is not a tvmbench database"),
        ("foreign", foreign, "is not a tvmbench database"),
    ],
)
def test_reads_leave_a_file_that_is_not_a_tvmbench_database_as_it_was(
    tmp_path: Path, home: Path, kind: str, make, says: str
) -> None:
    path = tmp_path / f"{kind}.db"
    make(path)
    before = fingerprint(tmp_path)
    for args in READS:
        refused(args, f"sqlite:///{path}", says, str(path))
        assert fingerprint(tmp_path) == before, f"`{' '.join(args)}` wrote to {path}"


def test_results_sweeps_on_an_empty_file_in_a_real_process(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    done = subprocess.run([*TVMBENCH, "results", "sweeps", "--db", f"sqlite:///{path}"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "is not a tvmbench database" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert path.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "home"]


def test_reads_do_not_migrate_an_older_schema(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "old.db"
    store = ResultStore(f"sqlite:///{path}")
    add_sweep(store, SWEEP, [Result(samples=noisy(4.0))])
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0003'")
    conn.close()
    before = fingerprint(tmp_path)
    for args in READS:
        refused(args, f"sqlite:///{path}", "schema is at revision 0003", "tvmbench db upgrade")
        assert fingerprint(tmp_path) == before, f"`{' '.join(args)}` migrated {path}"


def test_reads_of_a_missing_database_answer_empty_and_create_none(tmp_path: Path, home: Path) -> None:
    """A fresh machine: reads answer as from an empty database (nothing stored, unknown sweep or job)."""
    path = tmp_path / "none.db"
    for args in READS:
        result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{path}"])
        assert result.exit_code in (0, 2) and "Traceback" not in result.output, (args, result.output)
        assert "cannot open results database" not in result.output, (args, result.output)
        assert not path.exists(), f"`{' '.join(args)}` created {path}"
    assert CliRunner().invoke(app, ["results", "sweeps", "--json"]).output.strip() == "[]"
    shown = CliRunner().invoke(app, ["results", "show", "abc"])
    assert shown.exit_code == 2 and "no job with key starting 'abc'" in shown.output
    assert not (home / "results.db").exists()


def test_sweep_plan_without_a_database_plans_and_creates_none(tmp_path: Path, home: Path, models_dir: Path) -> None:
    sweep = write_sweep(tmp_path, f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n[axes]\nopt_level = [0, 2]\n')
    for db in ([], ["--db", f"sqlite:///{tmp_path / 'none.db'}"]):
        result = CliRunner().invoke(app, ["sweep", "plan", str(sweep), *db, "--json"])
        assert result.exit_code == 0, result.output
        assert '"built": false' in result.output and result.output.count('"job_key"') == 2, result.output
    assert not (tmp_path / "none.db").exists() and not (home / "results.db").exists()
    refused(("sweep", "plan", str(sweep)), "sqlite:///" + str(_empty(tmp_path)), "is not a tvmbench database")
    farm = CliRunner().invoke(app, ["farm", "list", "--tracker", "127.0.0.1:1"])
    assert "127.0.0.1:1 does not answer" in farm.output and not (home / "results.db").exists(), farm.output


def _empty(folder: Path) -> Path:
    path = folder / "empty.db"
    path.write_bytes(b"")
    return path


def test_reads_still_answer_on_a_tvmbench_database(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "ok.db"
    store = ResultStore(f"sqlite:///{path}")
    add_sweep(store, SWEEP, [Result(samples=noisy(4.0))])
    store.close()
    for args in (("results", "sweeps"), ("results", "list", "--sweep", SWEEP), ("sweep", "status", SWEEP)):
        result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{path}", "--json"])
        assert result.exit_code == 0 and SWEEP in result.output, (args, result.output)
