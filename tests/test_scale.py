"""The scale benchmark at a small size: it fills, indexes, and every timed command returns rows."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from benchmarks.scale_results import fill, main
from db import models as m
from db.store import ResultStore


def test_scale_benchmark_small(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "scale.db"
    assert main(["--rows", "20000", "--db", str(db), "--json"]) == 0
    out = capsys.readouterr().out
    import json

    report = json.loads(out)
    assert report["runs"] == 20000 and report["jobs"] < 20000  # retries add runs to jobs
    for name, t in report["timings"].items():
        assert t["rows"] > 0, name
    store = ResultStore(f"sqlite:///{db}", migrate=False)
    with store._sessions() as s:
        assert s.scalar(select(func.count()).select_from(m.Run)) == 20000
    # the ranking query is answered from the covering index, not by reading the jobs table
    with store.engine.connect() as conn:
        plan = " ".join(
            str(r[-1])
            for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT model_name, board_key, sweep_id FROM jobs WHERE status = 'ok' "
                "GROUP BY model_name, board_key, sweep_id"
            )
        )
    assert "COVERING INDEX ix_jobs_rank" in plan, plan
    store.close()


def test_fill_is_reproducible(tmp_path: Path) -> None:
    counts = []
    for i in range(2):
        store = ResultStore(f"sqlite:///{tmp_path / f'{i}.db'}")
        counts.append(fill(store, 3000))
        store.close()
    assert counts[0] == counts[1] and counts[0]["runs"] == 3000
