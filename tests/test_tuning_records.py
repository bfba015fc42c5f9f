"""MetaSchedule tuning records in the results database, on SQLite and PostgreSQL (``db_url``).

Real MetaSchedule throughout: ``ms.tune_tir`` on a 64x64 matmul (replay-trace search, a handful of
trials, candidates built and timed in this process by tests/ms_inprocess.py), real ``JSONDatabase``
files for the export/import round trip. No farm and no Ray: the engine's tests cover those.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import tvm
import tvm_ffi
from sqlalchemy import create_engine, func, select, text
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord
from typer.testing import CliRunner

from db import models as m
from db.store import MIGRATIONS, ResultStore
from tests.ms_inprocess import TARGET, InProcessBuilder, InProcessRunner, matmul_module
from tvmbench.cli import app
from workers.tuning.database import SqlTuningDatabase, trials_covered, workload_hash
from workers.tuning.preload import preload_tensor_intrin

TRIALS = 8


@pytest.fixture(scope="module", autouse=True)
def _tensor_intrin() -> None:
    preload_tensor_intrin()  # ~20 s once, instead of minutes inside the first tune under pytest


def tune(database, work_dir: Path, trials: int = TRIALS, seed: int = 1):
    """A real MetaSchedule run on the 64x64 matmul into ``database`` (a Database, or "json")."""
    # MetaSchedule's logging setup lists the handlers of its logger by name; one left there by pytest's
    # log capture has none and breaks the second run in a process.
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in ms_logger.handlers if h.get_name() is None]:
        ms_logger.removeHandler(handler)
    return ms.tune_tir(
        matmul_module(),
        tvm.target.Target(TARGET),
        str(work_dir),
        max_trials_global=trials,
        num_trials_per_iter=trials,
        builder=InProcessBuilder(),
        runner=InProcessRunner(),
        database=database,
        strategy="replay-trace",  # seconds, where the evolutionary search takes a minute here
        cost_model="random",
        seed=seed,
    )


def count(store: ResultStore, model: type[m.Base]) -> int:
    with store._sessions() as s:
        return int(s.scalar(select(func.count()).select_from(model)))


def mean(record: TuningRecord) -> float:
    secs = [float(x) for x in record.run_secs]
    return sum(secs) / len(secs)


def test_tuning_lands_in_sql_and_is_found_again(db_url: str, tmp_path: Path) -> None:
    db = SqlTuningDatabase(db_url, target=TARGET, board_key="host", model_name="matmul64", source="test")
    tune(db, tmp_path / "work")
    store = db.store
    assert count(store, m.TuningWorkload) == 1, "one task, one workload row"
    assert count(store, m.TuningRecord) == TRIALS, "every trial is a record"
    assert len(db) == TRIALS

    # A fresh instance (another process, another person) sees the same records.
    again = SqlTuningDatabase(db_url, target=TARGET, board_key="host")
    mod = matmul_module()
    assert again.has_workload(mod)
    workload = again.commit_workload(mod)
    assert count(store, m.TuningWorkload) == 1, "committing a known workload adds no row"
    top = again.get_top_k(workload, 3)
    assert 1 <= len(top) <= 3
    means = [mean(r) for r in top]
    assert means == sorted(means), "get_top_k is fastest first"
    with store._sessions() as s:
        best_sql = s.scalar(select(func.min(m.TuningRecord.mean_run_s)).where(m.TuningRecord.valid.is_(True)))
    assert means[0] == pytest.approx(best_sql, rel=1e-6)
    sch = again.query_schedule(mod, tvm.target.Target(TARGET), "main")
    assert sch is not None, "query_schedule (through the C++ base) finds the best record"
    assert not tvm_ffi.structural_equal(sch.mod, mod), "the schedule transforms the workload"
    assert again.query_ir_module(mod, tvm.target.Target(TARGET), "main") is not None

    # Another board key is another scope: nothing there.
    other = SqlTuningDatabase(db_url, target=TARGET, board_key="rpi4")
    assert not other.has_workload(mod)
    assert len(other) == 0
    covered = trials_covered(db_url, [mod], target=TARGET, board_key="host")
    assert covered == [{"workload_hash": workload_hash(mod), "trials": TRIALS, "valid": covered[0]["valid"],
                        "best_s": pytest.approx(best_sql)}]  # fmt: skip
    assert covered[0]["valid"] >= 1
    with store._sessions() as s:
        assert s.scalar(select(m.TuningWorkloadModel.model_name)) == "matmul64"
    for d in (db, again, other):
        d.close()


def _trace_of_split(factor: int):
    """A real schedule trace on the matmul: split the first loop by ``factor``."""
    sch = tvm.s_tir.Schedule(matmul_module())
    block = sch.get_sblock("C")
    i, _, _ = sch.get_loops(block)
    sch.split(i, [None, factor])
    return sch.trace


def test_top_k_order_validity_and_dedup(db_url: str) -> None:
    db = SqlTuningDatabase(db_url, target=TARGET, board_key="host")
    mod = matmul_module()
    workload = db.commit_workload(mod)
    assert db.commit_workload(mod).same_as(workload)
    target = tvm.target.Target(TARGET)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    times = {2: [3e-5], 4: [1e-5], 8: [1e10], 16: [2e-5, 2e-5], 32: None}
    for factor, secs in times.items():
        run_secs = None if secs is None else [tvm.tirx.FloatImm("float32", s) for s in secs]
        db.commit_tuning_record(TuningRecord(_trace_of_split(factor), workload, run_secs, target, args))
    # The same record again (a retried commit, a second import) is kept once.
    db.commit_tuning_record(
        TuningRecord(_trace_of_split(4), workload, [tvm.tirx.FloatImm("float32", 1e-5)], target, args)
    )
    assert len(db) == 5, "failed and unmeasured records are stored (they are trials spent), duplicates are not"
    top = db.get_top_k(workload, 10)
    assert [round(mean(r) * 1e6) for r in top] == [10, 20, 30], "valid records only, fastest first"
    assert db.get_top_k(workload, 1)[0].trace.as_json()[1] == top[0].trace.as_json()[1]
    assert db.get_top_k(workload, 0) == []
    with pytest.raises(Exception, match="top_k"):
        db.get_top_k(workload, -1)
    assert len(db.get_all_tuning_records()) == 5
    db.close()


def test_old_database_upgrades_in_place(db_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    engine = create_engine(db_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0004")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO models (sha256, name, source, size_bytes, inputs) VALUES ('a', 'old', 'x', 1, '[]')")
        )
    engine.dispose()
    store = ResultStore(db_url)  # migrates to head
    with store._sessions() as s:
        assert s.scalar(select(m.Model.name)) == "old", "rows of the old schema survive the upgrade"
        assert s.scalar(select(func.count()).select_from(m.TuningRecord)) == 0
        # the new builds columns exist (this SELECT fails on the old schema)
        assert s.scalar(select(func.count(m.Build.tuning_budget))) == 0
    store.close()


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def test_export_import_round_trip_with_json_database(db_url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    # 1. Records made by plain MetaSchedule into its own JSON files.
    plain = tmp_path / "plain"
    tune("json", plain)
    source = JSONDatabase(work_dir=str(plain))
    assert len(source) == TRIALS
    mod, target = matmul_module(), tvm.target.Target(TARGET)
    best_plain = source.query_tuning_record(mod, target, "main")

    # 2. Imported into the results database, twice: the second adds nothing.
    args = ["tuning", "import", str(plain), "--board-key", "host", "--model", "matmul64", "--db", db_url, "--json"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["new"] == TRIALS
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout) | {"scopes": None} == {
        "directory": str(plain), "records": TRIALS, "distinct": TRIALS, "new": 0, "workloads": 1, "scopes": None,
    }  # fmt: skip

    # 3. Exported again, reloaded by JSONDatabase: the same records, the same best schedule.
    out = tmp_path / "out"
    exported = runner.invoke(app, ["tuning", "export", str(out), "--board-key", "host", "--model", "matmul64",
                                   "--db", db_url, "--json"])  # fmt: skip
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout)["records"] == TRIALS
    reloaded = JSONDatabase(work_dir=str(out), allow_missing=False)
    assert len(reloaded) == TRIALS
    best = reloaded.query_tuning_record(mod, target, "main")
    assert mean(best) == pytest.approx(mean(best_plain))
    assert str(best.trace) == str(best_plain.trace), "the same schedule is the best"
    assert reloaded.query_schedule(mod, target, "main") is not None
    # Byte-compatible: the workload line is MetaSchedule's own, and so is every record line.
    assert _lines(out / "database_workload.json") == _lines(plain / "database_workload.json")
    assert sorted(_lines(out / "database_tuning_record.json")) == sorted(_lines(plain / "database_tuning_record.json"))

    # 4. Bad input: one line, exit 2, nothing written.
    again = runner.invoke(app, ["tuning", "export", str(out), "--board-key", "host", "--db", db_url])
    assert again.exit_code == 2 and "already holds" in again.output and "--append" in again.output
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = runner.invoke(app, ["tuning", "import", str(empty), "--board-key", "host", "--db", db_url])
    assert missing.exit_code == 2 and "database_workload.json" in missing.output
    nothing = runner.invoke(app, ["tuning", "export", str(tmp_path / "x"), "--board-key", "rpi4", "--db", db_url])
    assert nothing.exit_code == 2 and "no tuning records match" in nothing.output
    listed = runner.invoke(app, ["tuning", "list", "--db", db_url, "--json"])
    assert listed.exit_code == 0
    assert [(r["board_key"], r["records"]) for r in json.loads(listed.stdout)] == [("host", TRIALS)]
