"""The auto budget for real: MetaSchedule tuning a tiny MLP (two matmul tasks) until a rule stops it.

Each stop reason once, made deterministic: a trial cap past the first round (so the gradient phase runs),
a tiny max_minutes, a plateau that any gain passes (gain = 1.0), a number of ms far above any candidate
(until), and a per-task cap that ends every task first (exhausted). The baseline's until rule, whose check
times ONNX Runtime beside the program, has a test of its own. These build through the VM builder with the
in-process candidate builder (no Ray) against the real local farm; the last test runs a whole sweep (Ray,
the farm, SQLite) where the auto build waits for the sweep's own onnxruntime job.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import onnx
import pytest

from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.plan import plan_jobs
from orchestrator.scheduler import run_sweep
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.answers import query
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.executors.registry import build_job
from workers.executors.requests import BuildRequest
from workers.tuning.stage import TuningEnv
from workers.tuning.stopping import STOP_REASONS

# Each build tunes for 15-40 s on 2 quiet cores; the sweep at the end a few minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SWEEP = """
name = "auto"
label = "{label}"
[[models]]
path = "{model}"
[axes]
executor = {executors}
tuning = ["auto"]
[tuning]
cost_model = "random"
num_trials_per_iter = {per_iter}
{rules}
[measure]
number = 2
repeat = 3
"""


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auto") / "mlp.onnx"
    onnx.save(model_zoo.tiny_mlp(), path)
    return path


def tuned(
    tmp_path: Path,
    farm: LocalFarm,
    model: Path,
    rules: str,
    baseline: dict | None = None,
    per_iter: int = 2,
    stored: int = 0,
    **env_options: Any,
) -> dict[str, Any]:
    """Build the auto job of a one-job sweep with ``rules``; its Build's tuning provenance.

    ``env_options``: more of the TuningEnv (``database``, ``tuned_by``); a build handed ``tuned_by``
    is checked for having searched nothing, the others for having tuned both tasks (``stored``: the trials
    stored records already covered).
    """
    text = SWEEP.format(label="", model=model, executors='["vm-compiled"]', rules=rules, per_iter=per_iter)
    (job,) = plan_jobs(load_spec(write_sweep(tmp_path, text)))
    env = TuningEnv(tracker=farm.tracker, builder="local", baseline=baseline, **env_options)
    # MetaSchedule's logging setup lists its logger's handlers by name; the ones pytest's log capture leaves
    # there have none and break the next tuning run in this process (as in tests/test_tuning_records.py).
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in ms_logger.handlers if h.get_name() is None]:
        ms_logger.removeHandler(handler)
    build, data = build_job(BuildRequest(job, model.read_bytes(), tuning_env=env))
    assert build.ok and data, build.error
    assert "MetaScheduleApplyDatabase" in build.pass_trace
    t = build.tuning
    assert t is not None and t["stopped_by"] in STOP_REASONS, t
    found = all(x["records_found"] and x["trials"] >= 2 for x in t["tasks"])
    assert len(t["tasks"]) == 2 and found, (t["tasks"], t["errors"])
    if env.tuned_by is not None:
        assert t["trials_run"] == 0 and t["trials_from_records"] == sum(x["trials"] for x in t["tasks"]), t
        return t
    assert t["curve"] and sum(x["trials"] for x in t["tasks"]) == t["trials_run"] + stored, t
    assert t["trials_from_records"] == stored, t
    return t


def test_the_trial_cap_ends_it_past_the_first_round(tmp_path: Path, local_farm: LocalFarm, mlp: Path) -> None:
    t = tuned(tmp_path, local_farm, mlp, "max_trials = 10")
    # Two tasks x 2 in the first round, then the gradient scheduler's picks, 2 at a time, to the cap.
    assert (t["stopped_by"], t["stop"], t["trials_run"]) == ("max_trials", {"trials": 10, "max_trials": 10}, 10)
    assert t["budget"] == 10 and t["auto"]["max_trials"] == 10 and t["auto"]["until"] is None


def test_max_minutes_ends_it_after_the_first_round(tmp_path: Path, local_farm: LocalFarm, mlp: Path) -> None:
    t = tuned(tmp_path, local_farm, mlp, "max_trials = 64\nmax_minutes = 0.001")
    assert t["stopped_by"] == "max_minutes" and t["trials_run"] == 4, t  # the first round always runs
    assert t["stop"]["max_minutes"] == 0.001 and t["stop"]["minutes"] >= 0.001
    assert t["stop"]["minutes"] * 60 <= t["tuning_s"]


def test_a_build_handed_a_stop_applies_the_records_and_searches_no_further(
    tmp_path: Path, local_farm: LocalFarm, mlp: Path
) -> None:
    records = {"kind": "json", "path": str(tmp_path / "records")}
    rules = "max_trials = 64\nmax_minutes = 0.001"
    first = tuned(tmp_path, local_farm, mlp, rules, database=records)
    handed = {"build_key": "f" * 64, "stopped_by": first["stopped_by"], "stop": first["stop"]}
    twin = tuned(tmp_path, local_farm, mlp, rules, database=records, tuned_by=handed)
    assert twin["trials_from_records"] == first["trials_run"] and twin["stopped_by"] == "max_minutes"
    assert twin["stop"] == {**first["stop"], "tuned_by": "f" * 64}
    assert [x["best_us"] for x in twin["tasks"]] == [x["best_us"] for x in first["tasks"]]


def test_tasks_with_stored_records_skip_the_first_round(tmp_path: Path, local_farm: LocalFarm, mlp: Path) -> None:
    records = {"kind": "json", "path": str(tmp_path / "records")}
    first = tuned(tmp_path, local_farm, mlp, "max_trials = 6", database=records)
    # Both tasks have a time from the records: the search starts with the gradient's pick, one batch of
    # 2, where a first round would have spent 2 x 2 before any rule was asked.
    warm = tuned(tmp_path, local_farm, mlp, "max_trials = 2", stored=first["trials_run"], database=records)
    assert (warm["stopped_by"], warm["trials_run"]) == ("max_trials", 2), warm


def test_a_plateau_ends_it_once_its_window_is_measured(tmp_path: Path, local_farm: LocalFarm, mlp: Path) -> None:
    t = tuned(tmp_path, local_farm, mlp, "max_trials = 64\nplateau = { trials = 2, gain = 1.0 }")
    assert t["stopped_by"] == "plateau" and t["trials_run"] == 4, t
    stop = t["stop"]
    assert (stop["trials"], stop["gain"]) == (2, 1.0) and stop["gained"] < 1.0
    assert stop["to_ms"] <= stop["from_ms"] and stop["to_ms"] == t["curve"][-1][2]


def test_until_ends_it_once_the_program_measures_at_the_target(
    tmp_path: Path, local_farm: LocalFarm, mlp: Path
) -> None:
    # A number of ms far above any candidate: the check build times the program alone and it meets that.
    t = tuned(tmp_path, local_farm, mlp, "max_trials = 64\nuntil = 1e6")
    assert t["stopped_by"] == "until" and t["trials_run"] == 4, t
    stop = t["stop"]
    assert stop["until_ms"] == 1e6 and 0 < stop["estimate_ms"] <= stop["estimate_target_ms"] == 1e6
    assert t["auto"]["until_ms"] == 1e6 and "baseline_ms" not in stop
    # The estimate met the target, so the program was built and timed on the farm's board before stopping.
    (check,) = t["checks"]
    assert check["trial"] == 4 and check["estimate_ms"] == stop["estimate_ms"] and "error" not in check, check
    assert stop["met"] and stop["measured_ms"] == check["measured_ms"] and 0 < check["measured_ms"] <= 1e6
    assert 0 < check["minutes"] * 60 <= t["tuning_s"] and check["seconds"] > 0


def test_a_check_times_onnxruntime_beside_the_program_and_holds_it_to_that(
    tmp_path: Path, local_farm: LocalFarm, mlp: Path
) -> None:
    # The sweep's baseline says 1e6 ms, as if the board had been far slower when the sweep began: the estimate
    # meets it at once, and the check times the board's ONNX Runtime again, in turn with the program. That
    # median, not the stored one, is what the program must be at or below; whichever side wins on this
    # machine, the stop follows it.
    baseline = {"ms": 1e6, "source": "a baseline measured when the board was far slower"}
    t = tuned(tmp_path, local_farm, mlp, 'max_trials = 8\nuntil = "onnxruntime"', baseline)
    assert t["auto"]["baseline"] == baseline and t["auto"]["until_ms"] == 1e6
    first, *later = t["checks"]
    assert first["trial"] == 4 and first["target_ms"] == 1e6 and "error" not in first, first.get("error")
    assert 0 < first["baseline_ms"] < 1e3 and 0 < first["measured_ms"] < 1e3, first  # a tiny MLP: not 1e6 ms
    assert first["bar_ms"] == first["baseline_ms"]  # faster than the stored median: the bar
    print(f"check: program {first['measured_ms']:.4g} ms, onnxruntime beside it {first['baseline_ms']:.4g} ms")
    if first["measured_ms"] <= first["baseline_ms"]:
        assert (t["stopped_by"], t["trials_run"], later) == ("until", 4, []), t
        assert t["stop"]["met"] and t["stop"]["baseline_ms"] == first["baseline_ms"], t["stop"]
    else:  # missed: searched on to the cap, or to an estimate at the baseline timed beside it, rescaled
        assert t["trials_run"] > 4 and t["stopped_by"] in ("until", "max_trials"), t
        target = first["baseline_ms"] * first["estimate_ms"] / first["measured_ms"]
        assert all(c["target_ms"] == pytest.approx(target) for c in later[:1]), (target, later)


def test_a_check_build_that_misses_goes_on_from_the_records(
    tmp_path: Path, local_farm: LocalFarm, mlp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The board's word is the seam here (the test above times the program for real): the first check
    # measures the program far above the baseline, so the estimate's target drops a billion-fold and the
    # search goes on, past its first round, to the trial cap.
    from workers.tuning import check

    measured = iter([1e6 * 1e9])
    monkeypatch.setattr(check, "time_program", lambda *_args: check.Timing(next(measured)))
    baseline = {"ms": 1e6, "source": "a baseline far above any candidate"}
    t = tuned(tmp_path, local_farm, mlp, 'max_trials = 10\nuntil = "onnxruntime"', baseline)
    assert (t["stopped_by"], t["stop"], t["trials_run"]) == ("max_trials", {"trials": 10, "max_trials": 10}, 10), t
    (first,) = t["checks"]
    assert first["trial"] == 4 and first["measured_ms"] == 1e15 and first["target_ms"] == 1e6, first
    assert t["auto"]["until_ms"] == 1e6 and t["curve"][-1][0] == 10  # one curve across both searches


def test_a_check_build_that_fails_keeps_the_estimates_stop_and_says_why(
    tmp_path: Path, local_farm: LocalFarm, mlp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.tuning import check

    def board_gone(*_args: Any) -> float:
        raise RuntimeError("the board went away")

    monkeypatch.setattr(check, "time_program", board_gone)
    t = tuned(tmp_path, local_farm, mlp, 'max_trials = 64\nuntil = "onnxruntime"', {"ms": 1e6, "source": "s"})
    assert t["stopped_by"] == "until" and t["trials_run"] == 4, t
    assert t["stop"]["measured_ms"] is None and "the board went away" in t["stop"]["check_error"], t["stop"]
    assert t["checks"][0]["error"] == t["stop"]["check_error"]


def test_a_search_that_runs_out_says_exhausted(tmp_path: Path, local_farm: LocalFarm, mlp: Path) -> None:
    t = tuned(tmp_path, local_farm, mlp, 'max_trials = 64\ntrials_per_task = 2\nuntil = "onnxruntime"')
    assert (t["stopped_by"], t["stop"]) == ("exhausted", {"trials": 4, "max_trials": 64}), t
    # No baseline given: the until rule is inactive, and the provenance says so.
    assert t["auto"]["until_ms"] is None and "onnxruntime" in t["auto"]["inactive"]


def test_a_sweep_tunes_until_its_own_onnxruntime_median(
    tmp_path: Path, ray_local: None, local_farm: LocalFarm, mlp: Path
) -> None:
    # Two search workers asked: on this machine's boards the driver fences timings, so the search stays one.
    rules = 'until = "onnxruntime"\nmax_trials = 8\nsearch_workers = 2'
    executors = '["onnxruntime", "vm-compiled"]'
    text = SWEEP.format(label="e2e", model=mlp, executors=executors, rules=rules, per_iter=2)
    spec = load_spec(write_sweep(tmp_path, text))
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        outcome = run_sweep(spec, store, local_farm.tracker, ArtifactCache(tmp_path / "artifacts"), health_checks=False)
        assert outcome.complete and dict(outcome.statuses) == {"ok": 2}, outcome
        rows = {r["executor"]: r for r in query.results(store, spec.sweep_id)}
        ort, auto = rows["onnxruntime"], rows["vm-compiled"]
        t = query.job_detail(store, auto["job_key"], spec.sweep_id)["build"]["tuning"]
        # The build started after the baseline job was measured: it was given that job's median.
        assert t["auto"]["until_ms"] == pytest.approx(ort["median_ms"]), (t["auto"], ort["median_ms"])
        assert t["auto"]["baseline"]["source"] == f"onnxruntime job {ort['job_key'][:12]} of this sweep"
        print(f"auto sweep: stopped by {t['stopped_by']} {t['stop']}, onnxruntime {ort['median_ms']:.4g} ms")
        assert t["stopped_by"] in ("until", "max_trials"), t["stop"]
        if t["stopped_by"] == "until":  # on the board: a check build measured the program at the median
            assert t["stop"]["met"] and t["stop"]["measured_ms"] <= t["auto"]["until_ms"], t["stop"]
        assert auto["tuning_stopped_by"] == t["stopped_by"] and auto["tuning_budget"] == 8
        assert t["search"]["workers"] == 1 and "share this machine's cores" in t["search"]["why"], t["search"]
    finally:
        store.close()
