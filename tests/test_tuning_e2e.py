"""Tuning records shared across sweeps, end to end: real Ray, the real local farm, MetaSchedule, SQLite.

One results database, three tuned sweeps of tiny MLPs (two matmul tasks each, random cost model,
small budgets), each build from an empty artifact cache so the tuning stage really runs again:
  1. the same sweep run again spends 0 trials: every trial is covered by stored records;
  2. a larger budget continues from the stored records and only runs the difference;
  3. another model with the same workloads (same shapes, other weights) reuses them.
Each sweep has its own label: the same file without one is the same sweep, whose finished job would
simply be skipped.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from sqlalchemy import func, select

from db import models as m
from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.scheduler import run_sweep
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.answers import query
from workers import model_zoo
from workers.artifacts import ArtifactCache

# Real tuning: about 10 minutes on a 2-core machine at load ~25 (a few on a quiet one), most of it the
# first search and the larger budget's.
pytestmark = pytest.mark.slow

BUDGET = 8
SWEEP = """
name = "tuned"
label = "{run}"
[[models]]
path = "{model}"
[[targets]]
preset = "host"
[axes]
executor = ["vm-compiled"]
opt_level = [2]
tuning = [{budget}]
[tuning]
cost_model = "random"
num_trials_per_iter = 8
[measure]
number = 2
repeat = 3
"""


def _tuned(
    tmp_path: Path, store: ResultStore, farm: LocalFarm, model: Path, budget: int, run: str
) -> tuple[dict, dict]:
    """Run a one-job tuned sweep (a new sweep: its own label) with a fresh artifact cache, so the build and
    its tuning stage run again; returns (the job's result row, its tuning)."""
    spec = load_spec(write_sweep(tmp_path, SWEEP.format(run=run, model=model, budget=budget), name=f"{run}.toml"))
    assert outcome_is_new(store, spec.sweep_id)
    outcome = run_sweep(spec, store, farm.tracker, ArtifactCache(tmp_path / f"artifacts-{run}"), health_checks=False)
    assert outcome.complete
    (row,) = query.results(store, spec.sweep_id)
    assert row["status"] == "ok", row["error"]
    build = query.job_detail(store, row["job_key"], spec.sweep_id)["build"]
    assert build["tuning"], "a tuned job records its tuning"
    return row, build["tuning"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, ray_local: None, local_farm: LocalFarm):
    tmp_path = tmp_path_factory.mktemp("tuning-e2e")
    for name, seed in (("mlp_a", 0), ("mlp_b", 7)):
        onnx.save(model_zoo.tiny_mlp(seed=seed), tmp_path / f"{name}.onnx")
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    first_row, first = _tuned(tmp_path, store, local_farm, tmp_path / "mlp_a.onnx", BUDGET, "first")
    yield tmp_path, store, first_row, first
    store.close()


def outcome_is_new(store: ResultStore, sweep_id: str) -> bool:
    """The sweep is not in the database yet (so its job really runs)."""
    return store.get_sweep(sweep_id) is None


def _workloads(store: ResultStore) -> list[tuple]:
    """The stored workloads (for failure messages)."""
    w = m.TuningWorkload
    with store._sessions() as s:
        return [tuple(r) for r in s.execute(select(w.id, w.workload_hash, w.target_key, w.board_key, w.tvm_version))]


def _records(store: ResultStore) -> int:
    with store._sessions() as s:
        return int(s.scalar(select(func.count()).select_from(m.TuningRecord)))


def test_first_run_stores_every_trial(shared) -> None:  # type: ignore[no-untyped-def]
    _, store, _, first = shared
    assert first["trials_from_records"] == 0
    assert first["trials_run"] == BUDGET
    assert first["database"] == "sql"
    assert _records(store) == BUDGET, "every measured candidate is a row in tuning_records"
    assert all(t["records_found"] for t in first["tasks"] if t["best_us"] is not None)


def test_same_sweep_again_spends_zero_trials(shared, local_farm: LocalFarm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, store, first_row, _ = shared
    before = _records(store)
    row, again = _tuned(tmp_path, store, local_farm, tmp_path / "mlp_a.onnx", BUDGET, "again")
    assert again["trials_run"] == 0, (again, _workloads(store))
    assert again["trials_from_records"] == BUDGET
    assert _records(store) == before, "nothing new to store"
    assert row["fingerprint"] == first_row["fingerprint"], "the same records give the same tuned program"


def test_larger_budget_continues_from_stored_records(shared, local_farm: LocalFarm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, store, _, _ = shared
    before = _records(store)
    _, more = _tuned(tmp_path, store, local_farm, tmp_path / "mlp_a.onnx", 2 * BUDGET, "more")
    assert more["trials_from_records"] == BUDGET, more
    assert more["trials_run"] == BUDGET, "only the difference is tuned"
    assert _records(store) == before + BUDGET


def test_another_model_with_the_same_workloads_reuses_them(shared, local_farm: LocalFarm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, store, _, _ = shared
    before = _records(store)
    _, other = _tuned(tmp_path, store, local_farm, tmp_path / "mlp_b.onnx", BUDGET, "other")
    assert other["trials_run"] == 0, other
    assert other["trials_from_records"] == BUDGET
    assert _records(store) == before
    with store._sessions() as s:
        models = set(s.scalars(select(m.TuningWorkloadModel.model_name)))
    assert models == {"mlp_a", "mlp_b"}, "the shared workloads are noted under both models"
