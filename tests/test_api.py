"""The Python API (`import tvmbench`) on a real sweep: real Ray, a real farm, SQLite; DataFrames out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import tvmbench
from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.spec import SpecError
from tests.conftest import write_sweep
from tvmbench.answers import query as reads
from tvmbench.answers.query import QueryError

SWEEP = """
name = "api"
[[models]]
path = "{models}/tiny_mlp.onnx"
[axes]
executor = ["vm-bytecode"]
opt_level = [0, 2]
[measure]
number = 2
repeat = 5
"""


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, ray_local: None, local_farm: LocalFarm):
    """The same sweep file run twice through the API (the second under a label), into one database."""
    tmp = tmp_path_factory.mktemp("api")
    path = write_sweep(tmp, SWEEP.format(models=models_dir))
    db = f"sqlite:///{tmp / 'r.db'}"
    events: list[str] = []
    first = tvmbench.run(path, db=db, tracker=local_farm.tracker, progress=lambda e, _c: events.append(e))
    second = tvmbench.run(path, db=db, tracker=local_farm.tracker, label="again")
    return path, db, first, second, events


def test_run_returns_the_sweep_id_and_its_table(two_runs) -> None:
    _path, db, first, _second, events = two_runs
    sweep_id, table = first  # unpacks as the README shows
    assert sweep_id == first.sweep_id and first.complete
    assert isinstance(table, pd.DataFrame) and len(table) == 2
    assert set(table["status"]) == {"ok"} and (table["median"] > 0).all()
    assert sorted(table["opt_level"]) == [0, 2]
    assert "measured" in events
    # The table is the database's: the same rows `results list --json` prints.
    stored = reads.results(ResultStore(db, read_only=True), sweep_id)
    assert sorted(table["job_key"]) == sorted(r["job_key"] for r in stored)


def test_plan_is_the_dry_run_and_sees_what_is_done(two_runs) -> None:
    path, db, first, _second, _events = two_runs
    planned = tvmbench.plan(path, db=db)
    assert len(planned) == 2 and set(planned["sweep_id"]) == {first.sweep_id}
    assert set(planned["job_key"]) == set(first.table["job_key"])
    assert planned["built"].all()  # both builds are in the database now


def test_open_answers_best_query_compare_history(two_runs) -> None:
    _path, db, first, second, _events = two_runs
    results = tvmbench.open(db)
    sweeps = results.sweeps()
    assert {first.sweep_id, second.sweep_id} <= set(sweeps["sweep_id"])

    best = results.best(sweep=first.sweep_id)
    assert len(best) == 1 and best.iloc[0]["model"] == "tiny_mlp"
    assert best.iloc[0]["best_median"] == pytest.approx(first.table["median"].min())
    assert best.iloc[0]["best_job"] in set(first.table["job_key"])

    ok = results.query(sweep=second.sweep_id, status="ok")
    assert len(ok) == 2 and set(ok["sweep_label"]) == {"again"}
    assert results.query(sweep=second.sweep_id, opt_level=0)["opt_level"].tolist() == [0]

    compared = results.compare(first.sweep_id, second.sweep_id)
    assert len(compared) == 2 and set(compared["verdict"]) <= {"same", "regression", "improvement"}
    assert (compared["ratio"] > 0).all()
    assert "2 matched jobs" in compared.attrs["summary"]

    job = first.table["job_key"].iloc[0]
    history = results.history(job[:12])
    assert len(history) == 2 and history.attrs["job_key"] == job
    assert list(history["sweep_id"]) == [first.sweep_id, second.sweep_id]  # oldest first


def test_api_errors_are_the_library_s_one_line_errors(two_runs, tmp_path: Path) -> None:
    _path, db, *_ = two_runs
    results = tvmbench.open(db)
    with pytest.raises(TypeError, match=r"unknown filter.*modle.*valid: .*model"):
        results.query(modle="tiny_mlp")
    with pytest.raises(QueryError, match="no job"):
        results.history("ffffffffffff")
    with pytest.raises(SpecError, match=r"missing\.toml: no such sweep file"):
        tvmbench.plan(tmp_path / "missing.toml")


def test_import_tvmbench_is_cheap() -> None:
    """A notebook's first cell: no pandas, ONNX, TVM or Ray until a function needs them."""
    code = "import sys, tvmbench; print(sorted(m for m in ('pandas', 'onnx', 'tvm', 'ray') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.postgres
def test_a_database_that_refuses_is_a_store_error_without_its_password() -> None:
    """The driver's refusal (a real PostgreSQL server, an unknown role; a closed port) is the store's one-line
    error, as the CLI prints it, never psycopg's own exception with the password in it."""
    from db.store import StoreError
    from orchestrator.farm import free_port

    for url, says in (
        ("postgresql+psycopg://no_such_role:hunter22pw@127.0.0.1:5432/test", 'role "no_such_role" does not exist'),
        (f"postgresql+psycopg://someone:hunter22pw@127.0.0.1:{free_port()}/test", "Connection refused"),
    ):
        with pytest.raises(StoreError) as caught:
            tvmbench.open(url)
        message = str(caught.value)
        assert says in message and "***@127.0.0.1" in message and "hunter22pw" not in message, message
        assert "\n" not in message, message
