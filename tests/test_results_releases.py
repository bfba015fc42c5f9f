"""Answers across TVM releases: `results releases`, the release in every row, regressions naming the
release step, the report's Releases section and the dashboard's release boundaries.

Synthetic rows written through a real SQLite ResultStore (tests/synthetic.py): a sweep with a `tvm`
axis holds the same configuration once per release, under distinct job and build keys, each build
recording its own TVM. The samples are seeded, so every verdict below is the same on every run.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from tests.synthetic import T0, Result, add_sweep, noisy, row_by
from tvmbench.answers import regressions
from tvmbench.answers.releases import pass_change, releases, version_key
from tvmbench.cli import app

runner = CliRunner()
OLD, MID, NEW = "0.25.0.post1", "0.26.0", "0.27.0.post1"
TRACE_26 = ["relax.FuseOps", "relax.LegalizeOps", "tirx.StmtSimplify", "tirx.LowerIntrin"]
TRACE_27 = ["relax.FuseOps", "relax.LegalizeOps", "relax.FoldBatchnorm", "s_tir.StmtSimplify", "tirx.LowerIntrin"]


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _three_releases(store: ResultStore, step: float = 1.2) -> None:
    """One sweep over three releases: vm-compiled O3 takes ``step`` x the time from 0.26.0 to 0.27.0.post1
    (with two more kernels, a renamed and an added pass); vm-bytecode O0 is the same program throughout."""
    results = []
    for i, (tvm, center, kernels, trace) in enumerate(
        [(OLD, 5.0, 12, TRACE_26), (MID, 5.0, 12, TRACE_26), (NEW, 5.0 * step, 14, TRACE_27)]
    ):
        results.append(Result(executor="vm-compiled", opt_level=3, tvm=tvm, samples=noisy(center, n=20, seed=i),
                              kernel_count=kernels, pass_trace=trace))  # fmt: skip
        results.append(Result(executor="vm-bytecode", opt_level=0, tvm=tvm, samples=noisy(8.0, n=20, seed=10 + i),
                              kernel_count=9, pass_trace=TRACE_26, fingerprint="samefingerprint1"))  # fmt: skip
    add_sweep(store, "rel00001", results, label="releases", tvm_version=NEW)


def test_version_order_is_pep440() -> None:
    versions = ["0.27.0.post1", "0.28.dev0", "0.25.0.post1", "0.27.0", "0.26.0", "0.27.0rc1", "my-build"]
    assert sorted(versions, key=version_key) == [
        "my-build", "0.25.0.post1", "0.26.0", "0.27.0rc1", "0.27.0", "0.27.0.post1", "0.28.dev0",
    ]  # fmt: skip
    from tvmbench.answers.releases import _pep440_key  # the fallback without packaging agrees

    assert sorted(versions, key=_pep440_key) == sorted(versions, key=version_key)


def test_a_20_percent_step_names_the_release_and_exits_1(store: ResultStore) -> None:
    _three_releases(store, step=1.2)
    result = releases(store)
    assert result.releases == [OLD, MID, NEW] and result.configurations == 2
    compiled = [r for r in result.rows if r["executor"] == "vm-compiled"]
    assert [r["release"] for r in compiled] == [OLD, MID, NEW]  # oldest first
    step = row_by(result.rows, executor="vm-compiled", release=NEW)
    assert step["verdict"] == "regression" and step["previous"] == MID
    assert step["ratio"] == pytest.approx(1.2, rel=0.03) and step["ratio_lo"] > 1.1 and step["p_value"] < 0.001
    assert row_by(result.rows, executor="vm-compiled", release=MID)["verdict"] == "same"
    assert row_by(result.rows, executor="vm-compiled", release=OLD)["verdict"] is None  # nothing before it
    older = row_by(result.rows, executor="vm-compiled", release=OLD)
    assert older["ratio_to_newest"] == pytest.approx(1 / 1.2, rel=0.03) and older["ratio_to_newest_hi"] < 1
    assert older["median_lo"] < older["median"] < older["median_hi"]
    assert {r["verdict"] for r in result.rows if r["executor"] == "vm-bytecode"} == {None, "same"}
    assert result.failed and result.count("regression") == 1

    code, out = _cli("results", "releases", "--db", store.url)
    assert code == 1, out
    assert f"TVM {MID} -> {NEW}: regression, 1.19" in out, out
    assert "1 regression(s)" in out and f"({OLD}, {MID}, {NEW})" in out, out
    code, out = _cli("results", "releases", "--sweep", "releases", "--json", "--db", store.url)
    data = json.loads(out)
    assert code == 1 and data["releases"] == [OLD, MID, NEW] and data["failed"] is True
    assert [r["verdict"] for r in data["rows"]].count("regression") == 1
    assert all(r["ratio_lo"] is None for r in data["rows"] if r["previous"] is None)  # NaN is null in JSON


def test_noise_between_releases_is_no_regression_and_exits_0(store: ResultStore) -> None:
    _three_releases(store, step=1.0)  # every release draws from the same distribution (seeded)
    result = releases(store)
    assert result.releases == [OLD, MID, NEW]
    assert {r["verdict"] for r in result.rows} == {None, "same"}, [(r["release"], r["ratio"]) for r in result.rows]
    assert not result.failed
    code, out = _cli("results", "releases", "--db", store.url)
    assert code == 0 and "0 regression(s)" in out, out


def test_the_build_change_summary(store: ResultStore) -> None:
    _three_releases(store)
    result = releases(store)
    step = row_by(result.rows, executor="vm-compiled", release=NEW)
    assert step["kernels_change"] == "12 -> 14" and step["same_fingerprint"] is False
    assert step["passes_added"] == ["relax.FoldBatchnorm"] and step["passes_removed"] == []
    assert step["passes_renamed"] == [["tirx.StmtSimplify", "s_tir.StmtSimplify"]]
    assert "+1 (relax.FoldBatchnorm)" in step["passes"] and "4 -> 5 passes" in step["passes"]
    same = row_by(result.rows, executor="vm-bytecode", release=MID)
    assert same["kernels_change"] == "9" and same["same_fingerprint"] is True and "same passes" in same["passes"]
    code, out = _cli("results", "releases", "--wide", "--db", store.url)
    assert code == 1 and "12 -> 14" in out and "differs" in out, out
    assert "renamed tirx.StmtSimplify -> s_tir.StmtSimplify" in out, out


def test_pass_change_counts_distinct_passes() -> None:
    # The TIR pipeline runs once per kernel: more kernels alone is no pass added.
    change = pass_change(["a", "t.x", "t.x"], ["a", "t.x", "t.x", "t.x", "b.y"])
    assert change["added"] == ["b.y"] and change["removed"] == [] and change["summary"].startswith("3 -> 5 passes")
    compact = [{"repeat": 3, "passes": ["t.x", "t.y"]}]  # the stored compact form expands first
    assert pass_change(compact, ["t.x", "t.y"] * 3)["summary"] == "6 passes; same passes"


def test_a_release_that_breaks_the_build_is_broken_and_exits_1(store: ResultStore) -> None:
    results = [Result(tvm=MID, samples=noisy(5.0)), Result(tvm=NEW, status="build", error="TVMError: boom")]
    # A farm failure and a pending job say nothing about their release: left out, not "broken".
    results += [Result(opt_level=0, tvm=MID, samples=noisy(6.0)), Result(opt_level=0, tvm=NEW, status="infra"),
                Result(opt_level=1, tvm=NEW, status="pending")]  # fmt: skip
    add_sweep(store, "brk00001", results)
    result = releases(store)
    first, second = (r for r in result.rows if r["opt_level"] == 2)
    assert first["ratio_to_newest"] is None and second["verdict"] == "broken" and second["median"] is None
    assert [r["release"] for r in result.rows if r["opt_level"] != 2] == [MID] and result.left_out == 2
    assert result.count("broken") == 1 and "2 result(s) left out" in result.summary()
    code, out = _cli("results", "releases", "--db", store.url)
    assert code == 1 and f"broken ({MID}: ok, {NEW}: build)" in out, out
    code, out = _cli("results", "releases", "--sweep", "nosuch", "--db", store.url)
    assert code == 2 and len(out.strip().splitlines()) == 1 and "no sweep 'nosuch'" in out, out


def test_one_release_says_so_in_one_line(store: ResultStore) -> None:
    add_sweep(store, "one00001", [Result(samples=noisy(4.0)), Result(opt_level=0, samples=noisy(6.0))])
    code, out = _cli("results", "releases", "--db", store.url)
    assert code == 0 and len(out.strip().splitlines()) == 1 and "one TVM release (0.27.0)" in out, out


@pytest.mark.parametrize("width", [80, 120])
def test_table_fits_the_width_in_a_pipe(store: ResultStore, monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    _three_releases(store)
    monkeypatch.setenv("COLUMNS", str(width))
    code, out = _cli("results", "releases", "--db", store.url)
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model"))
    body = lines[header : lines.index(next(x for x in lines if x.startswith("left out for width")))]
    assert code == 1 and all(len(line) <= width for line in body), "\n".join(body)
    assert "\x1b[" not in out and all(h in body[0] for h in ("TVM", "median", "×newest", "vs before")), body[0]
    # A configuration's name shows once, on its first release's row; no placeholder on the others.
    assert not any(line.split()[:1] == ["-"] for line in body), "\n".join(body)
    assert sum(line.startswith("tiny_cnn") for line in body) == 2, "\n".join(body)


def test_rows_carry_their_builds_tvm_version(store: ResultStore) -> None:
    _three_releases(store)
    code, out = _cli("results", "list", "--json", "--db", store.url)
    rows = json.loads(out)
    assert code == 0 and sorted({r["tvm_version"] for r in rows}) == [OLD, MID, NEW]  # not the sweep's alone
    key = row_by(rows, executor="vm-compiled", tvm_version=MID)["job_key"]
    code, out = _cli("results", "show", key[:12], "--json", "--db", store.url)
    assert code == 0 and json.loads(out)["tvm_version"] == MID
    code, out = _cli("results", "best", "--json", "--db", store.url)
    (best,) = json.loads(out)
    assert code == 0 and best["tvm_version"] in (OLD, MID) and best["runner_up_tvm_version"] in (OLD, MID)
    assert f"TVM {best['tvm_version']}" in best["best"]  # several releases: the names say which
    add_sweep(store, "old00001", [Result(samples=noisy(4.0))], tvm_version="0.24.0", created_at=T0 - timedelta(1))
    code, out = _cli("results", "list", "--sweep", "old00001", "--json", "--db", store.url)
    assert json.loads(out)[0]["tvm_version"] == "0.24.0"


def _upgrade_history(store: ResultStore) -> str:
    """Five sweeps of one configuration (no tvm axis: one job key) on the installed TVM, which is upgraded
    before the fifth, which is 20 % slower. Returns the job key."""
    r = Result(samples=[])
    for i in range(5):
        tvm, center = (MID, 5.0) if i < 4 else (NEW, 6.0)
        add_sweep(store, f"hist000{i}", [Result(samples=noisy(center, seed=i))], label=f"h{i}",
                  created_at=T0 + timedelta(days=i), tvm_version=tvm)  # fmt: skip
    return r.job_key


def test_regressions_name_the_release_step(store: ResultStore) -> None:
    key = _upgrade_history(store)
    (found,) = regressions.find(store)
    assert found["regressed"] and found["release_step"] == f"TVM {MID} -> {NEW}"
    assert found["note"] == f"since TVM {MID} -> {NEW}"
    code, out = _cli("results", "regressions", "--wide", "--db", store.url)
    assert code == 0 and f"since TVM {MID} -> {NEW}" in out, out
    points = regressions.history(store, key)["points"]
    assert [p["release_boundary"] for p in points] == [None] * 4 + [f"TVM {MID} -> {NEW}"]
    assert points[-1]["regressed"] and points[-1]["release_step"] == f"TVM {MID} -> {NEW}"
    code, out = _cli("results", "history", key[:12], "--db", store.url)
    assert code == 0 and f"release boundary at sweep hist0004: TVM {MID} -> {NEW}" in out, out


def test_a_step_within_one_release_names_none(store: ResultStore) -> None:
    for i in range(5):
        add_sweep(store, f"same000{i}", [Result(samples=noisy(5.0 if i < 4 else 6.0, seed=i))],
                  created_at=T0 + timedelta(days=i), tvm_version=NEW)  # fmt: skip
    (found,) = regressions.find(store)
    assert found["regressed"] and found["release_step"] is None and found["note"] == ""


def test_report_has_a_releases_section_only_with_several_releases(store: ResultStore, tmp_path: Path) -> None:
    _three_releases(store)
    add_sweep(store, "one00001", [Result(samples=noisy(4.0))], label="single", created_at=T0 + timedelta(1))
    code, out = _cli("report", "releases", "-o", str(tmp_path / "multi.html"), "--db", store.url)
    page = (tmp_path / "multi.html").read_text()
    assert code == 0, out
    assert '<h2 id="releases">Releases</h2>' in page and "across TVM releases" in page
    assert f"TVM {OLD}, {MID}, {NEW} ·" in page
    section = page.split('<h2 id="releases">')[1].split("<h2>")[0]
    assert section.count("<img") == 1 and "12 -&gt; 14" in section and "regression" in section
    code, out = _cli("report", "single", "-o", str(tmp_path / "single.html"), "--db", store.url)
    page = (tmp_path / "single.html").read_text()
    assert code == 0 and "Releases</h2>" not in page and "across TVM releases" not in page


def test_dashboard_history_marks_the_release_boundary(tmp_path: Path) -> None:
    from tests.test_dashboard import get, running
    from tvmbench.dashboard.server import open_readonly

    url = f"sqlite:///{tmp_path / 'results.db'}"
    writer = ResultStore(url)
    key = _upgrade_history(writer)
    writer.close()
    reader = open_readonly(url)
    try:
        with running(reader) as base:
            status, _, page = get(f"{base}/history/{key}")
            assert status == 200 and f'data-release-boundary="TVM {MID} -&gt; {NEW}"' in page, page[-3000:]
            assert page.count('class="release-boundary"') == 1 and f"since TVM {MID} -&gt; {NEW}" in page
            status, kind, png = get(f"{base}/history/{key}/plot.png")
            assert status == 200 and kind == "image/png" and png
    finally:
        reader.close()


def test_filters_matching_nothing_and_tsv_keep_stdout_clean(store: ResultStore) -> None:
    _three_releases(store)
    code, out = _cli("results", "releases", "--model", "nope", "--db", store.url)
    assert code == 0 and out.strip() == "all sweeps: no results match", out
    result = CliRunner().invoke(app, ["results", "releases", "--tsv", "--db", store.url], catch_exceptions=False)
    lines = result.stdout.splitlines()
    assert lines[0].split("\t")[:4] == ["model", "config", "board", "release"], lines[0]
    assert all(line.count("\t") == lines[0].count("\t") for line in lines), result.stdout  # rows only
    assert "regression(s)" in result.stderr and "regression(s)" not in result.stdout


def test_the_python_api_answers_releases(store: ResultStore) -> None:
    import tvmbench

    _three_releases(store, step=1.2)
    df = tvmbench.open(store.url).releases()
    assert df.attrs["releases"] == [OLD, MID, NEW] and df.attrs["failed"] is True
    step = df[(df["executor"] == "vm-compiled") & (df["release"] == NEW)].iloc[0]
    assert step["verdict"] == "regression" and step["previous"] == MID, step.to_dict()
    assert "regression(s)" in df.attrs["summary"]
    only_same = tvmbench.open(store.url).releases(executor="vm-bytecode")
    assert only_same.attrs["failed"] is False and set(only_same["verdict"].dropna()) == {"same"}
