"""`tvmbench serve`: a real uvicorn server on a free loopback port over a database filled by a real sweep.

One small sweep (real Ray, real tracker and board, SQLite) fills the module's database; a second run of
the same file under another label runs in another process (`tvmbench sweep run`) while a headless
chromium watches the Sweeps page update without a reload. The sweep is named ``<script>alert(1)</script>``
so that every page doubles as an escaping test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.scheduler import run_sweep
from orchestrator.spec import load_spec
from tests.browser import CHROMIUM, Browser
from tests.conftest import write_sweep
from tests.synthetic import T0, Result, add_sweep, noisy
from tvmbench.answers import query
from tvmbench.cli import app
from tvmbench.dashboard.server import ServeError, check_host, listen, make_server, open_readonly
from workers.artifacts import ArtifactCache

# The CLI in a fresh process (`app` stays importable from tvmbench.cli when it becomes a package).
TVMBENCH = [sys.executable, "-c", "from tvmbench.cli import app; app()"]
HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
# cooldown_ms makes each measurement take about a second (5 repeats x 200 ms): long enough for the
# progress of the second run to be seen moving, short enough for a test.
SWEEP = """
name = "<script>alert(1)</script>"
[[models]]
path = "{models}/tiny_mlp.onnx"
[axes]
executor = ["vm-bytecode", "vm-compiled"]
opt_level = [0, 2]
[measure]
number = 2
repeat = 5
cooldown_ms = 200
"""
POLL_MS = 200
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian chromium (scripts/setup.sh --system)")


@contextmanager
def running(store: ResultStore, **kwargs: Any) -> Iterator[str]:
    """The dashboard over ``store`` on a free loopback port, in a thread; yields its base URL."""
    sock = listen("127.0.0.1", 0)
    server = make_server(store, sock, poll_ms=POLL_MS, **kwargs)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.headers.get("content-type", ""), r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type", ""), e.read().decode("utf-8", "replace")


def get_json(url: str) -> Any:
    status, kind, body = get(url)
    assert status == 200 and kind.startswith("application/json"), (url, status, body[:500])
    return json.loads(body)


def cli_json(*args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False)
    return json.loads(result.output)


@pytest.fixture(scope="module")
def filled(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, ray_local: None, local_farm: LocalFarm
) -> Iterator[dict[str, Any]]:
    """A SQLite database with one real sweep; TVMBENCH_HOME-style folder holding its artifact cache."""
    home = tmp_path_factory.mktemp("dash-home")
    path = write_sweep(home, SWEEP.format(models=models_dir))
    spec = load_spec(path)
    url = f"sqlite:///{home / 'results.db'}"
    writer = ResultStore(url)
    outcome = run_sweep(spec, writer, local_farm.tracker, ArtifactCache(home / "artifacts"))
    assert outcome.complete and dict(outcome.statuses) == {"ok": 4}, query.results(writer, spec.sweep_id)
    yield {"home": home, "path": path, "url": url, "sweep_id": spec.sweep_id, "writer": writer}
    writer.close()


@pytest.fixture(scope="module")
def server(filled: dict[str, Any], local_farm: LocalFarm) -> Iterator[str]:
    store = open_readonly(filled["url"])
    with running(store, tracker=local_farm.tracker) as base:
        yield base
    store.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.skip("needs Debian chromium (scripts/setup.sh --system)")
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def _ray_address() -> str:
    import ray

    return ray.get_runtime_context().gcs_address


@pytest.fixture(scope="module")
def live(filled: dict[str, Any], server: str, browser: Browser, local_farm: LocalFarm) -> dict[str, Any]:
    """Run the sweep file again under a new label in another process while chromium shows the Sweeps page.

    Records what the JSON endpoint and the open page showed over time (polled with a deadline).
    """
    browser.open(f"{server}/sweeps")
    browser.evaluate("window.__sameDocument = 'loaded once'")  # a reload would drop it
    before = {s["sweep_id"] for s in get_json(f"{server}/api/sweeps")}
    env = {**os.environ, "TVMBENCH_HOME": str(filled["home"]), "TVMBENCH_DB": filled["url"]}
    proc = subprocess.Popen(
        [*TVMBENCH, "sweep", "run", str(filled["path"]), "--label", "live",
         "--tracker", local_farm.tracker, "--ray-address", _ray_address()],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    api: list[tuple[str, int]] = []
    page: list[tuple[str, str, str]] = []
    sweep_id = None
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            rows = [s for s in get_json(f"{server}/api/sweeps") if s["sweep_id"] not in before]
            if rows:
                sweep_id = rows[0]["sweep_id"]
                api.append((rows[0]["status"], rows[0]["final"]))
                shown = browser.evaluate(
                    f"""(function () {{
                      var row = document.querySelector('[data-sweep="{sweep_id}"]');
                      if (!row) return null;
                      return [row.querySelector('[data-field="status"]').textContent,
                              row.querySelector('[data-field="final"]').textContent,
                              row.querySelector('[data-field="jobs"]').textContent];
                    }})()"""
                )
                if shown:
                    page.append(tuple(shown))
                    if shown[0] == "complete" and api[-1][0] == "complete":
                        break
            # A driver that failed is the finding (asserted below). One that succeeded: the page catches up
            # at its own pace, however loaded the machine (a few seconds' grace was a timing-dependent test).
            if proc.poll() not in (None, 0):
                break
            time.sleep(0.1)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output[-3000:]
    return {"sweep_id": sweep_id, "api": api, "page": page, "output": output}


# --- pages --------------------------------------------------------------------------------------------


def test_every_page_answers_and_shows_the_sweeps_jobs(server: str, filled: dict[str, Any]) -> None:
    sweep_id = filled["sweep_id"]
    jobs = query.results(filled["writer"], sweep_id)
    keys = [j["job_key"] for j in jobs]
    assert len(keys) == 4
    status, kind, sweeps = get(f"{server}/sweeps")
    assert status == 200 and kind.startswith("text/html") and sweep_id[:12] in sweeps
    status, _, page = get(f"{server}/sweep/{sweep_id}")
    assert status == 200
    for key in keys:
        assert f"/job/{key}?sweep={sweep_id}" in page  # every job is a row linking to its page
    assert page.count("<figure><img") >= 1 and "Ranking" in page and "no failed jobs" in page
    board = jobs[0]["board"]
    status, _, job = get(f"{server}/job/{keys[0]}?sweep={sweep_id}")
    assert status == 200 and keys[0] in job and board in job and "samples.png" in job
    assert "Pass trace" in job and "passes (the instrument" in job
    status, _, diffed = get(f"{server}/job/{keys[0]}?sweep={sweep_id}&diff={keys[1]}")
    assert status == 200 and "<h3>Diff " in diffed
    status, kind, _ = get(f"{server}/job/{keys[0]}/samples.png?sweep={sweep_id}")
    assert status == 200 and kind == "image/png"
    status, _, history = get(f"{server}/history/{keys[0]}")
    assert status == 200 and sweep_id[:12] in history
    status, _, compare = get(f"{server}/compare?a={sweep_id}&b={sweep_id}")
    assert status == 400 and "on both sides: give two different sweeps" in compare  # as `results compare`
    status, _, farm = get(f"{server}/farm")
    assert status == 200 and board in farm and "failures in a row" in farm
    assert get(f"{server}/sweep/nosuchsweep")[0] == 404
    assert get(f"{server}/api/job/ffffffffffff")[0] == 404
    assert get(f"{server}/sweep/{sweep_id}?sort=bogus")[0] == 400


def test_json_endpoints_give_what_the_cli_prints(server: str, filled: dict[str, Any]) -> None:
    url, sweep_id = filled["url"], filled["sweep_id"]
    every = get_json(f"{server}/api/sweeps")
    assert every == cli_json("results", "sweeps", "--db", url)
    # What the live pages poll: the running sweeps plus those they watch (none is running here).
    assert get_json(f"{server}/api/sweeps?watch=") == []
    assert get_json(f"{server}/api/sweeps?watch={sweep_id}") == [s for s in every if s["sweep_id"] == sweep_id]
    data = get_json(f"{server}/api/sweep/{sweep_id}")
    cli_rows = cli_json("results", "query", "--sweep", sweep_id, "--db", url)
    assert sorted(data["results"], key=lambda r: r["job_key"]) == sorted(cli_rows, key=lambda r: r["job_key"])
    assert data["ranking"] == cli_json("results", "best", "--sweep", sweep_id, "--db", url)
    key = data["results"][0]["job_key"]
    assert get_json(f"{server}/api/job/{key}?sweep={sweep_id}") == cli_json(
        "results", "show", key, "--sweep", sweep_id, "--db", url
    )
    # A sweep compared with itself (the hostile user's `compare NAME LABEL` of one sweep) is refused by the
    # CLI and the dashboard alike, with the same line.
    same = CliRunner().invoke(app, ["results", "compare", sweep_id, sweep_id, "--db", url, "--json"])
    assert same.exit_code == 2 and "give two different sweeps" in same.output, same.output
    status, _, body = get(f"{server}/api/compare?a={sweep_id}&b={sweep_id}")
    assert status == 400 and json.loads(body)["error"] in same.output, body
    farm = get_json(f"{server}/api/farm")
    assert farm["boards"] == cli_json("farm", "list", "--no-live", "--tracker", farm["tracker"], "--db", url)["boards"]
    assert {b["board"] for b in farm["known"]} >= {r["board"] for r in data["results"]}


def test_sweep_page_filters_and_sorts(server: str, filled: dict[str, Any]) -> None:
    base = f"{server}/api/sweep/{filled['sweep_id']}"
    everything = get_json(base)["results"]
    compiled = get_json(f"{base}?executor=vm-compiled")["results"]
    assert len(compiled) == 2 and {r["executor"] for r in compiled} == {"vm-compiled"}
    assert get_json(f"{base}?status=wrong-result")["results"] == []
    board = everything[0]["board"]
    assert len(get_json(f"{base}?board={board}")["results"]) == 4
    up = [r["median"] for r in get_json(f"{base}?sort=median")["results"]]
    down = [r["median"] for r in get_json(f"{base}?sort=median&order=desc")["results"]]
    assert up == sorted(up) and down == sorted(up, reverse=True)
    _, _, page = get(f"{server}/sweep/{filled['sweep_id']}?executor=vm-compiled&sort=opt_level&order=desc")
    assert page.count('<tr data-job="') == 2 and '<option value="vm-compiled" selected>' in page


def test_user_text_stays_text(server: str, filled: dict[str, Any]) -> None:
    sweep_id = filled["sweep_id"]
    key = get_json(f"{server}/api/sweep/{sweep_id}")["results"][0]["job_key"]
    assert get_json(f"{server}/api/sweeps")[0]["name"] == HOSTILE  # stored as given
    for path in ("/sweeps", f"/sweep/{sweep_id}", f"/compare?a={sweep_id}", f"/job/{key}"):
        status, _, body = get(server + path)
        assert status == 200 and HOSTILE not in body, path
        assert ESCAPED in body or path.startswith("/job/"), path
        # The only scripts are the dashboard's own, from the package.
        assert re.findall(r"<script[^>]*>", body) == ['<script src="/static/dashboard.js" defer>'], path
    assert not re.search(r"(src|href)=['\"](https?:)?//", get(f"{server}/sweep/{sweep_id}")[2])  # nothing from the net


@needs_chromium
def test_sweep_page_plots_render_in_chromium(
    server: str, filled: dict[str, Any], browser: Browser, tmp_path: Path
) -> None:
    browser.open(f"{server}/sweep/{filled['sweep_id']}")
    sizes = browser.wait_for(
        "Array.from(document.images).every(i => i.complete) && "
        "Array.from(document.images).map(i => [i.getAttribute('src'), i.naturalWidth, i.naturalHeight])"
    )
    plots = [s for s in sizes if "/plot/" in s[0]]
    assert plots and all(w > 100 and h > 100 for _, w, h in plots), sizes
    assert browser.evaluate("document.querySelector('h1').textContent").startswith(f"Sweep {HOSTILE}")
    assert browser.dialogs() == []
    shots = [browser.screenshot(tmp_path / "sweep.png")]
    # The job the ranking picked: its samples histogram renders too.
    browser.evaluate("document.querySelector('#ranking a').click()")
    browser.wait_for("location.pathname.startsWith('/job/') && document.readyState === 'complete'")
    histogram = browser.wait_for(
        "(function () { var i = document.getElementById('samples-plot');"
        " return i && i.complete && [i.naturalWidth, i.naturalHeight]; })()"
    )
    assert histogram[0] > 100 and histogram[1] > 100, histogram
    shots.append(browser.screenshot(tmp_path / "job.png"))
    for shot in shots:
        assert shot.stat().st_size > 10_000
        if os.environ.get("TVMBENCH_SCREENSHOTS"):  # to look at them: TVMBENCH_SCREENSHOTS=/some/dir
            shutil.copy(shot, Path(os.environ["TVMBENCH_SCREENSHOTS"]) / shot.name)


@needs_chromium
def test_sweeps_page_shows_progress_of_a_sweep_running_elsewhere(live: dict[str, Any], browser: Browser) -> None:
    api, page = live["api"], live["page"]
    print("the page showed (status, final, jobs):", list(dict.fromkeys(page)))
    assert live["sweep_id"], live["output"][-2000:]
    finals = [f for _, f in api]
    assert finals == sorted(finals) and api[-1] == ("complete", 4), api  # progress only moves forward
    assert any(st == "running" and f < 4 for st, f in api), api  # seen while it ran, not only at the end
    # The page (loaded once, before the sweep began) added the sweep's row and moved its counts itself.
    shown_final = [int(f) for _, f, _ in page]
    assert len(set(shown_final)) >= 2 and shown_final[-1] == 4, page
    assert any(st == "running" for st, _, _ in page) and page[-1][0] == "complete", page
    assert browser.evaluate("window.__sameDocument") == "loaded once"
    name = browser.evaluate(
        f"document.querySelector('[data-sweep=\"{live['sweep_id']}\"] td:nth-child(2)').textContent"
    )
    assert name == HOSTILE and browser.dialogs() == []


def test_history_and_compare_across_two_runs(server: str, filled: dict[str, Any], live: dict[str, Any]) -> None:
    first, second = filled["sweep_id"], live["sweep_id"]
    key = get_json(f"{server}/api/sweep/{first}")["results"][0]["job_key"]
    history = get_json(f"{server}/api/history/{key[:16]}?method=mad")
    assert history == cli_json("results", "history", key[:16], "--method", "mad", "--db", filled["url"])
    assert history["job_key"] == key and history["method"] == "mad"
    assert [p["sweep_id"] for p in history["points"]][-2:] == [first, second]
    assert all(p["median"] > 0 and p["regressed"] is False for p in history["points"])  # 2 points: no baseline yet
    status, kind, _ = get(f"{server}/history/{key}/plot.png?method=mad")
    assert status == 200 and kind == "image/png"
    compared = get_json(f"{server}/api/compare?a={first}&b=live")
    assert compared["sweep_b"] == second and len(compared["rows"]) == 4
    assert {r["verdict"] for r in compared["rows"]} <= {"same", "regression", "improvement"}
    assert all(r["ratio"] and r["ratio_lo"] <= r["ratio"] <= r["ratio_hi"] for r in compared["rows"])


# --- safety -------------------------------------------------------------------------------------------


def test_refuses_a_wider_host_without_the_flag(store: ResultStore, capsys: pytest.CaptureFixture[str]) -> None:
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--db", store.url])
    assert result.exit_code == 2
    assert "--host 0.0.0.0 is not a loopback address" in result.output and "--allow-remote" in result.output
    for host in ("10.0.0.5", "lab-gateway.example"):
        with pytest.raises(ServeError):
            check_host(host, allow_remote=False)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        check_host(host, allow_remote=False)
    assert capsys.readouterr().err == ""
    check_host("0.0.0.0", allow_remote=True)
    # The farm's warning, word for word in its form.
    assert capsys.readouterr().err.startswith("warning: dashboard listening on 0.0.0.0: the dashboard has no login")


def test_answers_only_to_its_own_host_names(synthetic: tuple[str, ResultStore]) -> None:
    base, _ = synthetic
    port = base.rsplit(":", 1)[1]
    assert get(f"http://localhost:{port}/sweeps")[0] == 200
    # A page elsewhere that rebinds its own name to 127.0.0.1 sends its name as Host: refused.
    rebound = urllib.request.Request(f"{base}/api/sweeps", headers={"Host": f"attacker.example:{port}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(rebound, timeout=30)
    assert refused.value.code == 400


def test_farm_page_says_when_the_tracker_does_not_answer(store: ResultStore) -> None:
    from orchestrator.farm import free_port

    reader = open_readonly(store.url)
    try:
        with running(reader, tracker=f"127.0.0.1:{free_port()}") as base:
            status, _, page = get(f"{base}/farm")
            assert status == 200 and "does not answer" in page
            assert get_json(f"{base}/api/farm")["tracker_error"]
    finally:
        reader.close()


def test_opens_the_database_read_only(filled: dict[str, Any], tmp_path: Path) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    store = open_readonly(filled["url"])
    try:
        with pytest.raises(OperationalError, match="readonly"), store.engine.begin() as conn:
            conn.execute(text("UPDATE sweeps SET name = 'changed'"))
    finally:
        store.close()
    assert get_json_names(filled["writer"]) == {HOSTILE}
    missing = tmp_path / "nothing-here.db"
    with pytest.raises(ServeError, match="no results database at"):
        open_readonly(f"sqlite:///{missing}")
    assert not missing.exists()  # not created


def get_json_names(store: ResultStore) -> set[str]:
    return {s.name for s in query.sweeps(store)}


def test_serve_command_starts_on_loopback(filled: dict[str, Any]) -> None:
    proc = subprocess.Popen(
        [*TVMBENCH, "serve", "--db", filled["url"], "--port", "0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(proc.stderr.readline()), daemon=True)
        reader.start()  # the line is printed once the socket listens
        reader.join(60)
        found = re.search(r"http://127\.0\.0\.1:(\d+)/ \(read-only", "".join(lines))
        assert found, lines
        status, _, body = get(f"http://127.0.0.1:{found.group(1)}/sweeps")
        assert status == 200 and filled["sweep_id"][:12] in body
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- PostgreSQL ---------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_works_on_postgresql(
    pg_url: str, filled: dict[str, Any], models_dir: Path, local_farm: LocalFarm, tmp_path: Path
) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    spec = load_spec(write_sweep(tmp_path, SWEEP.format(models=models_dir).replace("cooldown_ms = 200", "")))
    writer = ResultStore(pg_url)
    try:
        outcome = run_sweep(spec, writer, local_farm.tracker, ArtifactCache(filled["home"] / "artifacts"))
        assert dict(outcome.statuses) == {"ok": 4}
        keys = [r["job_key"] for r in query.results(writer, spec.sweep_id)]
    finally:
        writer.close()
    store = open_readonly(pg_url)
    try:
        with pytest.raises(DBAPIError, match="read-only transaction"), store.engine.begin() as conn:
            conn.execute(text("UPDATE sweeps SET name = 'changed'"))
        with running(store) as base:
            page = get(f"{base}/sweep/{spec.sweep_id}")
            assert page[0] == 200 and all(f"/job/{k}?sweep={spec.sweep_id}" in page[2] for k in keys)
            assert ESCAPED in page[2] and HOSTILE not in page[2]
            for path in ("/sweeps", f"/job/{keys[0]}", f"/history/{keys[0]}", "/farm", f"/compare?a={spec.sweep_id}"):
                assert get(base + path)[0] == 200, path
            assert get_json(f"{base}/api/sweeps")[0]["ok"] == 4
    finally:
        store.close()


# --- synthetic rows: failures, and data other issues add to a job ---------------------------------------


@pytest.fixture
def synthetic(store: ResultStore) -> Iterator[tuple[str, ResultStore]]:
    add_sweep(
        store,
        "syn0001",
        [
            Result(executor="vm-compiled", samples=noisy(5.0)),
            Result(executor="vm-bytecode", opt_level=0, status="build", error="TVMError: <img src=x onerror=alert(2)>"),
            Result(executor="vm-bytecode", opt_level=3, status="build", error="TVMError: <img src=x onerror=alert(2)>"),
            Result(executor="vm-bytecode", opt_level=1, status="timeout", error="session killed after 300 s"),
        ],
        created_at=T0 + timedelta(days=1),
    )
    reader = open_readonly(store.url)
    with running(reader) as base:
        yield base, store
    reader.close()


def test_failures_are_grouped_by_kind_with_their_messages(synthetic: tuple[str, ResultStore]) -> None:
    base, _ = synthetic
    failures = get_json(f"{base}/api/sweep/syn0001")["failures"]
    assert [(g["kind"], g["count"]) for g in failures] == [("build", 2), ("timeout", 1)]
    assert failures[0]["messages"][0]["message"] == "TVMError: <img src=x onerror=alert(2)>"
    assert failures[0]["messages"][0]["count"] == 2
    _, _, page = get(f"{base}/sweep/syn0001")
    assert "TVMError: &lt;img src=x onerror=alert(2)&gt;" in page and "<img src=x" not in page
    assert "session killed after 300 s" in page


def test_job_page_shows_keys_added_by_other_issues(
    synthetic: tuple[str, ResultStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, _ = synthetic
    real_detail = query.job_detail

    def job_detail(*args: Any, **kwargs: Any) -> dict[str, Any] | None:  # as a later issue may extend it
        detail = real_detail(*args, **kwargs)
        assert detail is not None
        detail["runs"][0].update(board_temp_c=61.5, board_state={"cpu_governor": "ondemand"}, memory={"peak_mb": 12.5})
        return {
            **detail,
            "tuning": {"trials": 64, "budget": 64, "best_ms": 4.2},
            "board_state": {"governor": "performance"},
            "energy_mj": [1.25, 1.5],
        }

    monkeypatch.setattr(query, "job_detail", job_detail)
    key = Result(executor="vm-compiled").job_key
    status, _, page = get(f"{base}/job/{key}")
    assert status == 200
    tuning = page.split("<h2>Tuning</h2>")[1].split("<h2>")[0]
    assert "trials" in tuning and "64" in tuning and "4.2" in tuning
    state = page.split("<h2>Board state</h2>")[1].split("<h2>")[0]
    assert "performance" in state and "cpu_governor" in state and "ondemand" in state
    assert "peak_mb" in page.split("<h2>Memory</h2>")[1].split("<h2>")[0]
    assert "energy_mj" in page.split("<h2>More recorded data</h2>")[1] and "1.25, 1.5" in page
    assert "board_temp_c" in page.split("<h2>Attempts</h2>")[1] and "61.5" in page


def test_refuses_a_database_at_another_schema(tmp_path: Path) -> None:
    import sqlite3

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(ServeError, match="holds no tvmbench schema"):
        open_readonly(f"sqlite:///{empty}")
    old = tmp_path / "old.db"
    ResultStore(f"sqlite:///{old}").close()
    with sqlite3.connect(old) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0003'")
    with pytest.raises(ServeError, match=r"schema is at revision 0003.*tvmbench db upgrade"):
        open_readonly(f"sqlite:///{old}")
    result = CliRunner().invoke(app, ["serve", "--db", f"sqlite:///{old}"])
    assert result.exit_code == 2 and "run `tvmbench db upgrade" in result.output
