"""Migration 0005 upgrades a database made by the schema before it (0004) in place, on both backends.

The old database is made by alembic at revision 0004 and filled through its own reflected tables (the
ORM classes already describe 0005), then the store opens it, which upgrades to head.
"""

from __future__ import annotations

from datetime import UTC, datetime

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, inspect, select

from db.store import MIGRATIONS, ResultStore, make_engine
from tvmbench.answers import query as reads
from tvmbench.core.records import Run

NEW_RUN_COLUMNS = {"warmup_runs", "stop_reason", "ci_rel", "sampling", "upload_bytes", "upload_s", "load_s"}
NEW_RUN_COLUMNS |= {"first_ms", "phases", "peak_mem_mb", "memory", "board_state", "warnings"}


def _migrate(engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def _old_database(url: str) -> None:
    """A results database at 0004 with one sweep, a job, its build and an ok run on a board."""
    engine = make_engine(url)
    _migrate(engine, "0004")
    meta = MetaData()
    meta.reflect(engine)
    assert "peak_mem_mb" not in meta.tables["runs"].c  # really the old schema
    now = datetime.now(UTC)
    t = meta.tables
    with engine.begin() as conn:
        conn.execute(
            t["sweeps"]
            .insert()
            .values(
                id="s1",
                name="old",
                label="",
                source_path="x.toml",
                source="",
                status="complete",
                job_count=1,
                host="h",
                tvm_version="0.27",
                created_at=now,
            )
        )
        conn.execute(
            t["models"]
            .insert()
            .values(sha256="m" * 64, name="tiny", source="t.onnx", size_bytes=10, inputs=[["x", [1, 4], "float32"]])
        )
        conn.execute(
            t["builds"]
            .insert()
            .values(
                build_key="b" * 64,
                model_sha256="m" * 64,
                target={"kind": "llvm"},
                executor="vm-bytecode",
                opt_level=2,
                pipeline="per-target",
                status="ok",
                pass_trace=[],
                pass_count=0,
                created_at=now,
            )
        )
        conn.execute(
            t["boards"]
            .insert()
            .values(
                id="host@127.0.0.1:1", key="host", emulated=False, state="ok", consecutive_failures=0, last_seen=now
            )
        )
        job_id = conn.execute(
            t["jobs"]
            .insert()
            .values(
                sweep_id="s1",
                job_key="k" * 64,
                model_sha256="m" * 64,
                model_name="tiny",
                target_name="host",
                board_key="host",
                executor="vm-bytecode",
                opt_level=2,
                pipeline="per-target",
                build_key="b" * 64,
                config={},
                status="ok",
                finished_at=now,
            )
            .returning(t["jobs"].c.id)
        ).scalar_one()
        run_id = conn.execute(
            t["runs"]
            .insert()
            .values(
                job_id=job_id,
                attempt=1,
                board_id="host@127.0.0.1:1",
                status="ok",
                unit="ms",
                samples=[1.0, 1.1, 0.9],
                median=1.0,
                mean=1.0,
                std=0.08,
                min=0.9,
                max=1.1,
                emulated=False,
            )
            .returning(t["runs"].c.id)
        ).scalar_one()
        conn.execute(t["jobs"].update().values(final_run_id=run_id))
    engine.dispose()


def test_old_database_upgrades_in_place_and_reads(db_url: str) -> None:
    _old_database(db_url)
    store = ResultStore(db_url)  # opening the store upgrades to head
    try:
        columns = {c["name"] for c in inspect(store.engine).get_columns("runs")}
        assert columns >= NEW_RUN_COLUMNS
        assert {c["name"] for c in inspect(store.engine).get_columns("builds")} >= {"params_bytes", "planned_bytes"}
        with store.engine.connect() as conn:
            head = ScriptDirectory(str(MIGRATIONS)).get_current_head()  # 0005 or a later migration
            assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one() == head

        # The old row keeps its figures and reads as "not measured" for everything new.
        (row,) = reads.results(store, "s1")
        assert row["median_ms"] == 1.0 and row["samples"] == [1.0, 1.1, 0.9]
        assert row["peak_mem_mb"] is None and row["first_ms"] is None and row["warnings"] == []
        run = reads.job_detail(store, "k", "s1")["runs"][0]
        assert run["stop_reason"] is None and run["memory"] is None and run["board_state"] is None

        # The upgraded database takes new runs with the new figures next to the old ones.
        store.record_run(
            "s1",
            Run(
                job_key="k" * 64,
                attempt=2,
                status="ok",
                board_id="host@127.0.0.1:1",
                samples_ms=(2.0,),
                median_ms=2.0,
                peak_mem_mb=120.5,
                memory={"available": True},
                warmup_runs=3,
                stop_reason="ci-reached",
                warnings=("governor 'powersave' on cpu 0",),
            ),
            final=False,
        )
        runs = reads.job_detail(store, "k", "s1")["runs"]
        assert [r["peak_mem_mb"] for r in runs] == [None, 120.5]
        assert runs[1]["warnings"] == ["governor 'powersave' on cpu 0"] and runs[1]["warmup_runs"] == 3

        # "Which configurations fit": the old run has no memory figure, so it is not claimed to fit.
        assert reads.query(store, reads.Filters(max_memory_mb=10_000)).empty
        assert reads.unknown_memory_count(store, reads.Filters()) == 1
        with store.engine.connect() as conn:
            assert conn.execute(select(reads.m.Run.id)).all()  # nothing was lost on the way
    finally:
        store.close()
