"""How PostgreSQL engines connect: readers keep the URL's own ``options`` (adding read-only), and a
server that never answers is one line within the connect timeout, not psycopg's 130 s.

Before, a reader's connect_args replaced the URL's ``options`` (``-csearch_path=myschema``), so it
looked in ``public``; and a --db at a port where something else listens (Redis) hung ~130 s.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

import db.engine
from db.engine import CONNECT_TIMEOUT_S, make_engine, postgres_connect_args
from db.store import ResultStore, StoreError
from tests.conftest import one_error_line
from tests.synthetic import Result, add_sweep, noisy
from tvmbench.answers import query
from tvmbench.cli import app

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
READ_ONLY = "-c default_transaction_read_only=on"


@pytest.fixture(autouse=True)
def no_pg_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests say which of libpq's variables are set."""
    for name in ("PGCONNECT_TIMEOUT", "PGOPTIONS"):
        monkeypatch.delenv(name, raising=False)


def test_connect_args_add_a_timeout_unless_one_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    assert postgres_connect_args(URL) == {"connect_timeout": CONNECT_TIMEOUT_S}
    assert postgres_connect_args(f"{URL}?connect_timeout=3") == {}
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    assert postgres_connect_args(URL) == {}


def test_readers_keep_the_urls_options(monkeypatch: pytest.MonkeyPatch) -> None:
    assert postgres_connect_args(URL, read_only=True)["options"] == READ_ONLY
    own = postgres_connect_args(f"{URL}?options=-csearch_path%3Dmyschema", read_only=True)
    assert own["options"] == f"-csearch_path=myschema {READ_ONLY}"
    both = postgres_connect_args(f"{URL}?options=-csearch_path%3Da&options=-cwork_mem%3D8MB", read_only=True)
    assert both["options"] == f"-csearch_path=a -cwork_mem=8MB {READ_ONLY}"
    monkeypatch.setenv("PGOPTIONS", "-csearch_path=fromenv")  # what libpq reads when the URL has none
    assert postgres_connect_args(URL, read_only=True)["options"] == f"-csearch_path=fromenv {READ_ONLY}"


@pytest.fixture
def schema_url(pg_url: str) -> Iterator[str]:
    """``pg_url`` with ``options=-csearch_path=myschema``, the schema created (the database is dropped after)."""
    admin = create_engine(pg_url)
    with admin.begin() as conn:
        conn.execute(text("CREATE SCHEMA myschema"))
    admin.dispose()
    yield f"{pg_url}?options={quote('-csearch_path=myschema', safe='')}"


@pytest.mark.postgres
def test_readers_find_the_tables_in_the_urls_search_path(schema_url: str, pg_url: str) -> None:
    writer = ResultStore(schema_url)
    add_sweep(writer, "syn00000001", [Result(samples=noisy(1.0))])
    writer.close()
    engine = create_engine(pg_url)
    with engine.connect() as conn:  # the writer used the URL's schema: nothing went to public
        tables = conn.execute(text("SELECT table_schema FROM information_schema.tables WHERE table_name = 'jobs'"))
        assert tables.scalars().all() == ["myschema"]
    engine.dispose()
    for options in ({"read_only": True}, {"never_write": True}):
        reader = ResultStore(schema_url, **options)
        try:
            assert [r["sweep_id"] for r in query.sweeps_overview(reader)] == ["syn00000001"]
            with reader.read() as session:  # still read-only: the server refuses writes
                read_only = session.execute(text("SHOW default_transaction_read_only")).scalar()
            assert read_only == "on"
        finally:
            reader.close()
    result = CliRunner().invoke(app, ["results", "sweeps", "--db", schema_url, "--json"])
    assert result.exit_code == 0 and "syn00000001" in result.output, result.output


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (like Redis to PostgreSQL's greeting)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # the kernel completes the handshakes; nothing ever reads or answers
    yield sock.getsockname()[1]
    sock.close()


def test_a_port_where_postgresql_does_not_answer_is_one_line(
    silent_port: int, monkeypatch: pytest.MonkeyPatch, home: object
) -> None:
    monkeypatch.setattr(db.engine, "CONNECT_TIMEOUT_S", 2)  # psycopg's least; the default path, sooner
    url = f"postgresql+psycopg://postgres@127.0.0.1:{silent_port}/test"
    engine = make_engine(url, read_only=True)
    with pytest.raises(StoreError, match=f"nothing PostgreSQL answered at 127.0.0.1:{silent_port} within 2 s"):
        engine.connect()
    engine.dispose()
    for args in (["results", "sweeps"], ["db", "upgrade"]):  # a reader, and a writer (whose opening retries)
        started = time.monotonic()
        line = one_error_line(CliRunner().invoke(app, [*args, "--db", url]), exit_code=2)
        elapsed = time.monotonic() - started
        assert f"nothing PostgreSQL answered at 127.0.0.1:{silent_port} within 2 s" in line
        assert "check the URL's host and port" in line
        # Not retried into minutes: below the 130 s psycopg waits with no timeout given, with room for a busy
        # machine (the message above already says the 2 s timeout applied).
        assert elapsed < 100, elapsed
