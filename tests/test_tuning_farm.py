"""Tuning for real: MetaSchedule candidates built as Ray tasks and timed on the farm's boards.

Small budgets (16 trials, one or two search rounds) on a small random-weight conv net; each test is a
few minutes on 2 quiet cores. Everything is real: Ray, the tracker, board agents, SQLite, ONNX Runtime.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from db import models as m
from db.store import ResultStore
from orchestrator.farm import BoardProcess, LocalFarm, free_port, wait_until
from orchestrator.farm.processes import _spawn
from orchestrator.plan import plan_jobs
from orchestrator.scheduler import run_sweep
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.answers import query
from tvmbench.answers.compare import _verdict
from tvmbench.answers.stats import mann_whitney_p, ratio_ci
from tvmbench.cli import app
from workers import model_zoo
from workers.artifacts import ArtifactCache

# Minutes each on 2 shared cores: past the suite's default 600 s per test when the machine is busy.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SWEEP = """
name = "tune"
[[models]]
path = "{model}"
[axes]
tuning = {budgets}
[tuning]
num_trials_per_iter = {per_iter}
[measure]
number = 5
repeat = 6
"""


def _sweep(tmp: Path, budgets: str, per_iter: int = 16) -> Path:
    model = tmp / "small_convnet.onnx"
    if not model.exists():
        onnx.save(model_zoo.small_convnet(), model)
    return write_sweep(tmp, SWEEP.format(model=model, budgets=budgets, per_iter=per_iter))


def _builds(store: ResultStore, sweep_id: str) -> dict[int, dict[str, Any]]:
    """Tuning budget -> {"job": result row, "build": build row} of a sweep."""
    out = {}
    with store._sessions() as s:
        for job in s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id)):
            build = s.get(m.Build, job.build_key)
            budget = (job.config.get("tuning") or {}).get("budget", 0)
            out[budget] = {"status": job.status, "build": build, "job_key": job.job_key}
    rows = {r["job_key"]: r for r in query.results(store, sweep_id)}
    for v in out.values():
        v["row"] = rows[v["job_key"]]
    return out


def _records(store: ResultStore) -> int:
    with store._sessions() as s:
        return int(s.scalar(select(func.count()).select_from(m.TuningRecord)) or 0)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory, ray_local: None) -> Iterator[dict[str, Any]]:
    """One sweep, tuning = [0, 16], through a one-board local farm."""
    tmp = tmp_path_factory.mktemp("tuned")
    farm = LocalFarm.start(tmp / "farm", {"host": 1})
    store = ResultStore(f"sqlite:///{tmp / 'results.db'}")
    try:
        spec = load_spec(_sweep(tmp, "[0, 16]"))
        seen: list[dict[str, int]] = []
        started = time.monotonic()
        outcome = run_sweep(
            spec,
            store,
            farm.tracker,
            ArtifactCache(tmp / "artifacts"),
            progress=lambda event, counts: seen.append(dict(counts)) if event == "tuning" else None,
            health_checks=False,
        )
        print(f"tuned sweep: {time.monotonic() - started:.0f}s")
        yield {"spec": spec, "store": store, "outcome": outcome, "progress": seen, "tmp": tmp}
    finally:
        store.close()
        farm.stop()


def test_tuned_build_is_faster_and_still_right(tuned: dict[str, Any]) -> None:
    builds = _builds(tuned["store"], tuned["spec"].sweep_id)
    untuned, tuned16 = builds[0], builds[16]
    assert untuned["status"] == tuned16["status"] == "ok", (untuned["row"], tuned16["row"])
    # "ok" means the outputs matched ONNX Runtime's within the sweep's tolerance, on the board.
    assert tuned16["row"]["max_abs_err"] is not None and tuned16["row"]["max_abs_err"] < 1e-4
    a, b = untuned["row"], tuned16["row"]
    samples_a, samples_b = a["samples"], b["samples"]
    ci = ratio_ci(samples_a, samples_b)  # median(tuned) / median(untuned)
    p = mann_whitney_p(samples_a, samples_b)
    verdict = _verdict("ok", "ok", ci.value, ci.lo, ci.hi, p, 0.05, 0.05)
    print(f"untuned {a['median_ms']:.2f} ms, tuned {b['median_ms']:.2f} ms, ratio {ci.value:.2f} p {p:.3g}")
    assert verdict == "improvement", (a["median_ms"], b["median_ms"], ci, p)


def test_provenance_says_what_tuning_did(tuned: dict[str, Any]) -> None:
    builds = _builds(tuned["store"], tuned["spec"].sweep_id)
    build = builds[16]["build"]
    t = build.tuning
    assert set(t) == {
        "budget", "trials_run", "trials_from_records", "tasks", "failed_trials", "errors", "tuning_s",
        "build_s", "board_wait_s", "run_s", "candidates_built", "candidate_compile_s", "candidate_fence_s",
        "cost_model", "seed", "database", "warm_start", "curve",
    }  # fmt: skip
    assert t["warm_start"]["enabled"] and t["warm_start"]["trained_on"] == 0, "an empty store trains nothing"
    assert t["budget"] == 16 and t["trials_run"] == 16 and t["trials_from_records"] == 0
    assert t["database"] == "sql" and t["cost_model"] == "xgb"
    tuned_tasks = [x for x in t["tasks"] if x["trials"]]
    assert tuned_tasks and all(x["records_found"] and x["best_us"] > 0 for x in tuned_tasks), t["tasks"]
    assert all("conv2d" in x["name"] for x in tuned_tasks)  # the budget went where the FLOPs are
    assert t["build_s"] > 0 and t["run_s"] > 0 and t["tuning_s"] >= t["build_s"]
    # Every candidate that became a trial was built and timed apart from its fence wait.
    failed_builds = sum(v for k, v in t["failed_trials"].items() if k.startswith("build"))
    assert t["candidates_built"] == 16 - failed_builds and t["candidate_compile_s"] > 0, t
    assert t["candidate_fence_s"] >= 0
    # The records were applied inside the job's traced PassContext, and the program is another one.
    assert "MetaScheduleApplyDatabase" in build.pass_trace
    assert build.fingerprint != builds[0]["build"].fingerprint
    assert build.tuning_trials == 16  # the records helper's column for the answers
    # The tuning curve: a point per measured trial, best so far, in the order the trials finished.
    curve = t["curve"]
    assert len(curve) == t["trials_run"] == 16, curve
    assert [p[0] for p in curve] == list(range(1, 17))
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(curve)), curve
    assert all(a[2] >= b[2] for a, b in itertools.pairwise(curve)), curve
    assert 0 <= curve[-1][1] <= t["tuning_s"]
    # It ends where the stored records end: each tuned task's best record, weighted by its calls.
    ends_at = sum(x["weight"] * x["best_us"] for x in t["tasks"] if x["best_us"] is not None) / 1e3
    assert curve[-1][2] == pytest.approx(ends_at, rel=1e-5), (curve[-1], t["tasks"])
    assert curve[0][2] > 0
    assert _records(tuned["store"]) >= 1
    # The progress bar was told trials done / budget while the build ran.
    assert tuned["progress"] and tuned["progress"][-1]["trials_budget"] == 16
    assert tuned["progress"][-1]["trials_done"] == 16


def test_plan_of_a_bigger_budget_counts_the_stored_records(tuned: dict[str, Any]) -> None:
    tmp = tuned["tmp"] / "bigger"
    tmp.mkdir()
    sweep = _sweep(tuned["tmp"], "[32]")
    result = CliRunner().invoke(app, ["sweep", "plan", str(sweep), "--db", tuned["store"].url, "--json"])
    assert result.exit_code == 0, result.output
    import json

    plan = json.loads(result.output)["jobs"][0]["tuning_plan"]
    assert plan["trials_covered"] >= 1 and plan["trials_to_run"] == 32 - plan["trials_covered"], plan


def test_board_killed_during_tuning_costs_trials_not_the_job(
    tmp_path: Path, ray_local: None, home: Path, store: ResultStore
) -> None:
    # Two boards of the key: a sound one, and one that dies with its session the moment a candidate is
    # loaded on it (tests/dying_board.py). The tracker hands boards out in turn, so with candidates timed
    # one at a time (the host fence) the second candidate at the latest lands on the dying board.
    farm = LocalFarm.start(tmp_path / "farm", {"host": 1})
    try:
        port = free_port()
        agent = ["-m", "tests.dying_board", "--tracker", farm.tracker, "--key", "host", "--port", str(port)]
        proc = _spawn([sys.executable, *agent], tmp_path / "farm" / "dying-board.log")
        farm.boards.append(BoardProcess(key="host", port=port, pid=proc.pid))
        farm.wait_for_boards()
        spec = load_spec(_sweep(tmp_path, "[16]", per_iter=8))
        run_sweep(spec, store, farm.tracker, ArtifactCache(home / "artifacts"), health_checks=False)
        assert proc.poll() is not None, "no candidate reached the dying board"
        statuses = store.job_statuses(spec.sweep_id)
        assert list(statuses.values()) == ["ok"], statuses  # one job, one final row
        build = _builds(store, spec.sweep_id)[16]["build"]
        failed = build.tuning["failed_trials"]
        assert sum(failed.get(k, 0) for k in ("infra", "timeout")) >= 1, build.tuning
        assert build.tuning["trials_run"] == 16
        assert any(f":{port}" in e for e in build.tuning["errors"]), build.tuning["errors"]
    finally:
        farm.stop()


def test_cancel_during_tuning_keeps_records_and_resume_continues(
    tmp_path: Path, ray_local: None, home: Path, store: ResultStore, local_farm: LocalFarm
) -> None:
    spec = load_spec(_sweep(tmp_path, "[16]", per_iter=8))
    cache = ArtifactCache(home / "artifacts")
    box: list = []
    thread = threading.Thread(
        target=lambda: box.append(run_sweep(spec, store, local_farm.tracker, cache, health_checks=False)),
        daemon=True,
    )
    thread.start()
    wait_until(lambda: _records(store) >= 1, 600, "the first tuning records")
    result = CliRunner().invoke(app, ["sweep", "cancel", spec.sweep_id, "--db", store.url])
    assert result.exit_code == 0, result.output
    thread.join(300)  # a busy machine may finish the batch in flight first; the statuses below decide
    assert box, "the cancel did not stop tuning"
    assert set(store.job_statuses(spec.sweep_id).values()) == {"cancelled"}
    kept = _records(store)
    assert kept >= 1
    outcome = run_sweep(spec, store, local_farm.tracker, cache, health_checks=False, reopen_cancelled=True)
    assert dict(outcome.statuses) == {"ok": 1}, outcome
    tuning = _builds(store, spec.sweep_id)[16]["build"].tuning
    assert tuning["trials_from_records"] >= 1, tuning
    assert tuning["trials_run"] + tuning["trials_from_records"] == 16, tuning
    assert _records(store) >= kept
    assert len(plan_jobs(spec)) == 1
