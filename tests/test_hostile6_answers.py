"""A sixth hostile user's findings about the answers (results ..., report, serve, tuning export): each test
provokes one on a real database and fails on the code before its fix."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db import models as m
from db.store import ResultStore
from tests.synthetic import T0, Result, add_sweep, noisy
from tests.test_dashboard import get, running
from tvmbench.cli import app
from tvmbench.dashboard.server import open_readonly


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def _error_line(code: int, out: str) -> str:
    """The one 'error:' line of a refused command (exit 2), no traceback."""
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in out, out
    return errors[0]


# --- 1: integers past SQLite's range were an OverflowError traceback -----------------------------------------


def test_integer_options_past_sqlite_range_are_answered_or_refused(store: ResultStore) -> None:
    add_sweep(store, "ovfl0001", [Result(samples=noisy(1.0)), Result(opt_level=0, samples=noisy(2.0))])
    for limit in ("99999999999999999999", "9223372036854775807"):
        for fmt in ((), ("--json",), ("--tsv",)):
            code, out = _cli("results", "list", "--limit", limit, *fmt, "--db", store.url)
            assert code == 0 and "OverflowError" not in out, out  # as `results query --limit`: every row
    code, out = _cli("results", "list", "--limit", "99999999999999999999", "--json", "--db", store.url)
    assert len(json.loads(out)) == 2
    for level in ("99999999999999999999", "-1", "4"):
        line = _error_line(*_cli("results", "query", "--opt-level", level, "--db", store.url))
        assert f"--opt-level {level}: must be 0 to 3" in line, line
    code, out = _cli("results", "query", "--opt-level", "0", "--json", "--db", store.url)
    assert code == 0 and [r["opt_level"] for r in json.loads(out)] == [0], out


# --- 2: two model names that clean up to one file name shared one PNG and one dashboard URL ------------------


def test_models_whose_names_clean_up_alike_get_a_plot_each(store: ResultStore, tmp_path: Path) -> None:
    results = [Result(model="a/b", samples=noisy(1.0)), Result(model="a?b", samples=noisy(5.0, seed=1))]
    add_sweep(store, "clsh0001", results)
    code, out = _cli(
        "report", "clsh0001", "-o", str(tmp_path / "r.html"), "--png", str(tmp_path / "png"), "--db", store.url
    )
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert code == 0 and "(2 plot(s))" in out and len(pngs) == 2, (out, pngs)  # before: one file, the last one
    assert all(p.startswith("latency-a_b-host-ms-hw-") for p in pngs), pngs
    reader = open_readonly(store.url)
    try:
        with running(reader) as base:
            status, _, body = get(f"{base}/api/sweep/clsh0001")
            plots = json.loads(body)["plots"]
            assert status == 200 and len({p["stem"] for p in plots}) == 2, plots
            drawn = []
            for plot in plots:
                status, kind, png = get(f"{base}/sweep/clsh0001/plot/{plot['stem']}.png")
                assert status == 200 and kind == "image/png", (plot, status)
                drawn.append(png)
            assert drawn[0] != drawn[1], "each URL draws its own model"
            status, _, page = get(f"{base}/sweep/clsh0001")
            sources = page.split("<img")[1:]
            assert status == 200 and len(sources) == 2 and sources[0] != sources[1], page
    finally:
        reader.close()


def test_plot_stems_joined_alike_from_different_parts_stay_apart() -> None:
    import pandas as pd

    from tvmbench.answers import html_report

    rows = []
    for model, board in (("a-b", "c"), ("a", "b-c")):
        rows.append({"status": "ok", "median": 1.0, "model": model, "board_key": board, "unit": "ms",
                     "emulated": False, "tvm_version": "0.27.0", "executor": "vm-compiled",
                     "tuning_budget": None})  # fmt: skip
    specs = html_report.plot_specs(pd.DataFrame(rows))
    assert len({s.stem for s in specs}) == 2, [s.stem for s in specs]  # both were "latency-a-b-c-ms-hw"


# --- 3: the dashboard compared a sweep with itself, which `results compare` refuses --------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A real dashboard (uvicorn over HTTP) on a database of two sweeps, labelled base and new."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = ResultStore(url)
    for i, (sweep_id, label) in enumerate((("cmps00000001", "base"), ("cmps00000002", "new"))):
        results = [Result(samples=noisy(4.0 + i, seed=i))]
        add_sweep(store, sweep_id, results, label=label, created_at=T0 + timedelta(days=i))
    store.close()
    reader = open_readonly(url)
    with running(reader) as base:
        yield base
    reader.close()


def test_the_dashboard_refuses_one_sweep_on_both_sides(served: str) -> None:
    for a, b in (("base", "base"), ("cmps00000001", "base")):
        status, _, body = get(f"{served}/api/compare?a={a}&b={b}")  # before: 200, every job "same"
        error = json.loads(body)["error"]
        assert status == 400 and "on both sides: give two different sweeps" in error, (status, body[:300])
        status, _, page = get(f"{served}/compare?a={a}&b={b}")
        assert status == 400 and "on both sides: give two different sweeps" in page, (status, page[:300])
    status, _, body = get(f"{served}/api/compare?a=base&b=nosuch")
    assert status == 404, body  # a sweep not found stays a 404
    assert get(f"{served}/api/compare?a=base&b=new")[0] == 200


# --- 4: `results show --sweep NAME` picked the newest of several sweeps without a word ---------------------


def test_results_show_says_which_sweep_a_shared_name_stood_for(
    store: ResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tvmbench.answers import overview

    monkeypatch.setattr(overview, "on_name_choice", None)  # as in a fresh process: no other command set it
    first = Result(samples=noisy(1.0))
    add_sweep(store, "shnm00000001", [first])
    add_sweep(store, "shnm00000002", [first], created_at=T0 + timedelta(days=1))
    # add_sweep names every sweep "synthetic": the name stands for both.
    code, out = _cli("results", "show", first.job_key[:12], "--sweep", "synthetic", "--db", store.url)
    assert code == 0 and "note: 'synthetic' names several sweeps; using the newest, shnm00000002" in out, out
    assert "the others: shnm00000001" in out
    code, out = _cli("results", "show", first.job_key[:12], "--sweep", "shnm00000001", "--db", store.url)
    assert code == 0 and "names several sweeps" not in out, out


# --- 5: --max-memory-mb inf (or 1e400) was taken: a bound that bounds nothing ------------------------------


def test_max_memory_mb_refuses_infinity(store: ResultStore) -> None:
    add_sweep(store, "infm0001", [Result(samples=noisy(1.0), peak_mem_mb=100.0)])
    for value in ("inf", "1e400", "-inf", "nan", "0"):
        line = _error_line(*_cli("results", "query", "--max-memory-mb", value, "--db", store.url))
        assert line.startswith("error: --max-memory-mb ") and "give the board's memory in MB" in line, line
    for option, command in (("--confidence", "best"), ("--z", "regressions"), ("--threshold", "releases")):
        line = _error_line(*_cli("results", command, option, "1e400", "--db", store.url))
        assert f"{option} inf: must be a finite number" in line, line
    code, out = _cli("results", "query", "--max-memory-mb", "512", "--json", "--db", store.url)
    assert code == 0 and len(json.loads(out)) == 1, out


# --- 6: `results show` cut its long lines at the console's 200 columns in a pipe ----------------------------


def test_results_show_keeps_long_lines_whole_in_a_pipe(store: ResultStore) -> None:
    error = "ONNX Runtime cannot run the model: " + "a very long reason, " * 15 + "the end"
    add_sweep(store, "wrap0001", [Result(status="model", error=error), Result(opt_level=0, samples=noisy(1.0))])
    memory = {"kind": "relax-static-plan", "params_bytes": 123456789, "planned_bytes": 98765432,
              "planned_allocations": 42, "unplanned_bytes": 876543210, "kernel_scratch_bytes": 1234567,
              "ram_bytes": 223456789, "dynamic_allocations": 3}  # fmt: skip
    with store._sessions.begin() as s:
        for build in s.query(m.Build):
            build.memory = memory
    code, out = _cli("results", "show", Result(status="model").job_key[:12], "--db", store.url)
    lines = out.splitlines()
    (status,) = [x for x in lines if x.startswith("  status model: ")]
    assert code == 0 and status.endswith("the end") and len(status) > 200, out  # before: cut at 200 columns
    (static,) = [x for x in lines if x.startswith("  static memory: ")]
    assert static.endswith("dynamic-size allocation(s) not counted") and len(static) > 200, out


# --- 7: `tuning export --append` of the same scope wrote every record again ---------------------------------


def test_tuning_export_append_skips_the_records_already_there(db_url: str, tmp_path: Path) -> None:
    from tests.test_tuning_hostile4 import RECORDS, _json_database

    (tmp_path / "plain").mkdir()
    plain = _json_database(tmp_path / "plain")
    done = CliRunner().invoke(app, ["tuning", "import", str(plain), "--board-key", "host", "--db", db_url])
    assert done.exit_code == 0, done.output
    out = tmp_path / "out"
    args = ["tuning", "export", str(out), "--board-key", "host", "--db", db_url]
    assert CliRunner().invoke(app, args).exit_code == 0
    records = (out / "database_tuning_record.json").read_text().splitlines()
    assert len(records) == RECORDS
    again = CliRunner().invoke(app, [*args, "--append"])
    assert again.exit_code == 0, again.output
    assert f"exported 0 record(s) (every record, failed trials too, {RECORDS} already there skipped)" in again.output
    assert (out / "database_tuning_record.json").read_text().splitlines() == records  # before: 6 lines
    as_json = CliRunner().invoke(app, [*args, "--append", "--json"])
    summary = json.loads(as_json.stdout)
    assert as_json.exit_code == 0 and (summary["records"], summary["skipped"]) == (0, RECORDS), as_json.output
    # A JSON database that holds part of the scope gets the rest, once.
    part = tmp_path / "part"
    assert CliRunner().invoke(app, ["tuning", "export", str(part), "--top", "1", *args[3:]]).exit_code == 0
    rest = CliRunner().invoke(app, ["tuning", "export", str(part), "--append", "--json", *args[3:]])
    summary = json.loads(rest.stdout)
    assert (summary["records"], summary["skipped"]) == (RECORDS - 1, 1), rest.output
    assert sorted((part / "database_tuning_record.json").read_text().splitlines()) == sorted(records)


def test_tuning_export_append_of_another_release_skips_the_records_already_there(
    store: ResultStore, tmp_path: Path
) -> None:
    from db import tuning_records
    from tvmbench.core.records import TuningScope

    scope = TuningScope({"kind": "llvm", "mcpu": "znver4"}, "host", "0.26.0")
    trace = [[["GetSBlock", [], ["conv", "main"], ["b0"]]], []]
    with store._sessions.begin() as s:
        workload = tuning_records.commit_workload(s, scope, "123", "AiUBAAAAAAB7ImlyIjogIjAuMjYuMCJ9")
        for seconds in (2e-5, 1e-5, 1e10):
            tuning_records.commit_record(s, workload, [trace, [seconds], scope.target, [["TENSOR", "float32", [1]]]])
    out = tmp_path / "export"
    args = ["tuning", "export", str(out), "--tvm-version", "0.26.0", "--db", store.url]
    assert CliRunner().invoke(app, [*args, "--top", "1"]).exit_code == 0
    again = CliRunner().invoke(app, [*args, "--append"])
    assert again.exit_code == 0 and "1 already there skipped" in again.output, again.output
    assert len((out / "database_tuning_record.json").read_text().splitlines()) == 3  # before: 4, one twice


# --- 8: a model named in CJK or emoji put matplotlib's missing-glyph warnings on the terminal ---------------


def test_a_name_with_glyphs_the_font_lacks_is_plotted_without_warnings(store: ResultStore, tmp_path: Path) -> None:
    add_sweep(store, "glyf0001", [Result(model="模型🙂", samples=noisy(1.0))])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out = _cli(
            "report", "glyf0001", "-o", str(tmp_path / "r.html"), "--png", str(tmp_path / "png"), "--db", store.url
        )
    said = [str(w.message) for w in caught if "Glyph" in str(w.message)]
    assert code == 0 and said == [] and "Glyph" not in out, said[:3]  # before: one per glyph


# --- 9: the sweep page took any ?order= and sorted ascending --------------------------------------------------


def test_an_unknown_sort_order_is_a_bad_request(served: str) -> None:
    status, _, body = get(f"{served}/api/sweep/cmps00000001?order=sideways")  # before: 200, ascending
    assert status == 400 and json.loads(body)["error"] == "?order='sideways': choose from asc, desc", body
    status, _, page = get(f"{served}/sweep/cmps00000001?order=sideways")
    assert status == 400 and "choose from asc, desc" in page, page[:300]
    for order in ("asc", "desc", ""):
        assert get(f"{served}/api/sweep/cmps00000001?sort=median&order={order}")[0] == 200, order
