"""A hostile user's findings about the answers (results best / compare / regressions / list / query): each
test provokes one on a synthetic database (tests/synthetic.py) and fails on the code before its fix."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from tests.synthetic import T0, Result, add_sweep, noisy
from tvmbench.answers import ranking
from tvmbench.cli import app


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


# --- 1, 16: only ONNX Runtime passed, or nothing passed -------------------------------------------------


def _ort_only(store: ResultStore) -> None:
    """A sweep of executor = ["onnxruntime"] (two opt levels: the second reuses the first's program), and a
    model TVM cannot compile whose ONNX Runtime job passed, and one where everything failed."""
    add_sweep(
        store,
        "orto0001",
        [
            Result(model="mm32", executor="onnxruntime", opt_level=0, samples=noisy(0.0163, seed=1)),
            Result(model="mm32", executor="onnxruntime", opt_level=1, samples=noisy(0.0163, seed=1)),
            Result(model="odd", executor="onnxruntime", opt_level=0, samples=noisy(0.5, seed=2)),
            Result(model="odd", executor="vm-compiled", status="model", error="TVM cannot import Foo"),
            Result(model="nan_max", executor="vm-bytecode", status="wrong-result", samples=noisy(0.1)),
        ],
        label="ox",
    )


def test_best_with_only_onnxruntime_passing_says_no_tvm_configuration_passed(store: ResultStore) -> None:
    _ort_only(store)
    rows = {r["model"]: r for r in ranking.best(store)}  # used to raise KeyError: 'model'
    assert set(rows) == {"mm32", "odd", "nan_max"}
    for model in ("mm32", "odd"):
        assert rows[model]["no_tvm"] and rows[model]["best"] is None
        assert rows[model]["onnxruntime_median"] == pytest.approx(0.0163 if model == "mm32" else 0.5, rel=0.1)
        assert "no TVM configuration passed" in rows[model]["verdict"]
    assert rows["nan_max"]["no_tvm"] and "1 wrong-result" in rows["nan_max"]["verdict"]
    code, out = _cli("results", "best", "--db", store.url)
    assert code == 0, out
    assert "mm32 on host (ms): no TVM configuration passed the check; the onnxruntime baseline measured" in out
    assert "nan_max on host: no TVM configuration passed the check (1 wrong-result" in out
    code, out = _cli("results", "best", "--sweep", "ox", "--json", "--db", store.url)
    assert code == 0 and {r["model"] for r in json.loads(out)} == {"mm32", "odd", "nan_max"}


def test_report_and_dashboard_sweep_page_with_only_onnxruntime_passing(store: ResultStore, tmp_path) -> None:
    from tvmbench.answers import html_report
    from tvmbench.dashboard import views

    _ort_only(store)
    html_report.write_report(store, "ox", tmp_path / "ox.html")
    assert "no TVM configuration passed the check" in (tmp_path / "ox.html").read_text()
    page = views.sweep(store, "ox")
    assert {r["model"] for r in page["ranking"]} == {"mm32", "odd", "nan_max"}


def test_the_only_tvm_configuration_is_not_called_the_only_one_measured(store: ResultStore) -> None:
    add_sweep(
        store,
        "only0001",
        [
            Result(executor="onnxruntime", opt_level=0, samples=noisy(1.0, seed=1)),
            Result(executor="vm-compiled", samples=noisy(2.0, seed=2)),
        ],
    )
    (row,) = ranking.best(store)
    assert "the only configuration measured" not in row["verdict"]
    assert "the only TVM configuration that passed the check" in row["verdict"]


# --- 2: a sweep compared with itself; a name several sweeps share ----------------------------------------


def _two_runs_of_one_name(store: ResultStore) -> None:
    for n, sid in enumerate(("name0001aaaa", "name0002bbbb")):
        add_sweep(store, sid, [Result(samples=noisy(1.0, seed=n))], created_at=T0 + timedelta(hours=n))


def test_compare_refuses_a_sweep_against_itself(store: ResultStore) -> None:
    _two_runs_of_one_name(store)
    for a, b in (("synthetic", "synthetic"), ("synthetic", "name0002"), ("name0001", "name0001aaaa")):
        code, out = _cli("results", "compare", a, b, "--db", store.url)
        assert code == 2, out
        assert "on both sides: give two different sweeps (ids" in out and "ratio" not in out
    code, out = _cli("results", "compare", "name0001", "synthetic", "--db", store.url)
    assert code == 0, out


def test_a_name_of_several_sweeps_says_which_one_it_picked(store: ResultStore) -> None:
    _two_runs_of_one_name(store)
    note = "note: 'synthetic' names several sweeps; using the newest, name0002bbbb"
    for args in (("results", "list", "--sweep", "synthetic"), ("results", "best", "--sweep", "synthetic")):
        code, out = _cli(*args, "--db", store.url)
        assert code == 0 and note in out and "the others: name0001aaaa" in out, out
    code, out = _cli("results", "list", "--sweep", "name0001", "--db", store.url)  # an id: no note
    assert code == 0 and "note:" not in out


# --- 3, 8: tuned against untuned of the same release; the price of a speed-up ---------------------------


def _tuning(budget: int, tuning_s: float, **more: object) -> dict:
    return {"budget": budget, "trials_run": budget, "trials_from_records": 0, "tuning_s": tuning_s, **more}


def test_tuned_is_compared_with_the_untuned_build_of_its_own_release(store: ResultStore) -> None:
    add_sweep(
        store,
        "rel00001",
        [
            Result(tvm="0.26.0", samples=noisy(0.08, seed=1)),
            Result(tvm="0.27.0", samples=noisy(0.1007, seed=2)),
            Result(tvm="0.26.0", samples=noisy(0.0309, seed=3), tuning=_tuning(8, 8.0)),
            Result(tvm="0.27.0", samples=noisy(0.0306, seed=4), tuning=_tuning(8, 22.0)),
        ],
    )
    (row,) = ranking.best(store)
    by_release = {e["config"].split(" TVM ")[1].split()[0]: e for e in row["tuning"] if e["tuning_budget"]}
    assert by_release["0.26.0"]["untuned_median"] == pytest.approx(0.08, rel=0.05)  # was 0.27's 0.1007
    assert by_release["0.27.0"]["untuned_median"] == pytest.approx(0.1007, rel=0.05)


def test_minutes_per_speedup_only_for_a_real_speedup_of_the_builds_own_search(store: ResultStore) -> None:
    add_sweep(
        store,
        "cost0001",
        [
            Result(samples=noisy(1.00, rel=0.05, seed=1)),
            # 1.02x within 5 % noise: no price
            Result(samples=noisy(0.98, rel=0.05, seed=2), tuning=_tuning(8, 60.0)),
            # a real 2x, bought by its own search
            Result(executor="vm-bytecode", samples=noisy(1.0, seed=3)),
            Result(executor="vm-bytecode", samples=noisy(0.5, seed=4), tuning=_tuning(8, 60.0)),
            # a real 2x, by applying a twin's records (tuned in 0.4 s): not its own price
            Result(
                executor="vm-bytecode",
                samples=noisy(0.5, seed=5),
                tuning=_tuning(2000, 0.4, stopped_by="until", stop={"tuned_by": "4e3a585a03bafb67"}),
            ),
        ],
    )
    (row,) = ranking.best(store)
    entries = {(e["config"].split()[0], e["budget"]): e for e in row["tuning"]}
    noise = entries["vm-compiled", "8"]
    assert noise["speedup_vs_untuned"] == pytest.approx(1.02, abs=0.03) and not noise["speedup_significant"]
    assert noise["tuning_min_per_speedup"] is None  # was 1 min / 0.02 = 50
    own = entries["vm-bytecode", "8"]
    assert own["speedup_significant"] and own["tuning_min_per_speedup"] == pytest.approx(1.0, rel=0.05)
    twin = entries["vm-bytecode", "auto"]
    assert twin["records_from"] == "build 4e3a585a03ba" and twin["tuning_min_per_speedup"] is None
    code, out = _cli("results", "best", "--db", store.url, "--wide")
    assert code == 0 and "reused" in out


def test_results_show_takes_the_build_id_a_twin_message_names(store: ResultStore) -> None:
    from sqlalchemy import select

    from db import models as m

    add_sweep(store, "show0001", [Result(samples=noisy(1.0))])
    with store.read() as s:
        build = s.scalars(select(m.Job.build_key)).one()
    code, out = _cli("results", "show", build[:12], "--db", store.url)
    assert code == 0 and "model tiny_cnn" in out, out


# --- 4, 9: the headers say what the figures are --------------------------------------------------------


def test_best_by_first_inference_heads_its_columns_first_inference(store: ResultStore) -> None:
    add_sweep(
        store,
        "frst0001",
        [
            Result(executor="onnxruntime", opt_level=0, samples=noisy(1.0), first_ms=9.0),
            Result(samples=noisy(0.5), first_ms=3.0),
            Result(executor="vm-bytecode", samples=noisy(0.7), first_ms=4.0),
        ],
    )
    code, out = _cli("results", "best", "--metric", "first", "--wide", "--db", store.url)
    head = out.splitlines()[1]
    assert code == 0 and "first inference ms" in head and " median " not in head and "CI" not in head, out
    code, out = _cli("results", "best", "--metric", "first", "--tsv", "--db", store.url)
    (header,) = [line for line in out.splitlines() if line.startswith("model\t")]  # stderr is mixed in
    assert header.split("\t")[:6] == ["model", "board", "unit", "best", "first", "ort"]
    code, out = _cli("results", "best", "--wide", "--db", store.url)
    assert "ORT/this" in out and "×ORT" not in out
    assert "ORT/this: ONNX Runtime's time over this one's (> 1: faster than ONNX Runtime)" in out


# --- 5: nothing judged is not "no regressions" ---------------------------------------------------------


def test_regressions_with_too_little_history_say_so(store: ResultStore) -> None:
    add_sweep(store, "hist0001", [Result(samples=noisy(1.0))])
    add_sweep(store, "hist0002", [Result(samples=noisy(1.5, seed=1))], created_at=T0 + timedelta(hours=1))
    code, out = _cli("results", "regressions", "--db", store.url)
    assert code == 0 and "every latest result is within" not in out
    assert "not enough history to judge 1 latest result(s)" in out
    code, out = _cli("results", "regressions", "--all", "--json", "--db", store.url)
    assert json.loads(out)[0]["regressed"] is None
    code, out = _cli("results", "history", Result().job_key[:12], "--db", store.url)
    lines = [line.split() for line in out.splitlines() if line.startswith("hist000")]
    assert lines and all(cells[-2] == "-" for cells in lines), out  # regressed "-", not "no"


# --- 6: one sample a side is no evidence of "same" -----------------------------------------------------


def test_compare_with_one_sample_a_side_is_undecided_not_same(store: ResultStore) -> None:
    add_sweep(store, "once0001", [Result(samples=[1.0])], label="a")
    add_sweep(store, "once0002", [Result(samples=[0.647])], label="b", created_at=T0 + timedelta(hours=1))
    code, out = _cli("results", "compare", "a", "b", "--json", "--db", store.url)
    (row,) = json.loads(out)["rows"]
    assert row["verdict"] == "undecided (too few samples)", row
    code, out = _cli("results", "compare", "a", "b", "--db", store.url)
    assert code == 0 and "1 undecided (too few samples to test: use repeat >= 5)" in out


# --- 7: the tuning budget is a column -------------------------------------------------------------------


def test_tuning_shows_in_list_query_compare_and_history(store: ResultStore) -> None:
    results = [
        Result(samples=noisy(1.0)),
        Result(samples=noisy(0.5), tuning=_tuning(8, 6.0)),
        Result(samples=noisy(0.5), tuning=_tuning(2000, 6.0, stopped_by="plateau")),
        Result(executor="vm-bytecode", samples=noisy(0.5), tuning=_tuning(2000, 60.0)),  # a fixed 2000
    ]
    add_sweep(store, "tune0001", results, label="a")
    add_sweep(store, "tune0002", results, label="b", created_at=T0 + timedelta(hours=1))
    code, out = _cli("results", "list", "--sweep", "a", "--columns", "job,tuning", "--db", store.url)
    assert code == 0 and sorted(line.split()[1] for line in out.splitlines()[3:]) == ["2000", "8", "auto", "untuned"]
    code, out = _cli("results", "query", "--columns", "job_key,tuning", "--sweep", "a", "--db", store.url)
    assert code == 0 and "auto" in out, out
    code, out = _cli("results", "query", "--group-by", "tuning", "--json", "--db", store.url)
    assert {r["tuning"]: r["jobs"] for r in json.loads(out)} == {"untuned": 2, "8": 2, "auto": 2, "2000": 2}
    code, out = _cli("results", "compare", "a", "b", "--all", "--db", store.url)
    assert code == 0 and " tuning " in out.splitlines()[1] and " auto " in out, out
    code, out = _cli("results", "history", results[2].job_key[:12], "--db", store.url)
    assert "tuned auto on host" in out.splitlines()[0], out
