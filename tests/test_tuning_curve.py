"""The tuning curve: how it is computed and thinned, and `results show`, the report and the dashboard's job
page showing it, from builds written through a real SQLite store (synthetic rows, no TVM).

The curve of a real tuned build is checked in tests/test_tuning_farm.py.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from tests.synthetic import Result, add_sweep, noisy
from tvmbench.answers.html_report import write_report
from tvmbench.cli import app
from tvmbench.dashboard.server import open_readonly
from workers.tuning import stats as stats_module
from workers.tuning.stats import MAX_CURVE_POINTS, TuningStats, thin, tuning_curve

PNG = "\x89PNG"


def provenance(curve: list[list[float]] | None, budget: int = 64) -> dict[str, Any]:
    """A tuned build's provenance as the stage writes it; ``curve`` None: a build stored before curves."""
    t = {
        "budget": budget,
        "trials_run": budget,
        "trials_from_records": 0,
        "tasks": [
            {"name": "fused_conv2d_relu", "weight": 2, "flops": 4.7e6, "trials": budget - 16, "best_us": 700.0,
             "records_found": True},
            {"name": "fused_matmul", "weight": 1, "flops": 2.6e5, "trials": 16, "best_us": 200.0,
             "records_found": True},
        ],
        "failed_trials": {"build": 1},
        "errors": ["build: candidate 3: LLVM ERROR: something"],
        "tuning_s": 600.0,
        "build_s": 100.0,
        "board_wait_s": 10.0,
        "run_s": 300.0,
        "cost_model": "xgb",
        "seed": 0,
        "database": "sql",
    }  # fmt: skip
    if curve is not None:
        t["curve"] = curve
    return t


# The tuned run's per-kernel profile, as the board agent stores it: the conv 1.5 ms per run in the program
# against 2 x 700 µs alone in the search (1.07x), the matmul 0.5 against 0.2 (2.50x).
PROFILE = {"available": True, "repeat": 5, "run_ms": 2.2, "kernels": [
    {"name": "fused_conv2d_relu", "kind": "kernel", "calls_per_run": 2, "total_ms": 1.5},
    {"name": "fused_matmul", "kind": "kernel", "calls_per_run": 1, "total_ms": 0.5},
    {"name": "vm.builtin.alloc_storage", "kind": "builtin", "calls_per_run": 3, "total_ms": 0.1},
]}  # fmt: skip


def made_curve(n: int = 64) -> list[list[float]]:
    """A curve of ``n`` trials over two tasks, through the stage's own function."""
    trials = []
    for k in range(n):
        task = "fused_conv2d_relu" if k < n - 16 else "fused_matmul"
        # Every third candidate fails; the others get faster with the trial number, more or less.
        secs = None if k % 3 == 2 else (3e-3 if task == "fused_conv2d_relu" else 5e-4) / (1 + k % 7 + k / 8)
        trials.append((10.0 * (k + 1), task, secs))
    return tuning_curve(trials, {"fused_conv2d_relu": 2, "fused_matmul": 1}, {})


# --- the curve itself ---------------------------------------------------------------------------


def test_the_estimate_is_the_weighted_sum_of_each_tasks_best_so_far() -> None:
    trials = [
        (1.0, "conv", 4e-3),
        (2.0, "conv", None),  # a failed trial: a point, the estimate unchanged
        (3.0, "conv", 3e-3),
        (4.0, "conv", 5e-3),  # slower than the best: unchanged
        (5.0, "dense", 1e-3),
        (6.0, "dense", 2e-4),
    ]
    curve = tuning_curve(trials, {"conv": 2, "dense": 3}, {})
    # "dense" is not reached until trial 5: until then it counts at its first measured time (1 ms).
    assert [p[2] for p in curve] == pytest.approx([2 * 4 + 3 * 1, 11, 2 * 3 + 3, 9, 9, 2 * 3 + 3 * 0.2])
    assert [p[0] for p in curve] == [1, 2, 3, 4, 5, 6]
    assert [p[1] for p in curve] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_stored_records_set_where_a_task_starts_and_trials_count_on_from_them() -> None:
    trials = [(1.0, "conv", 4e-3), (2.0, "conv", 1e-3)]
    # conv's stored best (2 ms) beats its first candidate; "old" was tuned by an earlier build only.
    curve = tuning_curve(trials, {"conv": 1, "old": 1}, {"conv": 2e-3, "old": 5e-4, "never": None}, first_trial=40)
    assert [p[0] for p in curve] == [41, 42]
    assert [p[2] for p in curve] == pytest.approx([2.5, 1.5])


def test_no_successful_trial_is_no_curve() -> None:
    assert tuning_curve([(1.0, "conv", None), (2.0, "conv", None)], {"conv": 1}, {}) == []
    assert tuning_curve([], {"conv": 1}, {}) == []


def test_thinning_caps_the_points_and_keeps_the_first_and_the_last() -> None:
    points = [[k, float(k), 100.0 / k] for k in range(1, 10_001)]
    thinned = thin(points)
    assert len(thinned) == MAX_CURVE_POINTS
    assert thinned[0] == points[0] and thinned[-1] == points[-1]
    assert all(a[0] < b[0] for a, b in itertools.pairwise(thinned))
    gaps = {b[0] - a[0] for a, b in itertools.pairwise(thinned)}
    assert max(gaps) - min(gaps) <= 1, gaps  # evenly spaced
    assert thin(points[:MAX_CURVE_POINTS]) == points[:MAX_CURVE_POINTS]  # at the cap: untouched
    assert len(thin(points, cap=2)) == 2


def test_stats_order_a_batch_by_when_each_candidate_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = itertools.count(100.0)  # a fake clock: one tick per reading, so the order is certain
    monkeypatch.setattr(stats_module.time, "perf_counter", lambda: float(next(clock)))
    stats = TuningStats()  # started at 100
    stats.timed("/tmp/b/candidate.so")  # 101: b finished first
    stats.timed("/tmp/a/candidate.so")  # 102
    # The batch comes in MetaSchedule's order: a, b, then a candidate whose build failed (no artifact).
    stats.record_batch("conv", ["/tmp/a/candidate.so", "/tmp/b/candidate.so", None], [2e-3, 3e-3, None])  # 103
    assert stats.trials == [(1.0, "conv", 3e-3), (2.0, "conv", 2e-3), (3.0, "conv", None)]
    assert stats.curve({"conv": 1}, {}, 0) == [[1, 1.0, 3.0], [2, 2.0, 2.0], [3, 3.0, 2.0]]


def test_stats_thin_a_long_tuning_run() -> None:
    stats = TuningStats()
    for batch in range(40):
        stats.record_batch("conv", [None] * 64, [1e-3 / (1 + batch + i / 64) for i in range(64)])
    curve = stats.curve({"conv": 1}, {}, 0)
    assert len(curve) == MAX_CURVE_POINTS and curve[0][0] == 1 and curve[-1][0] == 40 * 64
    assert all(a[2] >= b[2] for a, b in itertools.pairwise(curve))


# --- showing it ---------------------------------------------------------------------------------


@pytest.fixture
def curve_store(store: ResultStore) -> dict[str, Any]:
    curve = made_curve()
    results = {
        "ort": Result(executor="onnxruntime", opt_level=0, samples=noisy(0.9, seed=1)),
        "untuned": Result(executor="vm-compiled", samples=noisy(12.0, seed=2)),
        "tuned": Result(
            executor="vm-compiled", samples=noisy(1.8, seed=3), tuning=provenance(curve), kernel_profile=PROFILE
        ),
        # Tuned before the curve was stored: its provenance has no "curve".
        "old": Result(executor="vm-bytecode", samples=noisy(2.5, seed=4), tuning=provenance(None, 32)),
    }
    add_sweep(store, "curve0001", list(results.values()), label="curves")
    return {"store": store, "curve": curve, "keys": {name: r.job_key for name, r in results.items()}}


def _show(store: ResultStore, key: str, *extra: str) -> str:
    result = CliRunner().invoke(app, ["results", "show", key, "--db", store.url, *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_results_show_prints_a_curve_summary_beside_the_measured_and_ort_medians(curve_store: dict) -> None:
    store, curve = curve_store["store"], curve_store["curve"]
    out = _show(store, curve_store["keys"]["tuned"])
    assert "tuning curve (best-so-far estimate" in out and f"{len(curve)} points stored" in out
    line = next(x for x in out.splitlines() if "trial 1 (" in x)
    trials = [int(t) for t in re.findall(r"trial (\d+) \(", line)]
    assert trials == [1, 17, 33, 48, 64]  # first, 25/50/75 %, last
    assert f"{curve[-1][2]:.4g} ms" in line and f"({curve[-1][1] / 60:.1f} min)" in line
    assert re.search(r"measured model median 1\.\d+ ms; onnxruntime 0\.\d+ ms", out), out
    # The profile read from the agent's shape, each tuned kernel beside calls x its best time alone.
    assert "fused_conv2d_relu  (tuned alone 1.4000 ms, 1.07x in the program)" in out
    assert "fused_matmul  (tuned alone 0.2000 ms, 2.50x in the program)" in out
    assert "2 tuned kernels: 2.000 ms in the program" in out and "1.600 ms as the search timed" in out


def test_results_show_json_has_the_whole_curve_and_its_summary(curve_store: dict) -> None:
    store, curve = curve_store["store"], curve_store["curve"]
    shown = json.loads(_show(store, curve_store["keys"]["tuned"], "--json"))
    assert shown["build"]["tuning"]["curve"] == curve
    summary = shown["tuning_curve"]
    assert summary["points_stored"] == len(curve) and [p["trial"] for p in summary["points"]] == [1, 17, 33, 48, 64]
    assert summary["final_estimate_ms"] == curve[-1][2]
    assert summary["measured_median_ms"] == pytest.approx(1.8, rel=0.05)
    assert summary["onnxruntime_median_ms"] == pytest.approx(0.9, rel=0.05)
    assert shown["kernel_alone_ms"] == {"fused_conv2d_relu": 1.4, "fused_matmul": 0.2}
    assert shown["kernel_profile"][0] == ["fused_conv2d_relu", 1.5]


def test_a_build_without_a_curve_shows_no_curve(curve_store: dict) -> None:
    store, keys = curve_store["store"], curve_store["keys"]
    out = _show(store, keys["old"])
    assert "tuning: budget 32 trials" in out and "tuning curve" not in out
    shown = json.loads(_show(store, keys["old"], "--json"))
    assert "tuning_curve" not in shown and "curve" not in shown["build"]["tuning"]
    assert "tuning curve" not in _show(store, keys["untuned"])


def test_a_tuned_job_without_an_ort_row_shows_the_curve_without_it(store: ResultStore) -> None:
    tuned = Result(executor="vm-compiled", samples=noisy(1.8, seed=3), tuning=provenance(made_curve(8)))
    add_sweep(store, "curve0002", [tuned])
    out = _show(store, tuned.job_key)
    assert "tuning curve" in out and "measured model median" in out and "onnxruntime" not in out
    assert json.loads(_show(store, tuned.job_key, "--json"))["tuning_curve"]["onnxruntime_median_ms"] is None


def test_report_plots_each_curve_in_the_tuning_section(curve_store: dict, tmp_path: Path) -> None:
    store = curve_store["store"]
    out, pngs = tmp_path / "report.html", tmp_path / "png"
    written = write_report(store, "curves", out, png_dir=pngs)
    page = out.read_text()
    tuning = page.split("<h2>Tuning</h2>")[1].split("<h2>")[0]
    tuned = curve_store["keys"]["tuned"][:12]
    assert "Tuning curves" in tuning and f"Tuning curve of job {tuned}" in tuning
    assert tuning.count("<img") == 1  # the old build has no curve to plot
    assert (pngs / f"curve-{tuned}.png").read_bytes().startswith(PNG.encode("latin-1"))
    assert page.count("<img") == written.plots  # the render check counts every image


def test_dashboard_job_page_plots_the_curve(curve_store: dict) -> None:
    from tests.test_dashboard import get, running

    store, keys = curve_store["store"], curve_store["keys"]
    reader = open_readonly(store.url)
    try:
        with running(reader) as base:
            status, _, page = get(f"{base}/job/{keys['tuned']}")
            assert status == 200
            section = page.split("<h2>Tuning</h2>")[1].split("<h2>")[0]
            assert 'id="curve-plot"' in section and f"/job/{keys['tuned']}/curve.png" in section
            assert "measured model median" in section and "ONNX Runtime" in section
            assert "fused_conv2d_relu" in section  # the rest of the provenance, the curve's points left out
            build = page.split("<h2>Build</h2>")[1].split("<h2>")[0]
            assert "fused_conv2d_relu" not in build  # shown once, in its own section
            kernels = page.split('id="kernels"')[1].split("</table>")[0]
            assert "tuned alone ms" in kernels and "1.07x" in kernels and "2.5x" in kernels
            status, kind, body = get(f"{base}/job/{keys['tuned']}/curve.png")
            assert status == 200 and kind == "image/png" and body[1:4] == "PNG", (status, kind, body[:200])
            status, _, page = get(f"{base}/job/{keys['old']}")
            assert status == 200 and 'id="curve-plot"' not in page and "budget" in page
            status, _, body = get(f"{base}/job/{keys['old']}/curve.png")
            assert status == 404 and "no tuning curve" in body
    finally:
        reader.close()


def test_the_curve_marks_each_check_and_the_baseline_timed_beside_it() -> None:
    from tvmbench.answers.tuning import curve_figure

    checks = [
        {"trial": 20, "minutes": 1.0, "measured_ms": 2.4, "baseline_ms": 2.0},
        {"trial": 50, "minutes": 3.0, "measured_ms": 1.9},  # an older check, or a board without ONNX Runtime
    ]
    fig = curve_figure(made_curve(), "t", 1.8, 0.9, checks)
    by_trial, by_time = fig.axes
    marks = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in by_trial.get_lines()}
    assert marks["check build (measured program)"] == ([20, 50], [2.4, 1.9])
    assert marks["ONNX Runtime beside the check"] == ([20], [2.0])
    beside = next(line for line in by_time.get_lines() if line.get_label() == "ONNX Runtime beside the check")
    assert list(beside.get_xdata()) == [1.0]  # the minutes panel places it by minutes
