"""A fixed tuning budget applies only the records it accounts for, however many the database holds.

The defect this guards: with records of a larger budget stored (an earlier sweep, an auto run, another
model's), a build of a small fixed budget counted at most its budget against the stored records but applied
the best of the workload's whole history, so "tuned 2" was the larger run's program and every
latency-against-budget answer was wrong. Now a fixed budget applies, per task, the best of the first
covered + measured records in store order (what an N-trial run would have stored); a task it gives no trial
stays untuned.

Real MetaSchedule on a tiny MLP (two matmul tasks: at 12 trials 8 and 4, at 2 trials 2 and 0), random cost
model, the in-process candidate builder against the real local farm, records in SQLite, as
tests/test_tuning_auto.py builds. Nothing here compares timings: only which stored records a build applied.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import onnx
import pytest
from sqlalchemy import select

from db import models as m
from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.plan import plan_jobs
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.core.records import Job
from workers import model_zoo
from workers.executors.registry import build_job
from workers.executors.requests import BuildRequest
from workers.tuning.stage import TuningEnv

# Two builds that search (12 trials, then 4 more) and three that only apply: a few minutes on 2 busy cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SWEEP = """
name = "budget-records"
[[models]]
path = "{model}"
[axes]
executor = ["{executor}"]
tuning = [{budget}]
[tuning]
cost_model = "random"
num_trials_per_iter = 4
"""

BIG, SMALL, MORE = 12, 2, 16


def _job(tmp: Path, model: Path, budget: int, executor: str = "vm-compiled") -> Job:
    text = SWEEP.format(model=model, budget=budget, executor=executor)
    (job,) = plan_jobs(load_spec(write_sweep(tmp, text, name=f"b{budget}-{executor}.toml")))
    return job


def _build(job: Job, model: Path, url: str, tracker: str) -> tuple[str, dict[str, Any]]:
    """Build ``job`` with its records in the SQL store at ``url``: (program fingerprint, tuning provenance)."""
    # MetaSchedule's logging setup lists its logger's handlers by name; the ones pytest's log capture leaves
    # there have none and break the next tuning run in this process (as in tests/test_tuning_auto.py).
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in ms_logger.handlers if h.get_name() is None]:
        ms_logger.removeHandler(handler)
    env = TuningEnv(tracker=tracker, builder="local", database={"kind": "sql", "url": url})
    build, data = build_job(BuildRequest(job, model.read_bytes(), tuning_env=env))
    assert build.ok and data, build.error
    assert build.tuning is not None and build.tuning["database"] == "sql"
    return build.fingerprint, build.tuning


def _hashes(job: Job, model: Path) -> dict[str, str]:
    """Task name -> MetaSchedule workload hash, extracted as the tuning stage extracts them."""
    from tvm.relax.frontend.onnx import from_onnx

    from workers.tuning.database import workload_hash
    from workers.tuning.stage import tuning_target
    from workers.tuning.tasks import extract, split_pipeline

    settings = job.tuning_settings
    target = tuning_target(job.target.tvm_target, settings)
    front, _ = split_pipeline(job.pipeline, target)
    with target:
        fused = front(from_onnx(onnx.load(model), keep_params_in_input=False))
    extracted, infos = extract(fused, target, settings.module_equality)
    return {i.name: workload_hash(extracted[i.index].dispatched[0], settings.module_equality) for i in infos}


def _stored(url: str, hashes: dict[str, str]) -> dict[str, list[tuple[bool, float]]]:
    """Per task: its workload's records in store order (id ascending) as (valid, mean run seconds)."""
    store = ResultStore(url)
    try:
        w, r = m.TuningWorkload, m.TuningRecord
        with store.read() as s:
            rows = s.execute(
                select(w.workload_hash, r.valid, r.mean_run_s).join(w, r.workload_id == w.id).order_by(r.id)
            )
            by_hash: dict[str, list[tuple[bool, float]]] = {}
            for h, valid, mean in rows:
                by_hash.setdefault(h, []).append((bool(valid), float(mean)))
    finally:
        store.close()
    return {name: by_hash.get(h, []) for name, h in hashes.items()}


def _best_of_first(records: list[tuple[bool, float]], n: int) -> float | None:
    """The best mean (µs) among the first ``n`` records that ran, or None."""
    times = [mean for valid, mean in records[:n] if valid]
    return min(times) * 1e6 if times else None


def _applied_only_its_own(tuning: dict[str, Any], stored: dict[str, list[tuple[bool, float]]]) -> None:
    """Every task's best and records_found are those of the first ``trials`` records it accounts for."""
    for task in tuning["tasks"]:
        want = _best_of_first(stored[task["name"]], task["trials"])
        assert task["best_us"] == (None if want is None else pytest.approx(want, rel=1e-9)), (task, stored)
        assert task["records_found"] == (want is not None), task


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, local_farm: LocalFarm) -> dict[str, Any]:
    """A larger budget's records stored first: 12 trials, 8 on one task and 4 on the other."""
    tmp = tmp_path_factory.mktemp("budget-records")
    model = tmp / "mlp.onnx"
    onnx.save(model_zoo.tiny_mlp(), model)
    url = f"sqlite:///{tmp / 'results.db'}"
    tracker = local_farm.tracker
    big_job = _job(tmp, model, BIG)
    hashes = _hashes(big_job, model)
    big_program, big = _build(big_job, model, url, tracker)
    assert big["trials_run"] == BIG and big["trials_from_records"] == 0, big
    trials = {t["name"]: t["trials"] for t in big["tasks"]}
    assert sorted(trials.values()) == [4, 8], trials
    stored = _stored(url, hashes)
    assert all(_best_of_first(records, len(records)) is not None for records in stored.values()), (
        "the test needs a record that ran on both tasks",
        big["errors"],
    )
    _applied_only_its_own(big, stored)
    return {"tmp": tmp, "model": model, "url": url, "tracker": tracker, "hashes": hashes, "big_program": big_program}


def test_a_smaller_budget_applies_only_the_records_it_accounts_for(setup: dict[str, Any]) -> None:
    tmp, model, url, tracker, hashes = (setup[k] for k in ("tmp", "model", "url", "tracker", "hashes"))
    before = _stored(url, hashes)
    # build.ok: no TuningMiss either (a task limited to no record, with records stored, is not a miss).
    program, small = _build(_job(tmp, model, SMALL), model, url, tracker)
    assert small["trials_run"] == 0 and small["trials_from_records"] == SMALL, small
    assert _stored(url, hashes) == before, "nothing measured, nothing stored"
    tasks = {t["name"]: t for t in small["tasks"]}
    # The heavier task had its 2 trials stored by the 12-trial build: it applies the best of those first 2.
    (given,) = [t for t in tasks.values() if t["trials"]]
    assert given["trials"] == SMALL
    assert given["best_us"] == pytest.approx(_best_of_first(before[given["name"]], SMALL), rel=1e-9), given
    # The other task has 4 records stored, but this budget gave it no trial: it stays untuned (the old code
    # applied the 12-trial build's best here, records_found true, and so built the 12-trial program).
    (untuned,) = [t for t in tasks.values() if not t["trials"]]
    assert len(before[untuned["name"]]) == 4
    assert untuned["records_found"] is False and untuned["best_us"] is None, untuned
    _applied_only_its_own(small, before)
    assert program != setup["big_program"], "an untuned task makes another program than the 12-trial build's"

    # The same budget again, and its vm-bytecode twin: 0 trials, the same records, the same program.
    again_program, again = _build(_job(tmp, model, SMALL), model, url, tracker)
    assert again["trials_run"] == 0 and again["tasks"] == small["tasks"], again
    assert again_program == program
    _, twin = _build(_job(tmp, model, SMALL, executor="vm-bytecode"), model, url, tracker)
    assert twin["trials_run"] == 0 and twin["tasks"] == small["tasks"], twin


def test_a_larger_budget_continues_and_applies_the_best_of_all_it_accounts_for(setup: dict[str, Any]) -> None:
    tmp, model, url, tracker, hashes = (setup[k] for k in ("tmp", "model", "url", "tracker", "hashes"))
    _, more = _build(_job(tmp, model, MORE), model, url, tracker)
    assert more["trials_from_records"] == BIG and more["trials_run"] == MORE - BIG, more
    stored = _stored(url, hashes)
    assert sum(len(records) for records in stored.values()) == MORE
    # Every stored record is this budget's: each task applies the best of its whole history.
    for task in more["tasks"]:
        assert task["trials"] == len(stored[task["name"]]), (task, stored)
    _applied_only_its_own(more, stored)


# --- the view alone, over each kind of database a build tunes into (no farm, no search) ----------------


def _matmul() -> Any:
    import tvm
    from tvm import te

    a, b = te.placeholder((64, 64), name="A"), te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.mark.parametrize("kind", ["memory", "json", "sql"])
def test_the_view_holds_the_first_records_in_store_order(kind: str, tmp_path: Path) -> None:
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target

    from workers.tuning.database import BudgetView, SqlTuningDatabase, record_mean_s, stored_means, workload_hash

    mod, target = _matmul(), Target({"kind": "llvm", "num-cores": 2})
    db: Any = {
        "memory": lambda: ms.database.MemoryDatabase(),
        "json": lambda: ms.database.JSONDatabase(work_dir=str(tmp_path)),
        "sql": lambda: SqlTuningDatabase(f"sqlite:///{tmp_path / 'r.db'}", target=target, board_key="host"),
    }[kind]()
    workload = db.commit_workload(mod)
    # Stored in this order: 5 µs, a failed trial (MetaSchedule's 1e10 s stub), 3 µs, 1 µs.
    for factor, secs in ((2, 5e-6), (4, 1e10), (8, 3e-6), (16, 1e-6)):
        sch = tvm.s_tir.Schedule(mod)
        sch.split(sch.get_loops(sch.get_sblock("C"))[0], [None, factor])
        db.commit_tuning_record(TuningRecord(sch.trace, workload, [secs], target))
    if kind == "json":  # read back from its files, as a later build opens it (sorted by time in memory)
        db = ms.database.JSONDatabase(work_dir=str(tmp_path))
        workload = db.commit_workload(mod)
    if kind != "sql":  # the SQL store counts in SQL (trials_covered); the others list their records
        assert stored_means(db, workload) == [pytest.approx(5e-6), None, pytest.approx(3e-6), pytest.approx(1e-6)]
    shash = workload_hash(mod)
    for first_n, want_us in ((0, None), (1, 5.0), (2, 5.0), (3, 3.0), (4, 1.0), (9, 1.0)):
        view = BudgetView(db, {shash: first_n})
        top = view.get_top_k(view.commit_workload(mod), 1)
        got = record_mean_s(top[0]) if top else None
        assert got == (None if want_us is None else pytest.approx(want_us * 1e-6)), (first_n, got)
        with target, view:  # what MetaScheduleApplyDatabase asks
            assert (view.query_tuning_record(mod, target, "main") is None) == (want_us is None), first_n
    assert BudgetView(db, {}).get_top_k(workload, 1) == [], "a workload the view does not name holds nothing"
    with pytest.raises(Exception, match="read-only"):
        BudgetView(db, {shash: 4}).commit_tuning_record(top[0])
