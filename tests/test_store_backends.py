"""The ResultStore suite, run against SQLite and PostgreSQL alike (the ``db_url`` fixture).

Records are built by hand here (no TVM, no Ray): these tests are about what the database keeps.
The concurrency test starts real processes that share one database, as drivers on several nodes do.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from dataclasses import replace

import pytest
from sqlalchemy import func, select

from db import models as m
from db.store import ResultStore
from db.writes import SweepBusy
from tvmbench.answers import query as reads
from tvmbench.core.records import Build, Job, MeasureSettings, ModelRef, Run
from workers.targets import PRESETS

TVM = "0.27.test"
MODEL = ModelRef(name="tiny", sha256="a" * 64, source="models/tiny.onnx", inputs=(("x", (1, 4), "float32"),))
OTHER_MODEL = ModelRef(name="other", sha256="b" * 64, source="models/other.onnx", inputs=(("x", (1, 4), "float32"),))


def make_jobs(model: ModelRef = MODEL) -> list[Job]:
    """Four jobs: two opt levels x two executors on the host preset."""
    return [
        Job(
            model=model,
            target=PRESETS["host"],
            executor=e,
            opt_level=o,
            pipeline="per-target",
            measure=MeasureSettings(),
        )
        for e in ("vm-bytecode", "vm-compiled")
        for o in (0, 2)
    ]


def begin(store: ResultStore, sweep_id: str = "sweep0000001", jobs: list[Job] | None = None) -> bool:
    jobs = jobs if jobs is not None else make_jobs()
    return store.begin_sweep(
        sweep_id,
        name="t",
        label="",
        source="name = 't'",
        source_path="sweep.toml",
        jobs=jobs,
        model_sizes={j.model.sha256: 100 for j in jobs},
        tvm_version=TVM,
    )


def ok_build(job: Job, fingerprint: str = "f" * 16) -> Build:
    return Build(
        build_key=job.build_key(TVM),
        status="ok",
        fingerprint=fingerprint,
        pass_trace=("FuseOps", "FuseTIR"),
        kernel_count=3,
        compile_s=0.5,
        artifact_sha256="c" * 64,
        artifact_size=1234,
        artifact_arch="x86_64",
        tvm_version=TVM,
        ffi_version="0.1.14",
        host="node-a/abc",
    )


def ok_run(job: Job, attempt: int = 1, board: str = "host@127.0.0.1:9000", **kw) -> Run:
    base = {
        "job_key": job.key,
        "attempt": attempt,
        "status": "ok",
        "board_id": board,
        "samples_ms": (1.0, 1.2, 1.1),
        "median_ms": 1.1,
        "mean_ms": 1.1,
        "std_ms": 0.08,
        "min_ms": 1.0,
        "max_ms": 1.2,
        "max_abs_err": 1e-7,
        "max_rel_err": 1e-6,
        "board_facts": {"arch": "x86_64"},
    }
    return Run(**{**base, **kw})


@pytest.fixture
def db(db_url: str):
    store = ResultStore(db_url)
    yield store
    store.close()


def count(store: ResultStore, model: type[m.Base]) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(model)).scalar_one()


def test_migrations_reach_head_and_are_idempotent(db_url: str) -> None:
    first = ResultStore(db_url)
    first.close()
    again = ResultStore(db_url)  # upgrading a database already at head is a no-op, not an error
    with again.engine.connect() as conn:
        version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one()
    again.close()
    assert version, "alembic_version is empty after upgrade"


def test_begin_sweep_is_idempotent(db: ResultStore) -> None:
    assert begin(db) is True
    db.finish_sweep("sweep0000001", "incomplete")
    assert begin(db) is False, "the same sweep begun twice must report that it existed"
    assert count(db, m.Sweep) == 1
    assert count(db, m.Job) == 4
    assert count(db, m.Model) == 1
    assert set(db.job_statuses("sweep0000001").values()) == {"pending"}
    assert db.get_sweep("sweep0000001").status == "running", "beginning again marks the sweep running"
    assert db.get_sweep("sweep00").id == "sweep0000001", "a prefix finds the sweep"


def test_two_sweeps_share_models(db: ResultStore) -> None:
    begin(db, "sweepA000000", make_jobs(MODEL))
    begin(db, "sweepB000000", make_jobs(MODEL) + make_jobs(OTHER_MODEL))
    assert count(db, m.Model) == 2
    assert count(db, m.Job) == 12
    assert [s.id for s in reads.sweeps(db)] == ["sweepB000000", "sweepA000000"]


def test_save_build_and_get_build(db: ResultStore) -> None:
    job = make_jobs()[0]
    begin(db)
    assert db.get_build(job.build_key(TVM)) is None
    failed = Build(build_key=job.build_key(TVM), status="build", error="LLVM died", tvm_version=TVM)
    db.save_build(job, failed)
    assert db.get_build(job.build_key(TVM)).status == "build"
    db.save_build(job, ok_build(job))  # a failed build may succeed later: the row is replaced
    got = db.get_build(job.build_key(TVM))
    assert got == ok_build(job), f"round trip changed the build: {got}"
    assert count(db, m.Build) == 1


def test_record_run_non_final_then_final(db: ResultStore) -> None:
    job = make_jobs()[0]
    begin(db)
    db.save_build(job, ok_build(job))
    assert db.next_attempt("sweep0000001", job.key) == 1
    waiting = Run(job_key=job.key, attempt=1, status="pending-device", error="no board of key host")
    db.record_run("sweep0000001", waiting, final=False)
    assert db.job_statuses("sweep0000001")[job.key] == "pending-device"
    assert db.next_attempt("sweep0000001", job.key) == 2

    infra = ok_run(job, attempt=2, status="infra", error="board died", samples_ms=(), median_ms=None)
    db.record_run("sweep0000001", infra, final=False)
    assert db.job_statuses("sweep0000001")[job.key] == "pending-device", "an infra retry is not final"
    board = reads.boards(db)[0]
    assert (board.state, board.consecutive_failures) == ("suspect", 1)

    run_id = db.record_run("sweep0000001", ok_run(job, attempt=3), final=True)
    assert db.job_statuses("sweep0000001")[job.key] == "ok"
    again = db.record_run("sweep0000001", ok_run(job, attempt=3, median_ms=99.0), final=True)
    assert again == run_id, "writing the same attempt twice keeps the first row"
    assert count(db, m.Run) == 3
    assert reads.boards(db)[0].consecutive_failures == 0, "a good run clears the failure count"

    detail = reads.job_detail(db, job.key[:10])
    assert [r["attempt"] for r in detail["runs"]] == [1, 2, 3]
    assert [r["status"] for r in detail["runs"]] == ["pending-device", "infra", "ok"]
    assert detail["median_ms"] == pytest.approx(1.1), "the first write of attempt 3 is the one kept"
    assert detail["build"]["pass_trace"] == ["FuseOps", "FuseTIR"]
    assert detail["build"]["host"] == "node-a/abc"


def test_results_and_equivalent_programs(db: ResultStore) -> None:
    jobs = make_jobs()
    begin(db)
    for job in jobs:
        # opt_level 0 and 2 of one executor build the same program (same fingerprint)
        db.save_build(job, ok_build(job, fingerprint=job.executor.ljust(16, "0")[:16]))
    leader_b, follower_b = jobs[0], jobs[1]  # vm-bytecode at opt 0 and 2
    db.record_run("sweep0000001", ok_run(leader_b), final=True)
    db.record_run("sweep0000001", ok_run(follower_b, equivalent_to=leader_b.key), final=True)
    db.finish_job("sweep0000001", jobs[2].key, "build", "LLVM died")

    rows = {r["job_key"]: r for r in reads.results(db, "sweep0000001")}
    assert len(rows) == 4
    assert rows[leader_b.key]["status"] == "ok" and rows[leader_b.key]["median_ms"] == pytest.approx(1.1)
    assert rows[follower_b.key]["equivalent_to"] == leader_b.key
    assert rows[jobs[2].key]["status"] == "build" and rows[jobs[2].key]["error"] == "LLVM died"
    assert rows[jobs[3].key]["status"] == "pending" and rows[jobs[3].key]["median_ms"] is None
    assert rows[leader_b.key]["samples"] == [1.0, 1.2, 1.1]

    detail = reads.job_detail(db, leader_b.key)
    same = [s["job_key"] for s in detail["same_program_as"]]
    assert same == [follower_b.key], f"same program as: {same}"
    assert reads.job_detail(db, "f" * 20) is None


# --- several writers at once ---------------------------------------------------------------------


def _writer(url: str, barrier: multiprocessing.synchronize.Barrier, worker: int) -> None:
    """One 'driver': begin the shared sweep, save every build and record every job's run."""
    store = ResultStore(url)
    jobs = make_jobs()
    barrier.wait(timeout=60)
    # Another writer may be the sweep's live driver (refused: tests/test_driver_liveness.py); whether it still
    # is depends on when it exits, and the writes below must stay one row each either way.
    with contextlib.suppress(SweepBusy):
        begin(store, "sharedsweep1", jobs)
    for job in jobs:
        store.save_build(job, replace(ok_build(job), host=f"worker-{worker}"))
        store.record_run("sharedsweep1", ok_run(job, board=f"host@127.0.0.1:{9000 + worker % 2}"), final=True)
    store.close()


def _open(url: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait(timeout=60)
    ResultStore(url).close()


@pytest.mark.postgres
def test_concurrent_first_opens_migrate_once(pg_url: str) -> None:
    """Processes opening a fresh PostgreSQL database at once (a submitted driver and its submitter) all
    succeed: the migration is serialised, not raced into a duplicate alembic_version table."""
    ctx = multiprocessing.get_context("spawn")
    openers = 4
    barrier = ctx.Barrier(openers)
    procs = [ctx.Process(target=_open, args=(pg_url, barrier)) for _ in range(openers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * openers, "an opener failed (see its traceback above)"


def test_concurrent_writers_make_one_sweep(db_url: str) -> None:
    ResultStore(db_url).close()  # migrate once up front, as `tvmbench db upgrade` does for a team database
    ctx = multiprocessing.get_context("spawn")
    writers = 4
    barrier = ctx.Barrier(writers)
    procs = [ctx.Process(target=_writer, args=(db_url, barrier, i)) for i in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * writers, "a writer failed (see its traceback above)"

    store = ResultStore(db_url)
    try:
        assert count(store, m.Sweep) == 1
        assert count(store, m.Job) == 4, "duplicate job rows"
        assert count(store, m.Run) == 4, "duplicate run rows: one attempt per job expected"
        assert count(store, m.Build) == 4
        assert count(store, m.Board) == 2
        rows = reads.results(store, "sharedsweep1")
        assert {r["status"] for r in rows} == {"ok"}
        with store.engine.connect() as conn:
            finals = conn.execute(select(m.Job.final_run_id)).scalars().all()
        assert None not in finals and len(set(finals)) == 4
    finally:
        store.close()


def test_db_upgrade_command(db_url: str) -> None:
    from typer.testing import CliRunner

    from db.schema import head_revision
    from tvmbench.cli import app

    head = head_revision()
    result = CliRunner().invoke(app, ["db", "upgrade", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert f"created the tvmbench schema (revision {head})" in result.output
    store = ResultStore(db_url, migrate=False)
    try:
        assert count(store, m.Sweep) == 0, "the migrated schema has the sweeps table"
    finally:
        store.close()
    again = CliRunner().invoke(app, ["db", "upgrade", "--db", db_url])
    assert again.exit_code == 0 and "nothing to do" in again.output, again.output


def test_db_upgrade_says_which_revisions(tmp_path) -> None:
    """An older database: `db upgrade` names the revision it found and the one it reached."""
    from typer.testing import CliRunner

    from db.engine import make_engine
    from db.schema import head_revision
    from tests.test_migration_0005 import _migrate
    from tvmbench.cli import app

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    _migrate(engine, "0007")
    engine.dispose()
    result = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert result.exit_code == 0, result.output
    assert f"upgraded the schema from revision 0007 to {head_revision()}" in result.output
