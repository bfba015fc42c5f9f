"""A seventh hostile user's findings about the CLI's edges (--db :memory:, report -o -, CSV injection, --lookback,
a reader that goes away): each test provokes one and fails on the code before its fix."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.engine import refuse_in_memory
from db.store import ResultStore, StoreError
from tests.synthetic import T0, Result, add_sweep, noisy
from tvmbench.answers.table import spreadsheet_text
from tvmbench.cli import app
from tvmbench.cli.main import _reader_left

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of one command."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _error_line(code: int, out: str, err: str) -> str:
    """The one 'error:' line of a refused command (exit 2), no traceback."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in out + err, (code, out, err)
    return errors[0]


# --- 1: --db :memory: was a file named ":memory:" in the working directory (db upgrade: "%3Amemory%3A") -------


def test_db_upgrade_of_an_in_memory_database_is_refused(home: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for given in (":memory:", "sqlite://", "sqlite:///:memory:"):
        line = _error_line(*_cli("db", "upgrade", "--db", given))
        assert f"database {given} (--db or TVMBENCH_DB)" in line and "holds nothing to upgrade" in line, line
        assert "e.g. --db results.db" in line, line
    monkeypatch.setenv("TVMBENCH_DB", ":memory:")
    assert "holds nothing to upgrade" in _error_line(*_cli("db", "upgrade"))
    assert not (tmp_path / ":memory:").exists()


@pytest.mark.parametrize(
    "command",
    [("results", "list"), ("results", "best"), ("sweep", "status", "x"), ("farm", "reset", "x"), ("serve",)],
)
def test_other_commands_refuse_memory_as_a_path(home: Path, tmp_path: Path, monkeypatch, command: tuple) -> None:
    monkeypatch.chdir(tmp_path)
    line = _error_line(*_cli(*command, "--db", ":memory:"))
    assert "an in-memory SQLite database keeps nothing after this command" in line, line
    assert os.listdir(tmp_path) == ["home"]  # no file named ":memory:" here


def test_the_library_refuses_memory_as_a_path_too() -> None:
    with pytest.raises(StoreError, match="an in-memory SQLite database keeps nothing"):
        refuse_in_memory(" :memory: ")
    refuse_in_memory("memory.db")  # a file whose name merely says memory is a file


# --- 2: report -o - wrote a file named "-" ---------------------------------------------------------------------


def test_report_to_dash_writes_the_page_to_stdout(store: ResultStore, tmp_path: Path, monkeypatch) -> None:
    add_sweep(store, "dash0001", [Result(samples=noisy(1.0))])
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli("report", "dash0001", "-o", "-", "--db", store.url)
    assert code == 0, (out, err)
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>"), out[:200]
    assert out.count("<!DOCTYPE html>") == 1 and "report to stdout (1 plot(s))" in err, err
    assert not (tmp_path / "-").exists()
    code, out, err = _cli("report", "dash0001", "-o", "./-", "--db", store.url)  # a file named "-", spelled out
    assert code == 0 and (tmp_path / "-").read_text().startswith("<!DOCTYPE html>"), (out, err)


# --- 3: CSV/TSV cells starting = + - @ ran as formulas in a spreadsheet ----------------------------------------


def test_spreadsheet_text_quotes_formulas_not_numbers() -> None:
    for text in ("=1+1", "+1+1", "-2+3", "@SUM(A1)", '=HYPERLINK("http://x")', "\tx", "-inf"):
        assert spreadsheet_text(text) == "'" + text
    for text in ("-1.5", "+2", "-3e-05", ".5", "-", "", "m1", "a=b", "1.0"):
        assert spreadsheet_text(text) == text


def _hostile_names(store: ResultStore) -> None:
    """One configuration over four sweeps, its model and label formulas; the latest is faster (score < 0)."""
    model = '=HYPERLINK("http://x","m")'
    for i, center in enumerate((2.0, 2.05, 1.95, 1.0)):
        results = [Result(model=model, samples=noisy(center, seed=i)), Result(model="@SUM(A1)", samples=noisy(3.0))]
        add_sweep(store, f"csvinj{i:04d}", results, label="-2+3", created_at=T0 + timedelta(days=i))


def test_tsv_and_csv_quote_formula_cells_and_keep_numbers(store: ResultStore) -> None:
    _hostile_names(store)
    code, out, _ = _cli("results", "list", "--sweep", "csvinj0003", "--tsv", "--db", store.url)
    rows = list(csv.DictReader(io.StringIO(out), delimiter="\t", quoting=csv.QUOTE_NONE))
    assert code == 0 and sorted(r["model"] for r in rows) == ['\'=HYPERLINK("http://x","m")', "'@SUM(A1)"], out
    assert all(float(r["median"]) > 0 for r in rows), out  # numbers as numbers
    code, out, _ = _cli("results", "query", "--sweep", "csvinj0003", "--csv", "--db", store.url)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and {r["sweep_label"] for r in rows} == {"'-2+3"}, out
    assert "'@SUM(A1)" in {r["model"] for r in rows} and all(float(r["median"]) > 0 for r in rows), out
    code, out, _ = _cli("results", "regressions", "--all", "--tsv", "--db", store.url)
    rows = list(csv.DictReader(io.StringIO(out), delimiter="\t", quoting=csv.QUOTE_NONE))
    (faster,) = [r["score"] for r in rows if r["model"].startswith("'=HYPERLINK")]
    assert code == 0 and float(faster) < -1, out  # a negative number as written, not "'-17.27..."


# --- 4: --lookback 1 or 2 judged nothing (a verdict needs 3 earlier results) -----------------------------------


def test_a_lookback_too_short_to_judge_is_refused(store: ResultStore) -> None:
    _hostile_names(store)
    for command in (("results", "regressions"), ("results", "history", "csvinj")):
        for lookback in ("1", "2"):
            line = _error_line(*_cli(*command, "--lookback", lookback, "--db", store.url))
            assert f"--lookback {lookback}: must be at least 3 (a result is judged against at least 3" in line, line
    code, out, err = _cli("results", "regressions", "--all", "--lookback", "3", "--db", store.url)
    assert code == 0 and "not enough history" not in out + err, (out, err)


# --- 5: a reader that went away (| head -1) made the command exit 1 --------------------------------------------


@pytest.mark.parametrize("fmt", [(), ("--tsv",), ("--json",)])
def test_a_reader_that_went_away_is_exit_0_quietly(store: ResultStore, home: Path, fmt: tuple[str, ...]) -> None:
    _hostile_names(store)
    command = [sys.executable, "-m", "tvmbench", "results", "list", "--db", store.url, *fmt]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the command (a second of imports) writes a line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == "", err


def test_reader_left_tells_a_closed_pipe_from_an_open_one() -> None:
    read, write = os.pipe()
    try:
        with os.fdopen(os.dup(write), "w") as stream:
            assert not _reader_left(stream)
            os.close(read)
            read = -1
            assert _reader_left(stream)
    finally:
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)
