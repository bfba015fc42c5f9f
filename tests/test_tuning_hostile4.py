"""A hostile user's findings on tuning records and the sweep's tuning progress, one test each.

The records are real MetaSchedule objects written by a real ``JSONDatabase`` (schedules of a 64x64 matmul
built by hand, no tuning run): `tuning import` / `export` read and write exactly what MetaSchedule does.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from tests.conftest import one_error_line
from tvmbench.cli import app

RECORDS = 3


def _json_database(directory: Path) -> Path:
    """A MetaSchedule work_dir holding RECORDS records of the matmul, each with its own target (TARGET)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

    from tests.ms_inprocess import TARGET, matmul_module

    mod = matmul_module()
    db = JSONDatabase(work_dir=str(directory))
    workload = db.commit_workload(mod)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    for i, factor in enumerate((2, 4, 8)[:RECORDS]):
        sch = tvm.s_tir.Schedule(mod)
        loop, _, _ = sch.get_loops(sch.get_sblock("C"))
        sch.split(loop, [None, factor])
        secs = [tvm.tirx.FloatImm("float32", (i + 1) * 1e-5)]
        db.commit_tuning_record(TuningRecord(sch.trace, workload, secs, tvm.target.Target(TARGET), args))
    return directory


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _json_database(tmp_path_factory.mktemp("plain"))


def _scopes(db_url: str) -> list[dict]:
    listed = CliRunner().invoke(app, ["tuning", "list", "--db", db_url, "--json"])
    assert listed.exit_code == 0, listed.output
    return json.loads(listed.stdout)


def test_export_chooses_between_module_equalities(db_url: str, plain: Path, tmp_path: Path) -> None:
    """Defect 1: two scopes that differ only in module equality could not be told apart by any option."""
    runner = CliRunner()
    for equality in ("structural", "anchor-block"):
        args = ["tuning", "import", str(plain), "--board-key", "host", "--module-equality", equality, "--db", db_url]
        done = runner.invoke(app, args)
        assert done.exit_code == 0, done.output
    both = runner.invoke(app, ["tuning", "export", str(tmp_path / "a"), "--board-key", "host", "--db", db_url])
    line = one_error_line(both)
    assert "2 scopes match" in line and "--module-equality" in line, line
    # The options that cannot separate these two are not offered.
    assert "--board-key" not in line.split("narrow it with")[1], line
    for equality in ("anchor-block", "structural"):
        out = tmp_path / equality
        args = ["tuning", "export", str(out), "--board-key", "host", "--module-equality", equality, "--db", db_url]
        done = runner.invoke(app, [*args, "--json"])
        assert done.exit_code == 0, done.output
        summary = json.loads(done.stdout)
        assert summary["module_equality"] == equality and summary["records"] == RECORDS
    bad = runner.invoke(app, ["tuning", "export", str(tmp_path / "b"), "--module-equality", "fuzzy", "--db", db_url])
    assert "structural, ignore-tensor, anchor-block" in one_error_line(bad)


def test_import_refuses_a_target_the_records_contradict(db_url: str, plain: Path) -> None:
    """Defect 2: --target was ignored; x86 records were stored under an arm board key, or silently "already
    stored". A --target the records contradict is refused, naming both, before anything is written."""
    runner = CliRunner()
    for preset in ("rpi4", "arm64-emu"):
        args = ["tuning", "import", str(plain), "--board-key", "host", "--target", preset, "--db", db_url]
        line = one_error_line(runner.invoke(app, args))
        assert f"not --target {preset}" in line and "num-cores=1" in line and "aarch64" in line, line
    assert _scopes(db_url) == [], "a refused import stores nothing"
    # A --target the records agree with is accepted (num-cores may be extra on the records' side).
    args = ["tuning", "import", str(plain), "--board-key", "host", "--target", '{"kind": "llvm"}', "--db", db_url]
    done = runner.invoke(app, [*args, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["new"] == RECORDS


def test_import_validates_the_tvm_version(db_url: str, plain: Path, tmp_path: Path) -> None:
    """Defect 2: --tvm-version banana was stored as scope "TVM banana", which no sweep ever meets."""
    runner = CliRunner()
    fresh = f"sqlite:///{tmp_path / 'never.db'}"
    for bad in ("banana", "", "0.27 .0"):
        args = ["tuning", "import", str(plain), "--board-key", "host", "--tvm-version", bad, "--db", fresh]
        line = one_error_line(runner.invoke(app, args))
        assert "is not a TVM release" in line, line
    assert not (tmp_path / "never.db").exists(), "refused before the database is made"
    args = ["tuning", "import", str(plain), "--board-key", "host", "--tvm-version", "0.26.0", "--db", db_url]
    assert runner.invoke(app, args).exit_code == 0
    assert [s["tvm_version"] for s in _scopes(db_url)] == ["0.26.0"]


def test_list_leaves_out_workloads_without_records(db_url: str, plain: Path) -> None:
    """Minor: a sweep cancelled before a task's first trial leaves its workload row (stored before the
    trials): `tuning list` counted it, a workload with nothing to export or reuse."""
    from tests.ms_inprocess import TARGET, matmul_module
    from workers.tuning.database import SqlTuningDatabase

    empty = SqlTuningDatabase(db_url, target=TARGET, board_key="cancelled", source="test")
    empty.commit_workload(matmul_module(32))  # what a cancelled build leaves: a workload, no record
    empty.close()
    assert _scopes(db_url) == [], "a scope of workloads without records is not listed"
    args = ["tuning", "import", str(plain), "--board-key", "cancelled", "--db", db_url]
    assert CliRunner().invoke(app, args).exit_code == 0
    rows = _scopes(db_url)
    assert [(r["board_key"], r["workloads"], r["records"]) for r in rows] == [("cancelled", 1, RECORDS)], rows


class _FakeTable:
    """The progress actor's stand-in: ``report.remote(...)`` lands in ``table`` (as the Ray actor's would)."""

    def __init__(self) -> None:
        from workers.tuning.progress import _ProgressTable

        self.actor = _ProgressTable()
        self.report = SimpleNamespace(remote=self.actor.report)


def test_progress_counts_trials_run_apart_from_stored_records() -> None:
    """Defect 3: a sweep ended with `built 7/5 ... trials 32/4016`: 8 trials had run, stored records were
    counted as trials, auto jobs counted at their 2000-trial cap, and parked builds were missing from the
    total. The sweep's own tally (orchestrator/scheduling/tuning_progress.py) sums the table into the real
    listener; the reporters are the real ones with the actor replaced by its class."""
    from orchestrator.scheduling.events import Progress, SweepOutcome
    from orchestrator.scheduling.tuning_progress import TuningProgress
    from tvmbench.cli.sweep import progress_detail
    from workers.tuning.progress import ProgressReporter

    seen: list[dict[str, int]] = []
    listener = Progress(SweepOutcome("s", True, 7), lambda _event, counts: seen.append(counts))
    fake = _FakeTable()
    # (budget, trials stored records cover, trials measured): fixed 8 and its twin, auto (cap 2000) and its twin.
    tuned = {"fixed": (8, 0, 8), "fixed-twin": (8, 8, 0), "auto": (2000, 0, 4), "auto-twin": (2000, 4, 0)}
    jobs = {key: SimpleNamespace(tuning=budget) for key, (budget, _, _) in tuned.items()}
    jobs |= {key: SimpleNamespace(tuning=0) for key in ("untuned", "untuned-bytecode", "onnxruntime")}
    tally = TuningProgress(listener)

    def finish(key: str, tuning: dict | None) -> None:  # what SweepRun does when a build comes back
        build = SimpleNamespace(tuning=tuning, reused_from=None)
        listener.on_build_done(jobs[key], build)
        tally.finished(key, build, jobs[key].tuning)

    listener.on_start(0, 5, 7)  # the two auto builds are parked (until = "onnxruntime"): not in the 5
    for key in ("untuned", "untuned-bytecode", "onnxruntime"):
        finish(key, None)
    for key, (budget, stored, measured) in tuned.items():
        reporter = ProgressReporter(None, key, budget)
        reporter._actor = fake
        reporter.report(stored)  # the stage's first report: what the stored records cover
        tally.report(fake.actor.snapshot())
        assert seen[-1]["trials_done"] <= 8 + 4, seen[-1]
        for n in range(1, measured + 1):
            reporter.report(stored + n)
        tally.report(fake.actor.snapshot())
        finish(key, {"budget": budget, "trials_run": measured, "trials_from_records": stored})
    assert all(c.get("built", 0) <= c["to_build"] for c in seen), seen
    last = seen[-1]
    assert (last["built"], last["to_build"]) == (7, 7)
    assert (last["trials_done"], last["trials_reused"]) == (12, 12), last
    detail = progress_detail(last)
    assert "trials run 12 (+12 from stored records)" in detail, detail
    assert "2000" not in detail and "4016" not in detail, detail


def test_file_progress_keeps_the_records_share(tmp_path: Path) -> None:
    """A toolchain child's progress file counts the trials it measured, its stored records' share apart."""
    from workers.tuning.progress import FileProgress, read_progress

    path = str(tmp_path / "progress.json")
    progress = FileProgress(path, 16)
    progress.report(6)
    progress.report(10)
    # The file holds the trials measured (4), so a parent whose first read comes after the last batch
    # still reports them all (it used to take its first read for the records' share: 0 trials run).
    assert read_progress(path) == (4, 16)
    assert json.loads(Path(path).read_text())["from_records"] == 6
    from workers.tuning.progress import ProgressReporter

    parent = ProgressReporter(None, "b", 16, from_records=0)
    parent.report(4)
    assert parent.from_records == 0
