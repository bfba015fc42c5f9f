"""A whole sweep on real Ray, a real farm and SQLite: every job one final row, builds cached, programs shared."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from sqlalchemy import func, select

from db import models as m
from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.scheduler import run_sweep
from orchestrator.scheduling import sweep as scheduler_loop
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.answers import query as reads
from workers.artifacts import ArtifactCache

SWEEP = """
name = "e2e"
[[models]]
path = "{models}/tiny_cnn.onnx"
[[models]]
path = "{models}/two_outputs.onnx"
[axes]
executor = ["vm-bytecode", "vm-compiled"]
opt_level = [0, 2, 3]
[measure]
number = 2
repeat = 3
"""


@pytest.fixture(scope="module")
def outcome_and_store(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, ray_local: None, local_farm: LocalFarm
):
    tmp_path = tmp_path_factory.mktemp("sweep")
    spec = load_spec(write_sweep(tmp_path, SWEEP.format(models=models_dir)))
    store = ResultStore(f"sqlite:///{tmp_path / 'r.db'}")
    cache = ArtifactCache(tmp_path / "artifacts")
    events: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        # A heartbeat on every pass of the driver's loop (not every 5 s), so that it shows however fast the sweep.
        patch.setattr(scheduler_loop, "HEARTBEAT_S", 0.0)
        outcome = run_sweep(spec, store, local_farm.tracker, cache, progress=lambda e, _c: events.append(e))
    yield spec, outcome, store, cache, events
    store.close()


def test_sweep_end_to_end(outcome_and_store, local_farm: LocalFarm) -> None:
    spec, outcome, store, _, events = outcome_and_store
    assert outcome.jobs == 12 and outcome.complete
    assert dict(outcome.statuses) == {"ok": 12}, reads.results(store, spec.sweep_id)
    assert outcome.built == 12 and outcome.cached == 0
    # Measurement proceeds as builds finish, not after all of them.
    assert "measured" in events[: events.index("built") + 3] or events.index("measured") < len(events) - 1
    first_measured = events.index("measured")
    assert events[first_measured:].count("built") > 0, events

    rows = reads.results(store, spec.sweep_id)
    assert len(rows) == 12 and len({r["job_key"] for r in rows}) == 12
    for r in rows:
        for field in (
            "job_key",
            "model",
            "target",
            "board",
            "executor",
            "opt_level",
            "status",
            "median_ms",
            "max_abs_err",
            "fingerprint",
            "compile_s",
        ):
            assert r[field] is not None, (field, r)
        assert r["max_abs_err"] < 1e-4

    # opt_level 2 and 3 built the same program: measured once, the other points at it.
    by_cfg = {(r["model"], r["executor"], r["opt_level"]): r for r in rows}
    for model in ("tiny_cnn", "two_outputs"):
        for ex in ("vm-bytecode", "vm-compiled"):
            two, three = by_cfg[(model, ex, 2)], by_cfg[(model, ex, 3)]
            assert two["fingerprint"] == three["fingerprint"]
            assert {two["equivalent_to"], three["equivalent_to"]} - {None} in ({two["job_key"]}, {three["job_key"]})
            assert two["median_ms"] == three["median_ms"]
    cnn0, cnn2 = (
        reads.job_detail(store, by_cfg[("tiny_cnn", "vm-bytecode", 0)]["job_key"]),
        reads.job_detail(store, by_cfg[("tiny_cnn", "vm-bytecode", 2)]["job_key"]),
    )
    assert cnn0["build"]["pass_trace"] != cnn2["build"]["pass_trace"]
    assert cnn0["build"]["fingerprint"] != cnn2["build"]["fingerprint"]
    assert any(o["opt_level"] == 3 for o in cnn2["same_program_as"])
    # The board shares this machine's cores: it was timed with no build running.
    assert all(r["builds_in_flight"] == 0 for r in cnn2["runs"])
    with store._sessions() as s:
        board = s.scalars(select(m.Board)).one()
        assert board.key == "host" and board.facts["tvm_version"] == "0.27.0.post1"
    # This process drove the sweep, and its loop refreshed the heartbeat after begin_sweep wrote the first.
    sweep = store.get_sweep(spec.sweep_id)
    assert (sweep.driver_host, sweep.driver_pid) == (socket.gethostname(), os.getpid())
    assert sweep.heartbeat_at > sweep.created_at, (sweep.heartbeat_at, sweep.created_at)


def test_rerun_compiles_nothing_and_new_label_reuses_builds(outcome_and_store, local_farm: LocalFarm) -> None:
    spec, _, store, cache, _ = outcome_and_store
    again = run_sweep(spec, store, local_farm.tracker, cache)
    assert (again.new, again.built, again.measured, again.already_final) == (False, 0, 0, 12)

    relabelled = load_spec(Path(spec.source_path), label="second")
    second = run_sweep(relabelled, store, local_farm.tracker, cache)
    assert second.new and second.sweep_id != spec.sweep_id
    assert (second.built, second.cached) == (0, 12)
    assert dict(second.statuses) == {"ok": 12}
    with store._sessions() as s:
        assert s.scalar(select(func.count()).select_from(m.Build)) == 12
        assert s.scalar(select(func.count()).select_from(m.Job)) == 24
        # one final run per job
        assert s.scalar(select(func.count()).select_from(m.Job).where(m.Job.final_run_id.is_(None))) == 0


def test_identical_programs_skip_codegen_and_share_the_artifact(
    tmp_path: Path, models_dir: Path, ray_local: None, local_farm: LocalFarm
) -> None:
    """opt_level 1, 2 and 3 lower tiny_cnn to one program: one of them compiles it, two skip codegen."""
    text = (
        f'name = "reuse"\n[[models]]\npath = "{models_dir}/tiny_cnn.onnx"\n[axes]\nexecutor = ["vm-bytecode"]\n'
        "opt_level = [0, 1, 2, 3]\n[measure]\nnumber = 1\nrepeat = 2\n"
    )
    spec = load_spec(write_sweep(tmp_path, text))
    store = ResultStore(f"sqlite:///{tmp_path / 'r.db'}")
    cache = ArtifactCache(tmp_path / "artifacts")
    try:
        outcome = run_sweep(spec, store, local_farm.tracker, cache, health_checks=False)
        assert dict(outcome.statuses) == {"ok": 4}, reads.results(store)
        assert outcome.built == 4 and outcome.codegen_skipped == 2 and outcome.equivalent == 2
        rows = {r["opt_level"]: reads.job_detail(store, r["job_key"]) for r in reads.results(store, spec.sweep_id)}
        shared = {rows[o]["build"]["artifact_sha256"] for o in (1, 2, 3)}
        assert len(shared) == 1 and rows[0]["build"]["artifact_sha256"] not in shared
        assert cache.get(shared.pop()) is not None
        # Each trace lists its own pipeline, then the codegen passes that made the shared artifact.
        traces = [rows[o]["build"]["pass_trace"] for o in (1, 2, 3)]
        assert traces[0] == traces[1] == traces[2] and "tirx.MakePackedAPI" in traces[0]
        again = run_sweep(load_spec(write_sweep(tmp_path, text), label="again"), store, local_farm.tracker, cache)
        assert again.cached == 4 and again.built == 0 and dict(again.statuses) == {"ok": 4}
    finally:
        store.close()
