"""A fifth hostile user's findings about the answers (results ..., report, serve, db upgrade and the database
itself): each test provokes one on a real database and fails on the code before its fix."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from tests.synthetic import T0, Result, add_sweep, noisy
from tests.test_dashboard import get, running
from tvmbench.cli import app
from tvmbench.dashboard.server import open_readonly

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


# --- 1: `results best --json --metric first` said its first inferences were medians -----------------------


def test_best_json_under_metric_first_keeps_median_meaning_the_median(store: ResultStore) -> None:
    add_sweep(
        store,
        "frst0001",
        [
            Result(executor="onnxruntime", opt_level=0, samples=noisy(1.0), first_ms=9.0),
            Result(samples=noisy(4.0), first_ms=30.0),  # vm-compiled: slow to start, fast after
            Result(executor="vm-bytecode", samples=noisy(6.0, seed=1), first_ms=20.0),
        ],
    )
    code, out = _cli("results", "best", "--metric", "first", "--json", "--db", store.url)
    (row,) = json.loads(out)
    assert code == 0 and row["metric"] == "first" and row["best"].startswith("vm-bytecode"), out
    # The ranked figure is named for what it is under either metric; *_median is the steady-state median.
    assert row["best_value"] == 20.0 and row["runner_up_value"] == 30.0 and row["onnxruntime_value"] == 9.0
    assert row["best_median"] == pytest.approx(6.0, rel=0.05), row  # before: 20.0, the first inference
    assert row["runner_up_median"] == pytest.approx(4.0, rel=0.05)
    assert row["onnxruntime_median"] == pytest.approx(1.0, rel=0.05)
    code, out = _cli("results", "best", "--json", "--db", store.url)
    (steady,) = json.loads(out)
    assert steady["metric"] == "steady" and steady["best_value"] == steady["best_median"]
    code, out = _cli("results", "best", "--metric", "first", "--tsv", "--db", store.url)
    (line,) = [x for x in out.splitlines() if x.startswith("tiny_cnn\t")]
    assert line.split("\t")[4] == "20.0", out  # the table shows the ranked figure


# --- 2: a write past `ulimit -f` was SQLite's bare "disk I/O error" -----------------------------------------

_WRITE_PAST_LIMIT = """
import os, resource, sys
import typer
from sqlalchemy import text
from db.store import ResultStore
from tvmbench.cli.common import call
store = ResultStore(sys.argv[1])
store._sweep_id = "fsz00001"  # as a sweep's driver: its writes go through _write, which advises a resume
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(sys.argv[1]) + 8192, resource.RLIM_INFINITY))
try:
    call(store._write, lambda s: s.execute(text("CREATE TABLE junk AS SELECT randomblob(1000000) AS x")))
except typer.Exit as exc:
    sys.exit(exc.exit_code)
"""


def test_a_write_past_the_file_size_limit_is_one_line_naming_the_limit(store: ResultStore) -> None:
    add_sweep(store, "fsz00001", [Result(samples=noisy(1.0))])
    path = store.url.removeprefix("sqlite:///")
    store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _WRITE_PAST_LIMIT, path], capture_output=True, text=True, env=env, timeout=120
    )
    err = done.stderr.strip()
    assert done.returncode == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: results database {path}: a write failed (disk I/O error)"), err
    assert "(`ulimit -f`)" in err and "raise the limit (`ulimit -f unlimited`" in err, err
    assert err.endswith("then `tvmbench sweep resume fsz00001` runs the jobs not stored yet"), err


# --- 3: a bidi override in a name reversed the rest of its line -----------------------------------------


def test_a_bidi_override_in_a_name_is_shown_escaped_in_tables_and_lines(store: ResultStore) -> None:
    # U+202E is a format character (Cf), not a control one: sweep files accept it, and a bidi-aware terminal
    # showed everything after it right to left, the figures of the row reversed.
    add_sweep(store, "bidi0001", [Result(model="m\u202eode", samples=noisy(0.25))], label="l\u2067x")
    for args in (("results", "list"), ("results", "best"), ("results", "sweeps"), ("results", "list", "--tsv")):
        code, out = _cli(*args, "--db", store.url)
        assert code == 0 and "\u202e" not in out and "\u2067" not in out, (args, out)
        assert "m\\u202eode" in out or "l\\u2067x" in out, (args, out)


# --- 4: `results list` of a million jobs took 22 GB (every row as ORM objects, then a table of them all) ----


def _many_jobs(store: ResultStore, n: int) -> str:
    """A sweep of one real job copied ``n - 1`` times by SQL (what a big sweep looks like to the reads)."""
    add_sweep(store, "many0001", [Result(samples=noisy(1.0))])
    path = store.url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "WITH RECURSIVE k(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
            "INSERT INTO jobs (sweep_id, job_key, model_sha256, model_name, target_name, board_key, executor, "
            "opt_level, pipeline, build_key, config, status, final_run_id) SELECT j.sweep_id, printf('%064x', i), "
            "j.model_sha256, 'm' || i, j.target_name, j.board_key, j.executor, j.opt_level, j.pipeline, j.build_key, "
            "j.config, j.status, j.final_run_id FROM k, (SELECT * FROM jobs LIMIT 1) j",
            (n,),
        )
    return path


def test_results_list_shows_a_bounded_table_and_streams_json(store: ResultStore) -> None:
    _many_jobs(store, 260)
    code, out = _cli("results", "list", "--db", store.url)
    shown = [x for x in out.splitlines() if re.search(r"\s(m\d+|tiny_cnn)\s", x)]
    assert code == 0 and "showing the first 200 rows: --limit N shows more, --tsv or --json all of them" in out
    assert len(shown) == 200, out  # before: all 260 rows (a million: 22 GB and minutes), no line
    code, out = _cli("results", "list", "--limit", "3", "--columns", "model", "--db", store.url)
    assert code == 0 and "showing the first 3 rows" in out, out
    code, out = _cli("results", "list", "--limit", "0", "--db", store.url)
    assert code == 2 and "--limit" in out, out
    code, out = _cli("results", "list", "--json", "--db", store.url)
    rows = json.loads(out)  # streamed row by row, in print_json's layout
    assert code == 0 and len(rows) == 260 and out == json.dumps(rows, indent=2, default=str) + "\n"
    code, out = _cli("results", "list", "--tsv", "--db", store.url)
    assert code == 0 and len([x for x in out.splitlines() if "\t" in x]) == 261  # --tsv: every row
    code, out = _cli("results", "list", "--sweep", "many0001", "--json", "--limit", "2", "--db", store.url)
    assert code == 0 and len(json.loads(out)) == 2


# --- 5: a repeated query key was answered about its last value without a word -----------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A real dashboard (uvicorn over HTTP) on a database of two sweeps."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = ResultStore(url)
    for i, sweep_id in enumerate(("rep000000001", "rep000000002")):
        add_sweep(store, sweep_id, [Result(samples=noisy(4.0 + i, seed=i))], created_at=T0 + timedelta(days=i))
    store.close()
    reader = open_readonly(url)
    with running(reader) as base:
        yield base
    reader.close()


def test_a_repeated_query_key_is_400_naming_it(served: str) -> None:
    a, b = "rep000000001", "rep000000002"
    status, _, body = get(f"{served}/api/compare?a={a}&a={b}&b={b}")  # before: 200, compared b with b
    assert status == 400 and json.loads(body)["error"] == "?a= is given 2 times: give it once", body
    status, _, page = get(f"{served}/compare?a={a}&b={b}&b={a}")
    assert status == 400 and "?b= is given 2 times: give it once" in page, page[:300]
    status, _, body = get(f"{served}/api/history/{'0' * 8}?method=mad&method=zscore")
    assert status == 400 and "?method= is given 2 times" in body, body
    assert get(f"{served}/api/compare?a={a}&b={b}")[0] == 200


# --- 6: a PostgreSQL server that went away mid-serve was a bare 500 and a traceback per request -------------


class _Relay:
    """A TCP relay on a free loopback port to PostgreSQL: ``stop`` makes the server vanish for the dashboard
    (refused, and the pooled connections cut), without touching the machine's real server."""

    def __init__(self, port: int) -> None:
        self.port, self.conns = port, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return  # stopped
            upstream = socket.create_connection(("127.0.0.1", self.port))
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        b.close()

    def stop(self) -> None:
        # shutdown, not only close: a thread blocked in accept or recv keeps a closed socket open.
        for c in (self.sock, *self.conns):
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()


@pytest.mark.postgres
def test_a_postgresql_server_gone_mid_serve_is_503_with_one_line(pg_url: str, capfd: pytest.CaptureFixture) -> None:
    from sqlalchemy.engine import make_url

    add_sweep(ResultStore(pg_url), "pggone0001", [Result(samples=noisy(1.0))])
    url = make_url(pg_url)
    relay = _Relay(url.port or 5432)
    reader = open_readonly(url.set(host="127.0.0.1", port=relay.address).render_as_string(hide_password=False))
    try:
        with running(reader) as base:
            assert get(f"{base}/api/sweeps")[0] == 200
            relay.stop()
            for path in ("/api/sweeps", "/sweeps", "/api/sweeps"):
                status, _, body = get(base + path)  # before: 500 "Internal Server Error", a traceback each
                assert status == 503 and "cannot be read: OperationalError" in body, (path, status, body)
                assert "check that the database server runs" in body, body
    finally:
        reader.close()
    logged = capfd.readouterr().err  # the server's log: its line once, no traceback per request
    assert logged.count("cannot be read") == 1 and "Traceback" not in logged, logged


# --- 7: a `$` in a name was matplotlib math: "cost $5 and $x" titled "cost 5andx", `$\frac{$` a traceback ----


def test_a_dollar_in_a_model_name_is_plotted_as_written(store: ResultStore, tmp_path: Path) -> None:
    name = "bad $\\frac{$ x"  # a sweep file takes it: no control character
    add_sweep(store, "dolr0001", [Result(model=name, samples=noisy(1.0)), Result(model=name, opt_level=0)])
    code, out = _cli(
        "report", "dolr0001", "-o", str(tmp_path / "r.html"), "--png", str(tmp_path / "png"), "--db", store.url
    )
    assert code == 0 and "Traceback" not in out and "ParseSyntaxException" not in out, out  # before: exit 1
    assert (tmp_path / "r.html").stat().st_size > 0 and list((tmp_path / "png").glob("latency-*.png")), out
    from tvmbench.answers.report_figures import new_figure

    fig = new_figure(figsize=(3, 2))
    title = fig.add_subplot().set_title("cost $5 and $x")
    assert title.get_parse_math() is False  # drawn as written, not as math


# --- 8: --csv with --json or --tsv: one of them won without a word ------------------------------------------


def test_query_csv_with_json_or_tsv_is_refused(store: ResultStore) -> None:
    add_sweep(store, "csvj0001", [Result(samples=noisy(1.0))])
    for other in ("--json", "--tsv"):
        code, out = _cli("results", "query", "--csv", other, "--db", store.url)
        assert code == 2 and f"--csv and {other} are two formats for one output: choose one" in out, out


# --- 9: in a pipe, a long sentence under a table was cut in two at 200 columns ------------------------------


def test_a_long_compare_summary_and_verdict_stay_one_line_in_a_pipe(store: ResultStore) -> None:
    model = "a-model-with-a-rather-long-name-" * 4  # 128 characters: every line naming it is long
    for i, sweep_id in enumerate(("pipe0001", "pipe0002")):
        results = [Result(model=model, samples=noisy(1.0 + i)), Result(model=model, opt_level=0, samples=noisy(2.0))]
        add_sweep(store, sweep_id, results, created_at=T0 + timedelta(days=i))
    code, out = _cli("results", "best", "--sweep", "pipe0002", "--db", store.url)
    verdicts = [x for x in out.splitlines() if x.startswith(model) and " on host" in x]
    assert code == 0 and len(verdicts) == 1 and ("is fastest" in verdicts[0] or "overlap" in verdicts[0]), out
    code, out = _cli("results", "compare", "pipe0001", "pipe0002", "--db", store.url)
    (summary,) = [x for x in out.splitlines() if x.startswith("pipe0001 -> pipe0002")]
    assert code in (0, 1) and "only in B" in summary, out  # before: the end of the line on the next one


# --- 10: a PostgreSQL database not created yet: the driver's words, and nothing on what to do -----------------


@pytest.mark.postgres
def test_a_postgresql_database_that_does_not_exist_says_to_create_it(pg_url: str) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(pg_url).set(database="tvmbench_never_created_5c")
    for args in (("db", "upgrade"), ("results", "list")):
        code, out = _cli(*args, "--db", url.render_as_string(hide_password=False))
        assert code == 2 and 'database "tvmbench_never_created_5c" does not exist: create it (createdb -h ' in out, out
        assert out.rstrip().endswith(" tvmbench_never_created_5c)"), out


# --- 11: --tsv wrote an interval column ("ci") as its low end alone ------------------------------------------


def test_tsv_writes_both_ends_of_an_interval(store: ResultStore) -> None:
    add_sweep(store, "tsvc0001", [Result(samples=noisy(1.0)), Result(opt_level=0, samples=noisy(2.0, seed=1))])
    code, out = _cli("results", "best", "--tsv", "--columns", "best,median,ci,runner_up_ci", "--db", store.url)
    (row,) = [x.split("\t") for x in out.splitlines() if x.startswith("vm-compiled")]
    (best,) = json.loads(_cli("results", "best", "--json", "--db", store.url)[1])
    assert code == 0 and row[2] == f"[{best['best_lo']}, {best['best_hi']}]", row  # before: the low end alone
    assert row[3] == f"[{best['runner_up_lo']}, {best['runner_up_hi']}]", row
    add_sweep(store, "tsvc0002", [Result(samples=noisy(1.5)), Result(opt_level=0, samples=noisy(2.0, seed=1))])
    code, out = _cli(
        "results", "compare", "tsvc0001", "tsvc0002", "--all", "--tsv", "--columns", "ci", "--db", store.url
    )
    cells = [x for x in out.splitlines() if x.startswith("[")]
    assert code in (0, 1) and len(cells) == 2 and all(c.count(",") == 1 for c in cells), out


# --- 12: `serve --host ::1` answered any Host header (no DNS rebinding check on IPv6 loopback) ----------------


def _get_with_host(url: str, host: str) -> int:
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_an_ipv6_loopback_dashboard_answers_only_its_own_names(store: ResultStore) -> None:
    from orchestrator.farm import listen
    from tvmbench.dashboard.server import make_server

    add_sweep(store, "ipv60001", [Result(samples=noisy(1.0))])
    try:
        sock = listen("::1", 0)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    reader = open_readonly(store.url)
    server = make_server(reader, sock)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.05)
        port = sock.getsockname()[1]
        url = f"http://[::1]:{port}/api/sweeps"
        assert _get_with_host(url, "evil.example") == 400  # before: 200, a rebinding page could read it
        assert _get_with_host(url, f"evil.example:{port}") == 400
        assert _get_with_host(url, f"[::1]:{port}") == 200 and _get_with_host(url, f"localhost:{port}") == 200
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        reader.close()
