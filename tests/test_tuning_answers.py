"""results show / best / report render MetaSchedule tuning from stored builds (synthetic rows, no TVM).

The real end-to-end tuning runs are in the engine's tests and tests/test_tuning_e2e.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from tests.synthetic import Result, add_sweep, noisy, row_by
from tvmbench.answers import query, ranking
from tvmbench.cli import app
from tvmbench.core.records import Build, Job, MeasureSettings, ModelRef
from workers.targets import PRESETS


def tuning(budget: int, tuning_s: float, best_us: float) -> dict:
    """A tuning provenance dict with the keys the engine writes."""
    return {
        "budget": budget,
        "trials_run": budget - 8,
        "trials_from_records": 8,
        "tasks": [
            {"name": "fused_conv2d_relu", "weight": 2, "flops": 4.7e6, "trials": budget - 16, "best_us": best_us,
             "records_found": True},
            {"name": "matmul", "weight": 1, "flops": 2.6e5, "trials": 16, "best_us": None, "records_found": False},
        ],
        "failed_trials": {"build": 2, "timeout": 1},
        "errors": ["build: candidate 3: LLVM ERROR: something", "timeout: board host@127.0.0.1:9000 ran past 10 s"],
        "tuning_s": tuning_s,
        "build_s": tuning_s * 0.2,
        "board_wait_s": tuning_s * 0.1,
        "run_s": tuning_s * 0.6,
        "cost_model": "random",
        "seed": 0,
        "database": "sql",
    }  # fmt: skip


@pytest.fixture
def tuned_store(store: ResultStore) -> ResultStore:
    add_sweep(
        store,
        "tune0001",
        [
            Result(executor="onnxruntime", opt_level=0, samples=noisy(1.0, seed=1)),
            Result(executor="vm-compiled", samples=noisy(40.0, seed=2)),
            Result(executor="vm-compiled", samples=noisy(10.0, seed=3), tuning=tuning(32, 120.0, 900.0)),
            Result(executor="vm-compiled", samples=noisy(3.0, seed=4), tuning=tuning(64, 300.0, 250.0)),
            # a configuration tuned with no untuned counterpart in the sweep
            Result(executor="vm-bytecode", samples=noisy(5.0, seed=5), tuning=tuning(64, 200.0, 400.0)),
        ],
        label="tuned",
    )
    return store


def _db(store: ResultStore) -> list[str]:
    return ["--db", store.url]


def test_best_ranks_tuned_and_untuned_side_by_side(tuned_store: ResultStore) -> None:
    rows = ranking.best(tuned_store)
    host = row_by(rows, board_key="host")
    assert host["best"] == "vm-compiled O2 per-target tuned 64 (host)"
    side = {e["config"]: e for e in host["tuning"]}
    assert list(side) == [
        "vm-compiled O2 per-target tuned 64 (host)",
        "vm-bytecode O2 per-target tuned 64 (host)",
        "vm-compiled O2 per-target tuned 32 (host)",
        "vm-compiled O2 per-target (host)",
    ], "fastest first, tuned and untuned together"
    t64 = side["vm-compiled O2 per-target tuned 64 (host)"]
    speedup = t64["untuned_median"] / t64["median"]
    assert speedup == pytest.approx(40.0 / 3.0, rel=0.05)
    assert t64["speedup_vs_untuned"] == pytest.approx(speedup)
    assert t64["speedup_vs_onnxruntime"] == pytest.approx(1.0 / 3.0, rel=0.05)
    assert t64["tuning_minutes"] == pytest.approx(5.0)
    assert t64["tuning_min_per_speedup"] == pytest.approx(5.0 / (speedup - 1.0))
    t32 = side["vm-compiled O2 per-target tuned 32 (host)"]
    assert t32["tuning_min_per_speedup"] == pytest.approx(2.0 / (t32["speedup_vs_untuned"] - 1.0))
    assert t64["tuning_min_per_speedup"] < t32["tuning_min_per_speedup"] * 1.5  # both are finite numbers
    lone = side["vm-bytecode O2 per-target tuned 64 (host)"]
    assert lone["untuned_median"] is None and lone["tuning_min_per_speedup"] is None, "no counterpart, no cost"
    untuned = side["vm-compiled O2 per-target (host)"]
    assert untuned["tuning_budget"] == 0 and untuned["tuning_minutes"] is None

    result = CliRunner().invoke(app, ["results", "best", *_db(tuned_store)])
    assert result.exit_code == 0, result.output
    assert "tuned and untuned" in result.output and "min per ×" in result.output
    as_json = CliRunner().invoke(app, ["results", "best", "--json", *_db(tuned_store)])
    assert json.loads(as_json.stdout)[0]["tuning"][0]["tuning_budget"] == 64


def test_show_prints_the_per_task_table(tuned_store: ResultStore) -> None:
    key = Result(executor="vm-compiled", tuning={"budget": 64}).job_key
    result = CliRunner().invoke(app, ["results", "show", key[:12], *_db(tuned_store)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "budget 64 trials, 56 run, 8 covered by stored records" in out
    assert "failed trials: build 2, timeout 1" in out
    assert "tuning time 300.0 s (building 60.0 s, waiting for boards 30.0 s, measuring 180.0 s)" in out
    assert "fused_conv2d_relu" in out and "250" in out and "records found" in out
    assert "LLVM ERROR: something" in out
    as_json = json.loads(CliRunner().invoke(app, ["results", "show", key[:12], "--json", *_db(tuned_store)]).stdout)
    assert as_json["build"]["tuning"] == tuning(64, 300.0, 250.0)
    assert as_json["tuning_budget"] == 64 and as_json["tuning_s"] == 300.0


def test_report_plots_latency_against_trials(tuned_store: ResultStore, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    pngs = tmp_path / "png"
    result = CliRunner().invoke(app, ["report", "tuned", "--output", str(out), "--png", str(pngs), *_db(tuned_store)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "against MetaSchedule trials" in page
    assert "<h2>Tuning</h2>" in page and "min per × gained" in page
    trials_png = [p for p in pngs.iterdir() if p.name.startswith("trials-")]
    assert len(trials_png) == 1 and trials_png[0].stat().st_size > 5000


def test_build_tuning_round_trips_through_the_store(db_url: str) -> None:
    store = ResultStore(db_url)
    model = ModelRef(name="tiny", sha256="a" * 64, source="tiny.onnx", inputs=(("x", (1, 4), "float32"),))
    job = Job(model=model, target=PRESETS["host"], executor="vm-compiled", opt_level=2, pipeline="per-target",
              measure=MeasureSettings())  # fmt: skip
    store.begin_sweep("s1", name="t", label="", source="", source_path="t.toml", jobs=[job],
                      model_sizes={model.sha256: 1}, tvm_version="0.27")  # fmt: skip
    dict_in = tuning(64, 300.0, 250.0)
    store.save_build(job, Build(build_key=job.build_key("0.27"), status="ok", tuning=dict_in))
    assert store.get_build(job.build_key("0.27")).tuning == dict_in
    (row,) = query.results(store, "s1")
    assert (row["tuning_budget"], row["tuning_trials"], row["tuning_s"]) == (64, 56, 300.0)
    # an untuned build keeps NULLs
    store.save_build(job, Build(build_key=job.build_key("0.27"), status="ok"))
    (row,) = query.results(store, "s1")
    assert (row["tuning_budget"], row["tuning_s"]) == (None, None)
    store.close()


def test_sweeps_overview_counts_tuning_trials_of_a_running_sweep(store: ResultStore) -> None:
    """The live progress (results sweeps, the dashboard) counts finished builds' trials and a running build's
    committed records, each capped by its budget; untuned sweeps carry no tuning keys."""
    from datetime import UTC, datetime

    from sqlalchemy import select

    from db import models as m

    finished = Result(model="a", samples=noisy(2.0), tuning=tuning(24, 60.0, 50.0))  # 16 run + 8 from records
    running = Result(model="b", samples=noisy(3.0))  # its build row has no tuning yet: still tuning
    add_sweep(store, "tuned", [finished, running])
    add_sweep(store, "plain", [Result(model="c", samples=noisy(1.0))])
    with store._sessions.begin() as s:
        for sweep_id in ("tuned", "plain"):
            s.get(m.Sweep, sweep_id).status = "running"
        running_build = None
        for job in s.scalars(select(m.Job).where(m.Job.sweep_id == "tuned")):
            job.config = {**job.config, "tuning": {"budget": 24 if job.model_name == "a" else 32}}
            if job.model_name == "b":
                running_build = job.build_key
        workload = m.TuningWorkload(
            workload_hash="1", module_equality="structural", target_key="t", target={}, board_key="host",
            tvm_version="0.27.0", mod_b64="", created_at=datetime.now(UTC),
        )  # fmt: skip
        s.add(workload)
        s.flush()
        for i in range(3):
            s.add(
                m.TuningRecord(
                    workload_id=workload.id, record_hash=str(i), trace=[], mean_run_s=1e-3, valid=True,
                    source=f"build {running_build[:16]}", created_at=datetime.now(UTC),
                )
            )  # fmt: skip
    rows = {r["sweep_id"]: r for r in query.sweeps_overview(store)}
    assert (rows["tuned"]["tuning_trials"], rows["tuned"]["tuning_budget"]) == (24 + 3, 24 + 32)
    assert "tuning_budget" not in rows["plain"]
    assert query.sweeps_overview(store, "tuned")[0]["tuning_trials"] == 27


def test_results_show_says_what_each_candidate_cost_to_build() -> None:
    from tvmbench.answers.tuning_text import tuning_lines

    base = {"budget": 64, "trials_run": 12, "trials_from_records": 0, "tuning_s": 30.0, "cost_model": "xgb"}
    built = {**base, "candidates_built": 10, "candidate_compile_s": 4.5, "candidate_fence_s": 0.3}
    (line,) = [x for x in tuning_lines(built) if "candidates:" in x]
    assert line.strip() == (
        "candidates: 10 built, compiling 0.45 s each and waiting for the host fence 0.03 s each "
        "(summed over CPUs: 4.8 s)"
    )
    # A build stored before candidates were counted, or one that built none, says nothing of them.
    assert not any("candidates:" in x for x in tuning_lines(base))
    assert not any("candidates:" in x for x in tuning_lines({**built, "candidates_built": 0}))
