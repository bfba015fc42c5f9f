"""Ids the user types: ``%`` and ``_`` are themselves, a shared prefix is refused with its candidates.

One real SQLite database holds several sweeps (two whose ids share a prefix) and boards (two whose ids
share a prefix, all quarantined). Every command that looks an id up is run on it with ``%``, ``_``, an
ambiguous prefix and an exact id: `farm reset` as a real process, the others through the CLI in-process,
and the dashboard's JSON routes over HTTP. Before the shared lookup helper, ``%`` reset every board,
``_`` cancelled some sweep and `results show _` showed some job, each with exit 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from db import models as m
from db.lookup import QueryError
from db.store import ResultStore
from orchestrator import submit
from tests.synthetic import T0, Result, add_sweep, noisy
from tvmbench.cli import app

TVMBENCH = [sys.executable, "-c", "from tvmbench.cli import app; app()"]
WILDCARDS = ("%", "_", "%%", "_" * 12)
DONE_A, DONE_B, OPEN = "ab12cd34ef56", "ab12ff000001", "c0ffee000003"  # A and B share the prefix "ab12"
BOARDS = ("host", "hostb", "arm64-emu")  # host@... and hostb@... share the prefix "host"


@dataclass
class Db:
    url: str
    store: ResultStore
    keys: list[str]  # job keys of the sweeps

    def cli(self, *args: str) -> Any:
        """``tvmbench ARGS --db URL`` in-process: the result (exit_code, output)."""
        return CliRunner().invoke(app, [*args, "--db", self.url])

    def board_states(self) -> dict[str, str]:
        return self.store.board_states()

    def sweep_statuses(self) -> dict[str, str]:
        with self.store.read() as s:
            return dict(s.execute(select(m.Sweep.id, m.Sweep.status)).all())


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Db]:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = ResultStore(url)
    # 24 configurations: more job keys than hex digits, so two share a first character (an ambiguous prefix).
    configs = [(b, e, o) for b in BOARDS for e in ("vm-compiled", "vm-bytecode") for o in range(4)]
    results = [Result(board_key=b, executor=e, opt_level=o, samples=noisy(3.0 + i, seed=i))
               for i, (b, e, o) in enumerate(configs)]  # fmt: skip
    for i, sweep_id in enumerate((DONE_A, DONE_B, OPEN)):
        add_sweep(store, sweep_id, results, label=f"run{i}", created_at=T0 + timedelta(days=i))
    with store._sessions.begin() as s:
        s.execute(update(m.Sweep).where(m.Sweep.id == OPEN).values(status="incomplete"))
        s.execute(update(m.Job).where(m.Job.sweep_id == OPEN).values(status="pending", final_run_id=None))
        s.execute(update(m.Board).values(state="quarantined", consecutive_failures=3))
    yield Db(url, store, sorted({r.job_key for r in results}))
    store.close()


def shared_prefix(keys: list[str]) -> str:
    """The shortest prefix that two of ``keys`` share (so it is ambiguous) but no key equals."""
    for n in range(1, 64):
        starts = [k[:n] for k in keys]
        shared = sorted({p for p in starts if starts.count(p) > 1})
        if shared:
            return shared[0]
    raise AssertionError("no two keys share a prefix")


def refused(result: Any, *words: str) -> None:
    """The command failed with exit 2 and one line (no traceback) containing ``words``."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert all(w in lines[0] for w in words), (words, lines[0])


def test_farm_reset_matches_wildcards_literally_and_refuses_a_shared_prefix(db: Db) -> None:
    env = {**os.environ, "TVMBENCH_HOME": str(Path(db.url.removeprefix("sqlite:///")).parent)}
    before = db.board_states()
    assert set(before.values()) == {"quarantined"} and len(before) == 3
    for ref in ("%", "_", "host"):  # a real process for the command that reset every board
        done = subprocess.run([*TVMBENCH, "farm", "reset", ref, "--db", db.url], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        refused(SimpleNamespace(exit_code=done.returncode, output=done.stderr + done.stdout), repr(ref))
        assert db.board_states() == before, f"`farm reset {ref}` reset boards"
    assert "ambiguous, 2 start with it: host@127.0.0.1:9000, hostb@127.0.0.1:9000" in done.stderr
    for ref in WILDCARDS:
        refused(db.cli("farm", "reset", ref), "no board", repr(ref))
    assert db.board_states() == before
    exact = db.cli("farm", "reset", "host@127.0.0.1:9000")
    assert exact.exit_code == 0, exact.output
    assert db.board_states() == {**before, "host@127.0.0.1:9000": "ok"}
    assert db.cli("farm", "reset", "hostb@").exit_code == 0, "a unique prefix still works"
    assert db.board_states()["hostb@127.0.0.1:9000"] == "ok"


def test_sweep_cancel_status_and_resume_take_no_wildcards(db: Db) -> None:
    before = db.sweep_statuses()
    for ref in WILDCARDS:
        for command in (("sweep", "cancel", ref, "--wait", "0"), ("sweep", "status", ref), ("sweep", "resume", ref)):
            refused(db.cli(*command), "no sweep", repr(ref))
    for command in (("sweep", "cancel", "ab12", "--wait", "0"), ("sweep", "status", "ab12"), ("sweep", "resume", "ab")):
        refused(db.cli(*command), "is ambiguous, 2 start with it", DONE_A, DONE_B)
    assert db.sweep_statuses() == before, "nothing was cancelled or resumed"
    status = db.cli("sweep", "status", DONE_B, "--json")
    assert status.exit_code == 0 and json.loads(status.output)["sweep_id"] == DONE_B
    assert json.loads(db.cli("sweep", "status", "c0f", "--json").output)["state"] == "incomplete"
    cancelled = db.cli("sweep", "cancel", OPEN, "--wait", "0")
    assert cancelled.exit_code == 0 and f"sweep {OPEN} cancelled: 24 job(s) cancelled" in cancelled.output
    assert db.sweep_statuses() == {**before, OPEN: "cancelled"}


def test_results_list_and_show_take_no_wildcards(db: Db) -> None:
    for ref in WILDCARDS:
        refused(db.cli("results", "list", "--sweep", ref), "no sweep", repr(ref))
        refused(db.cli("results", "show", ref), "no job", repr(ref))
        refused(db.cli("results", "show", db.keys[0], "--sweep", ref), "no sweep", repr(ref))
        refused(db.cli("results", "history", ref), "no job", repr(ref))
    refused(db.cli("results", "list", "--sweep", "ab12"), "is ambiguous", DONE_A, DONE_B)
    prefix = shared_prefix(db.keys)
    candidates = [k for k in db.keys if k.startswith(prefix)]
    refused(db.cli("results", "show", prefix), "job key", "is ambiguous", *candidates)
    refused(db.cli("results", "history", prefix), "job key", "is ambiguous", *candidates)
    rows = json.loads(db.cli("results", "list", "--sweep", DONE_B, "--json").output)
    assert {r["sweep_id"] for r in rows} == {DONE_B} and len(rows) == 24
    shown = json.loads(db.cli("results", "show", db.keys[0], "--sweep", DONE_A, "--json").output)
    assert shown["job_key"] == db.keys[0] and shown["sweep_id"] == DONE_A
    newest = json.loads(db.cli("results", "show", db.keys[1][:20], "--json").output)
    assert newest["job_key"] == db.keys[1] and newest["sweep_id"] == OPEN, "a unique prefix, newest sweep"


def test_dashboard_job_and_sweep_routes_take_no_wildcards(db: Db) -> None:
    from tests.test_dashboard import get, running
    from tvmbench.dashboard.server import open_readonly

    reader = open_readonly(db.url)
    try:
        with running(reader) as base:
            for ref in WILDCARDS:
                for route in ("/api/job/", "/api/sweep/", "/api/history/"):
                    status, _, body = get(base + route + quote(ref, safe=""))
                    assert status == 404 and "ambiguous" not in body, (route, ref, status, body[:300])
            prefix = shared_prefix(db.keys)
            status, _, body = get(f"{base}/api/job/{prefix}")
            assert status == 404 and "is ambiguous" in json.loads(body)["error"], body[:300]
            status, _, body = get(f"{base}/api/sweep/ab12")
            assert status == 404 and f"{DONE_A}, {DONE_B}" in json.loads(body)["error"], body[:300]
            status, _, body = get(f"{base}/api/job/{db.keys[2]}?sweep={DONE_B}")
            assert status == 200 and json.loads(body)["sweep_id"] == DONE_B
    finally:
        reader.close()


def test_a_ray_sweep_prefix_of_several_submitted_sweeps_is_refused() -> None:
    """Submitted sweeps are found among the Ray cluster's jobs (a fake client: the seam's unit test)."""

    def job(sweep_id: str, n: int) -> SimpleNamespace:
        return SimpleNamespace(metadata={submit.METADATA_KEY: sweep_id}, submission_id=f"tvmbench-{sweep_id}-{n}",
                               start_time=n)  # fmt: skip

    foreign = SimpleNamespace(metadata=None, submission_id="raw", start_time=4)  # not a tvmbench job
    client = SimpleNamespace(list_jobs=lambda: [job(DONE_A, 1), job(DONE_B, 2), job(DONE_A, 3), foreign])
    assert submit.latest_submission(client, "ab12cd").submission_id == f"tvmbench-{DONE_A}-3"
    assert submit.latest_submission(client, DONE_B).submission_id == f"tvmbench-{DONE_B}-2"
    assert submit.latest_submission(client, "%") is None and submit.latest_submission(client, "_") is None
    with pytest.raises(QueryError, match=f"ambiguous, 2 start with it: {DONE_A}, {DONE_B}"):
        submit.latest_submission(client, "ab")
