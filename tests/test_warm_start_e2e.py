"""A warm start from the database, end to end: real Ray, the real local farm, MetaSchedule, xgb, SQLite.

One results database, three tuned sweeps:
  1. net A (small_convnet at 16x16, 8 channels) tuned: its records are the scope's training set;
  2. net B (24x24, 12 channels: the same operators, other shapes, so none of A's workloads) tuned warm:
     its cost model is trained on exactly what the store holds for the scope, and its convolutions,
     which have no records of their own, are seeded from A's: the adapted replay of the best record of
     a convolution of their shape class is in their first batch (deterministic: no latency is compared
     here; benchmarks/warm_start.py compares trials to a latency);
  3. net A again at another opt_level with another executor: the same workloads, so every trial is
     covered by A's records and nothing is trained or measured.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from sqlalchemy import select

from db import models as m
from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.scheduler import run_sweep
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.answers import query
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.tuning import seeding

# Real tuning with the xgb cost model: three searches of 16 trials (a few minutes on a quiet 2-core machine).
pytestmark = pytest.mark.slow

BUDGET = 16
PER_ITER = 8
SWEEP = """
name = "warm"
label = "{run}"
[[models]]
path = "{model}"
[[targets]]
preset = "host"
[axes]
executor = ["{executor}"]
opt_level = [{opt_level}]
tuning = [{budget}]
[tuning]
cost_model = "xgb"
num_trials_per_iter = {per_iter}
[measure]
number = 2
repeat = 3
"""


def _tuned(tmp_path: Path, store: ResultStore, farm: LocalFarm, model: str, run: str, **axes: object) -> dict:
    """A one-job tuned sweep of its own (a fresh artifact cache: the tuning stage really runs); its tuning."""
    values = {"executor": "vm-compiled", "opt_level": 2, **axes}
    text = SWEEP.format(run=run, model=tmp_path / f"{model}.onnx", budget=BUDGET, per_iter=PER_ITER, **values)
    spec = load_spec(write_sweep(tmp_path, text, name=f"{run}.toml"))
    outcome = run_sweep(spec, store, farm.tracker, ArtifactCache(tmp_path / f"artifacts-{run}"), health_checks=False)
    assert outcome.complete
    (row,) = query.results(store, spec.sweep_id)
    assert row["status"] == "ok", row["error"]
    return query.job_detail(store, row["job_key"], spec.sweep_id)["build"]["tuning"]


def _scope(store: ResultStore) -> dict[str, object]:
    """Per stored workload: its row, the models linked to it, its records in the order they were stored."""
    w, r, link = m.TuningWorkload, m.TuningRecord, m.TuningWorkloadModel
    with store._sessions() as s:
        out = {x.id: {"row": x, "models": set(), "records": []} for x in s.scalars(select(w))}
        for x in s.scalars(select(link)):
            out[x.workload_id]["models"].add(x.model_name)
        for x in s.scalars(select(r).order_by(r.id)):
            out[x.workload_id]["records"].append(x)
    return out


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, ray_local: None, local_farm: LocalFarm):
    tmp_path = tmp_path_factory.mktemp("warm-start")
    onnx.save(model_zoo.small_convnet(size=16, channels=8), tmp_path / "net_a.onnx")
    onnx.save(model_zoo.small_convnet(size=24, channels=12, seed=3), tmp_path / "net_b.onnx")
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    a = _tuned(tmp_path, store, local_farm, "net_a", "a")
    after_a = _scope(store)
    b = _tuned(tmp_path, store, local_farm, "net_b", "b")
    yield tmp_path, store, a, after_a, b
    store.close()


def test_the_cost_model_is_trained_on_what_the_scope_holds(warm) -> None:  # type: ignore[no-untyped-def]
    from workers.tuning.warm_start import PER_WORKLOAD, TOTAL

    _, _, a, after_a, b = warm
    assert a["warm_start"]["trained_on"] == 0, "nothing was stored before A"
    valid = {wid: sum(1 for x in w["records"] if x.valid) for wid, w in after_a.items()}
    valid = {wid: n for wid, n in valid.items() if n}
    assert valid, "A's search measured something"
    each = min(PER_WORKLOAD, TOTAL // len(valid))
    ws = b["warm_start"]
    assert ws["enabled"] is True and ws["note"] is None, ws
    assert ws["trained_on"] == sum(min(n, each) for n in valid.values()), (ws, valid)
    assert ws["workloads"] == len(valid)
    assert b["cost_model"] == "xgb" and b["trials_run"] == BUDGET


def test_a_workload_without_records_is_seeded_from_its_shape_class(warm) -> None:  # type: ignore[no-untyped-def]
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    _, store, _, after_a, b = warm
    seeded = b["warm_start"]["seeded"]
    assert seeded, b["warm_start"]
    for s in seeded:
        assert s["offered"] > 0 and s["accepted"] > 0 and 1 <= s["measured"] <= PER_ITER // 4, s
        assert s["best_seed_us"] is not None, "a seed ran"
        assert isinstance(s["ranked"], bool), s
    scope = _scope(store)

    def workload(row: m.TuningWorkload) -> Workload:
        return Workload.from_json([row.workload_hash, row.mod_b64])

    def best(entry: dict, mod: Workload) -> list[TuningRecord]:
        valid = sorted((x for x in entry["records"] if x.valid), key=lambda x: (x.mean_run_s, x.id))
        return [
            TuningRecord.from_json([x.trace, x.run_secs, x.target, x.args_info], mod)
            for x in valid[: seeding.SEEDS_PER_NEIGHBOUR]
        ]

    b_ids = [wid for wid, w in scope.items() if "net_b" in w["models"] and w["records"]]
    checked = 0
    for wid in b_ids:
        mod = workload(scope[wid]["row"])
        mine = seeding.shape_class(mod.mod)
        # Who could have lent it seeds: A's workloads of its class, and B's tuned before it (stored earlier).
        lenders = [
            (lid, workload(scope[lid]["row"]))
            for lid in scope
            if lid != wid
            and scope[lid]["records"]
            and (lid in after_a or scope[lid]["records"][-1].id < scope[wid]["records"][0].id)
        ]
        lenders = [(lid, w) for lid, w in lenders if seeding.shape_class(w.mod) == mine]
        if not lenders:
            continue
        first_batch = {
            str(TuningRecord.from_json([x.trace, x.run_secs, x.target, x.args_info], mod).trace.as_json(True))
            for x in scope[wid]["records"][:PER_ITER]
        }
        replays = []
        for lid, w in lenders:
            for record in best(scope[lid], w):
                for adapt in (True, False):
                    sch = seeding.replay(record.trace, mod.mod, adapt=adapt)
                    if sch is not None:
                        replays.append(str(sch.trace.as_json(True)))
        # Which of them: the trained cost model's favourites (rank_seeds), else the lenders' best first.
        assert first_batch & set(replays), f"no lender's best records, replayed, are in workload {wid}'s first batch"
        checked += 1
    assert checked >= 1 and checked == len(seeded), (checked, seeded)


def test_the_same_workloads_at_another_opt_level_and_executor_reuse_the_records(warm, local_farm: LocalFarm) -> None:  # type: ignore[no-untyped-def]
    tmp_path, store, _, _, _ = warm
    again = _tuned(tmp_path, store, local_farm, "net_a", "a-o3", executor="vm-bytecode", opt_level=3)
    assert again["trials_run"] == 0, again
    assert again["trials_from_records"] == BUDGET
    assert again["warm_start"] == {
        "enabled": True,
        "trained_on": 0,
        "workloads": 0,
        "note": "nothing left to tune",
        "seeded": [],
    }
