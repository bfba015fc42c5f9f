"""The auto budget (``tuning = ["auto"]``), fast: its stop rules, the sweep file, the keys, the plan, the answers.

No farm and no tuning here (the rules are pure functions; the answers read synthetic builds through a real
SQLite store). The auto budget stopping for each of its reasons with real MetaSchedule tuning is in
tests/test_tuning_auto.py; the scheduler parking an auto build on its baseline in tests/test_scheduler_rules.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from orchestrator.plan import plan_jobs, plan_rows
from orchestrator.spec import SpecError, parse_spec
from orchestrator.tuning import auto_baseline
from tests.conftest import one_error_line, write_sweep
from tests.synthetic import Result, add_sweep, noisy
from tvmbench.answers import ranking
from tvmbench.cli import app
from tvmbench.core.records import AutoBudget, canonical_hash
from workers import model_zoo
from workers.tuning import stopping
from workers.tuning.auto import AutoState
from workers.tuning.stats import TuningStats

BASE = '[[models]]\npath = "{model}"\n'
RULES = AutoBudget(until=1.0, max_minutes=15.0, plateau_trials=4, plateau_gain=0.02, max_trials=100)


def curve(*estimates: float) -> list[list[float]]:
    """A tuning curve with one point per estimate (ms), a second per trial."""
    return [[i + 1, float(i + 1), e] for i, e in enumerate(estimates)]


def check(rules: AutoBudget = RULES, **given: object) -> stopping.Stop | None:
    args = {"elapsed_s": 1.0, "trials": 1, "curve": curve(5.0), "complete": True, "target_ms": 1.0, **given}
    return stopping.check(rules, **args)  # type: ignore[arg-type]


# --- the rules ------------------------------------------------------------------------------------


def test_until_stops_at_or_below_the_target_once_every_task_has_a_time() -> None:
    assert check(curve=curve(3.0, 1.5)) is None
    assert check(curve=curve(3.0, 1.0)) == stopping.Stop("until", {"estimate_ms": 1.0, "until_ms": 1.0})
    # Before every task has a time the sum leaves tasks out: it may be low for that reason alone.
    assert check(curve=curve(0.5), complete=False) is None
    assert check(curve=curve(0.5), target_ms=None) is None  # no target (inactive): never


def test_plateau_compares_the_estimate_before_the_last_trials_with_now() -> None:
    assert check(curve=curve(9, 9, 9, 9), target_ms=None) is None  # 4 points: nothing 4 trials before yet
    stop = check(curve=curve(9.0, 5.0, 5.0, 5.0, 5.0, 4.95), target_ms=None)  # 5.0 four trials ago
    assert stop is not None and stop.rule == "plateau"
    assert stop.values == {"trials": 4, "gain": 0.02, "from_ms": 5.0, "to_ms": 4.95, "gained": pytest.approx(0.01)}
    assert check(curve=curve(9.0, 8.0, 7.0, 6.0, 5.0), target_ms=None) is None  # 44 % in 4 trials: going on


def test_time_and_trial_caps_and_which_rule_is_named_first() -> None:
    assert check(elapsed_s=899.0, target_ms=None) is None
    stop = check(elapsed_s=900.0, target_ms=None)
    assert stop == stopping.Stop("max_minutes", {"minutes": 15.0, "max_minutes": 15.0})
    assert check(trials=100, target_ms=None) == stopping.Stop("max_trials", {"trials": 100, "max_trials": 100})
    # Several hold at once: the goal reached is what the provenance names, not the clock.
    stop = check(curve=curve(9.0, 0.5, 0.5, 0.5, 0.5), elapsed_s=1e6, trials=1000)
    assert stop is not None and stop.rule == "until"


def test_the_time_rule_also_cuts_the_candidate_builds_in_flight_after_the_first_round() -> None:
    """The builders' ``stop``: true once ``max_minutes`` has passed and every task has a time."""

    def complete() -> bool:
        raise AssertionError("asked before the time was up")

    assert not stopping.time_is_up(RULES, elapsed_s=899.0, complete=complete)
    assert stopping.time_is_up(RULES, elapsed_s=900.0, complete=lambda: True)
    assert not stopping.time_is_up(RULES, elapsed_s=1e6, complete=lambda: False)  # the first round is never cut
    stats = TuningStats()
    state = AutoState(RULES, ["conv"], {"conv": 1}, stats, {"conv": None}, 0, None)
    stats.started -= 901.0  # the search began 15 minutes ago
    assert not state.time_is_up()  # no time for the conv yet
    stats.record_batch("conv", [None], [1e-3])
    assert state.time_is_up()


def test_a_search_that_ended_by_itself_says_why() -> None:
    kept = stopping.Stop("plateau", {"gained": 0.0})
    assert stopping.ended(RULES, kept, 12) is kept
    assert stopping.ended(RULES, None, 104).rule == "max_trials"  # MetaSchedule's own cap, passed by a batch
    assert stopping.ended(RULES, None, 12) == stopping.Stop("exhausted", {"trials": 12, "max_trials": 100})
    assert stopping.ended(RULES, None, 3, "TVMError: boom") == stopping.Stop(
        "error", {"error": "TVMError: boom", "trials": 3}
    )


def test_until_target_from_a_number_the_baseline_or_inactive_with_the_reason() -> None:
    assert stopping.until_target(AutoBudget(), None) == (None, {"until": None})
    assert stopping.until_target(AutoBudget(until=0.25), None) == (0.25, {"until": 0.25, "until_ms": 0.25})
    base = {"ms": 0.146, "source": "onnxruntime job abc of this sweep"}
    got = stopping.until_target(AutoBudget(until="onnxruntime"), base)
    assert got == (0.146, {"until": "onnxruntime", "until_ms": 0.146, "baseline": base})
    target, said = stopping.until_target(AutoBudget(until="onnxruntime"), {"why": "none stored"})
    assert target is None and said == {"until": "onnxruntime", "until_ms": None, "inactive": "none stored"}


def test_state_reads_the_measured_trials_and_the_stored_records() -> None:
    stats = TuningStats()
    stats.record_batch("conv", [None, None], [2e-3, 1e-3])  # two trials of conv: best 1 ms
    weights = {"conv": 2, "dense": 1}
    state = AutoState(AutoBudget(until=3.0), ["conv", "dense"], weights, stats, {"dense": 5e-4}, 8, 3.0)
    assert state.best_s() == [1e-3, 5e-4]
    stop = state.check(sent=2)  # 2 x 1 ms + 0.5 ms (stored) = 2.5 ms <= 3 ms
    assert stop is not None and stop.rule == "until" and stop.values["estimate_ms"] == pytest.approx(2.5)
    assert state.check(sent=3) is stop, "the first stop sticks"
    # The stored records alone: met before any trial when every task has one; else the search must run.
    assert AutoState(AutoBudget(), ["dense"], weights, stats, {"dense": 5e-4}, 0, 1.0).stored_stop().rule == "until"
    assert AutoState(AutoBudget(), ["conv", "dense"], weights, stats, {"dense": 5e-4}, 0, 9.0).stored_stop() is None


# --- the sweep file -------------------------------------------------------------------------------


def _spec(tmp_path: Path, extra: str):  # type: ignore[no-untyped-def]
    model = tmp_path / "m.onnx"
    if not model.exists():
        onnx.save(model_zoo.tiny_mlp(), model)
    return parse_spec(BASE.format(model=model) + extra, base=tmp_path)


AUTO = '[axes]\ntuning = [0, "auto"]\n[tuning]\n'


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        (AUTO + 'until = "tvm"\n', "tuning.until = 'tvm': use \"onnxruntime\""),
        (AUTO + "until = -1\n", "tuning.until = -1"),
        (AUTO + "until = true\n", "tuning.until = True"),
        (AUTO + "max_minutes = 0\n", "tuning.max_minutes = 0"),
        (AUTO + 'max_minutes = "15"\n', "tuning.max_minutes = '15'"),
        (AUTO + "max_minutes = 100000\n", "tuning.max_minutes = 100000"),
        (AUTO + "plateau = 64\n", "tuning.plateau = 64"),
        (AUTO + "plateau = { trials = 64 }\n", "tuning.plateau: give both trials and gain"),
        (AUTO + "plateau = { trials = 64, gain = 0.02, window = 3 }\n", "tuning.plateau: unknown key 'window'"),
        (AUTO + "plateau = { trials = 0, gain = 0.02 }\n", "tuning.plateau.trials = 0"),
        (AUTO + "plateau = { trials = 64, gain = 2 }\n", "tuning.plateau.gain = 2"),
        (AUTO + "max_trials = 0\n", "tuning.max_trials = 0"),
        (AUTO + "max_trials = 1.5\n", "tuning.max_trials = 1.5"),
        ("[axes]\ntuning = [0, 64]\n[tuning]\nuntil = 1.0\n", "tuning.until: only the auto budget stops by itself"),
        ('[axes]\ntuning = ["Auto"]\n', "axes.tuning: 'Auto' is not valid"),
        ('[axes]\ntuning = ["auto"]\nexecutor = ["onnxruntime"]\n', "needs a Relax VM executor"),
    ],
)
def test_bad_auto_settings_name_the_key(tmp_path: Path, extra: str, culprit: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec(tmp_path, extra)
    assert culprit in str(err.value) and "\n" not in str(err.value), err.value


def test_a_bad_auto_setting_is_exit_2_on_one_line(tmp_path: Path, home: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(model_zoo.tiny_mlp(), model)
    sweep = write_sweep(tmp_path, BASE.format(model=model) + AUTO + "plateau = { trials = 64, gain = -1 }\n")
    line = one_error_line(CliRunner().invoke(app, ["sweep", "plan", str(sweep)]))
    assert "tuning.plateau.gain = -1" in line, line


def test_defaults_mixing_and_keys(tmp_path: Path) -> None:
    fixed = _spec(tmp_path, "[axes]\ntuning = [0, 64]\n")
    mixed = _spec(tmp_path, '[axes]\ntuning = [0, 64, "auto"]\n')
    assert mixed.tuning_auto == AutoBudget() and fixed.tuning_auto is None
    assert (AutoBudget().max_minutes, AutoBudget().max_trials, AutoBudget().until) == (15.0, 2000, None)
    old = {(j.executor, j.tuning): j for j in plan_jobs(fixed)}
    new = {(j.executor, j.tuning, j.tuning_auto is not None): j for j in plan_jobs(mixed)}
    assert set(new) == {("vm-bytecode", 0, False), ("vm-bytecode", 64, False), ("vm-bytecode", 2000, True)}
    # A fixed budget's job and build keys do not change when "auto" joins the axis.
    for budget in (0, 64):
        assert new["vm-bytecode", budget, False].key == old["vm-bytecode", budget].key
        assert new["vm-bytecode", budget, False].build_key("v") == old["vm-bytecode", budget].build_key("v")
        assert "auto" not in (old["vm-bytecode", budget].build_config().get("tuning") or {})
    auto = new["vm-bytecode", 2000, True]
    config = auto.build_config()["tuning"]
    assert config["budget"] == "auto" and config["auto"]["max_trials"] == 2000
    assert auto.build_key("v") == canonical_hash({**auto.build_config(), "tvm": "v"})
    other = plan_jobs(_spec(tmp_path, '[axes]\ntuning = ["auto"]\n[tuning]\nmax_minutes = 5\n'))[0]
    assert other.build_key("v") != auto.build_key("v"), "the stop rules are part of an auto build's key"
    assert mixed.sweep_id != fixed.sweep_id and _spec(tmp_path, "[axes]\ntuning = [0, 64]\n").sweep_id == fixed.sweep_id
    ruled = _spec(tmp_path, AUTO + 'until = "onnxruntime"\nmax_minutes = 30\nplateau = { trials = 64, gain = 0.02 }\n')
    assert ruled.tuning_auto == AutoBudget(until="onnxruntime", max_minutes=30.0, plateau_trials=64, plateau_gain=0.02)


def test_plan_rows_say_auto(tmp_path: Path, store: ResultStore) -> None:
    rows = plan_rows(_spec(tmp_path, '[axes]\ntuning = [0, 64, "auto"]\n'), store)
    assert [r["tuning"] for r in rows] == [0, 64, "auto"]


def test_sweep_plan_shows_the_rules_and_warns_without_a_baseline(tmp_path: Path, home: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(model_zoo.tiny_mlp(), model)
    alone = write_sweep(tmp_path, BASE.format(model=model) + AUTO + 'until = "onnxruntime"\n', name="alone.toml")
    out = CliRunner().invoke(app, ["sweep", "plan", str(alone)]).output
    assert "budget auto: every task in one search, stopping at the first of: until onnxruntime (inactive)" in out
    assert 'warning: until = "onnxruntime" is inactive for this job: no ok onnxruntime result of m' in out, out
    with_ort = write_sweep(
        tmp_path,
        BASE.format(model=model) + '[axes]\nexecutor = ["onnxruntime", "vm-compiled"]\ntuning = [0, "auto"]\n'
        '[tuning]\nuntil = "onnxruntime"\nplateau = { trials = 64, gain = 0.02 }\n',
        name="with.toml",
    )  # fmt: skip
    result = CliRunner().invoke(app, ["sweep", "plan", str(with_ort)])
    assert result.exit_code == 0, result.output
    assert "until the median of onnxruntime job" in result.output and "warning" not in result.output
    assert "plateau: 64 trials gaining < 2 %, at most 2000 trials" in result.output
    jobs = json.loads(CliRunner().invoke(app, ["sweep", "plan", str(with_ort), "--json"]).output)["jobs"]
    plan = next(j for j in jobs if j["tuning"] == "auto")["tuning_plan"]
    assert plan["budget"] == "auto" and plan["baseline"]["source"].startswith("onnxruntime job")
    assert plan["tasks"] and all(t["trials"] is None for t in plan["tasks"]), "no task gets a share of its own"


# --- the answers --------------------------------------------------------------------------------------


def auto_tuning(stopped_by: str, stop: dict, cap: int = 2000) -> dict:
    """An auto build's provenance as the stage writes it."""
    return {
        "budget": cap, "trials_run": 40, "trials_from_records": 0,
        "tasks": [{"name": "fused_conv2d_relu", "weight": 1, "flops": 4.7e6, "trials": 40, "best_us": 120.0,
                   "records_found": True}],
        "failed_trials": {}, "errors": [], "tuning_s": 90.0, "build_s": 20.0, "board_wait_s": 5.0, "run_s": 10.0,
        "cost_model": "random", "seed": 0, "database": "sql", "curve": [[1, 2.0, 0.5], [40, 90.0, 0.12]],
        "auto": {"until": "onnxruntime", "until_ms": 0.15, "baseline": {"ms": 0.15, "source": "onnxruntime job "
                 "abc of this sweep"}, "max_minutes": 15.0, "plateau": {"trials": 16, "gain": 0.02}, "max_trials": cap},
        "stopped_by": stopped_by, "stop": stop,
    }  # fmt: skip


@pytest.fixture
def auto_store(store: ResultStore) -> ResultStore:
    plateau = {"trials": 16, "gain": 0.02, "from_ms": 0.125, "to_ms": 0.124, "gained": 0.008}
    results = [
        Result(executor="onnxruntime", opt_level=0, samples=noisy(0.15, seed=1)),
        Result(executor="vm-compiled", samples=noisy(4.0, seed=2)),
        Result(executor="vm-compiled", samples=noisy(0.2, seed=3),
               tuning=auto_tuning("until", {"estimate_ms": 0.12, "until_ms": 0.15})),
        Result(executor="vm-bytecode", samples=noisy(0.3, seed=4), tuning=auto_tuning("plateau", plateau)),
    ]  # fmt: skip
    add_sweep(store, "auto0001", results, label="auto")
    return store


def test_show_says_what_stopped_an_auto_build(auto_store: ResultStore) -> None:
    key = Result(executor="vm-compiled", tuning={"budget": 2000}).job_key
    result = CliRunner().invoke(app, ["results", "show", key[:12], "--db", auto_store.url])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "budget auto (until onnxruntime 0.15 ms (onnxruntime job abc of this sweep), at most 15 min" in out, out
    assert "stopped by until: kernel estimate 0.12 ms at or below 0.15 ms" in out
    detail = json.loads(CliRunner().invoke(app, ["results", "show", key[:12], "--json", "--db", auto_store.url]).stdout)
    assert detail["build"]["tuning"]["stopped_by"] == "until" and detail["tuning_stopped_by"] == "until"


def test_best_names_auto_builds_and_says_what_stopped_them(auto_store: ResultStore) -> None:
    (row,) = ranking.best(auto_store)
    assert row["best"] == "vm-compiled O2 per-target tuned auto (host)"
    side = {e["config"]: e for e in row["tuning"]}
    assert side["vm-compiled O2 per-target tuned auto (host)"]["stopped_by"] == "until"
    assert side["vm-bytecode O2 per-target tuned auto (host)"]["stopped_by"] == "plateau"
    assert side["vm-compiled O2 per-target (host)"]["stopped_by"] is None
    text = CliRunner().invoke(app, ["results", "best", "--db", auto_store.url]).output
    assert "auto" in text and "plateau" in text and "stopped by" in text, text
    as_json = json.loads(CliRunner().invoke(app, ["results", "best", "--json", "--db", auto_store.url]).stdout)
    assert {e["budget"] for e in as_json[0]["tuning"]} == {"auto", "untuned"}


def test_report_tuning_section_says_what_stopped_them(auto_store: ResultStore, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", "auto", "--output", str(out), "--db", auto_store.url])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "<th>stopped by</th>" in page and "<td>plateau</td>" in page and "<td>until</td>" in page
    assert "tuned auto on host: tuning curve; stopped by plateau: the last 16 trials gained 0.8 %" in page


def test_auto_baseline_takes_the_newest_stored_median_of_the_same_model_and_board(
    tmp_path: Path, auto_store: ResultStore
) -> None:
    model = tmp_path / "tiny_cnn.onnx"
    onnx.save(model_zoo.tiny_cnn(), model)
    (job,) = plan_jobs(parse_spec(BASE.format(model=model) + AUTO + 'until = "onnxruntime"\n', base=tmp_path))[1:]
    # The synthetic sweep's model is another file under the same name: not this job's baseline.
    assert "no ok onnxruntime result of tiny_cnn on board key host" in auto_baseline(auto_store, job, "x")["why"]
    assert auto_baseline(auto_store, plan_jobs(_spec(tmp_path, "[axes]\ntuning = [64]\n"))[0], "x") is None


def test_a_toolchain_child_is_handed_the_baseline(tmp_path: Path) -> None:
    """Another release tunes in its toolchain's child (workers/toolchains/tuning.py): the baseline the
    driver found reaches the child's TuningEnv through the request file, and its TVM has the scheduler."""
    from tvmbench.core.records import Job, ModelRef, TargetSpec, TuningSettings
    from workers.toolchains import child
    from workers.toolchains import tuning as files
    from workers.tuning.stage import TuningEnv

    job = Job(
        model=ModelRef(name="m", sha256="0" * 64, source="m.onnx", inputs=()),
        target=TargetSpec(name="host", tvm_target={"kind": "llvm"}, board_key="host", arch="x86_64"),
        executor="vm-compiled", opt_level=2, pipeline="per-target", tuning=8,
        tuning_settings=TuningSettings(cost_model="random"), tuning_auto=AutoBudget(until="onnxruntime", max_trials=8),
    )  # fmt: skip
    baseline = {"ms": 0.5, "source": "onnxruntime job abc of this sweep"}
    env = TuningEnv(tracker="127.0.0.1:1", database={"kind": "memory"}, baseline=baseline)
    files.RecordsBridge(tmp_path, job, env, "k" * 64).write_request()
    (tmp_path / files.READY_FILE).write_text("")  # the parent has handed the (no) stored records over
    assert child.tuning_env(tmp_path, job).baseline == baseline


def test_sweeps_overview_counts_an_auto_budget_by_its_cap(db_url: str) -> None:
    """`results sweeps` sums the budgets of a sweep's tuned builds: an auto job's config says "auto" (which no
    database casts to an integer) and counts at its trial cap."""
    from sqlalchemy import select

    from db import models as m
    from tvmbench.answers import query

    store = ResultStore(db_url)
    try:
        fixed = Result(model="a", samples=noisy(2.0), tuning={"budget": 24, "trials_run": 24, "trials_from_records": 0})
        auto = Result(model="b", samples=noisy(1.0), tuning=auto_tuning("plateau", {}, cap=40))  # 40 trials run
        add_sweep(store, "tuned", [fixed, auto])
        with store._sessions.begin() as s:
            s.get(m.Sweep, "tuned").status = "running"
            for job in s.scalars(select(m.Job).where(m.Job.sweep_id == "tuned")):
                tuning = {"budget": 24} if job.model_name == "a" else {"budget": "auto", "auto": {"max_trials": 40}}
                job.config = {**job.config, "tuning": tuning}
        (row,) = query.sweeps_overview(store, "tuned")
        assert (row["tuning_trials"], row["tuning_budget"]) == (24 + 40, 24 + 40), row
    finally:
        store.close()


def test_the_state_extends_the_curve_as_tuning_curve_counts_it() -> None:
    """The rules read a curve kept up batch by batch; it must be the one ``tuning_curve`` counts whole."""
    import random

    from workers.tuning.stats import tuning_curve

    rng = random.Random(3)
    stats = TuningStats()
    weights = {"conv": 3, "dense": 1, "pool": 2}
    stored = {"pool": 4e-4}
    state = AutoState(AutoBudget(), list(weights), weights, stats, stored, 16, None)
    assert state.curve() == []
    stats.record_batch("conv", [None, None], [None, None])  # failed trials only: conv has no time yet
    assert state.curve() == tuning_curve(stats.trials_so_far(), weights, stored, 16)
    for _ in range(40):
        task = rng.choice(["conv", "dense", "pool"])
        times = [None if rng.random() < 0.2 else rng.uniform(1e-4, 5e-3) for _ in range(rng.randint(1, 4))]
        stats.record_batch(task, [None] * len(times), times)
        assert state.curve() == tuning_curve(stats.trials_so_far(), weights, stored, 16)


def test_a_stop_handed_on_names_the_build_that_tuned() -> None:
    from tvmbench.answers.tuning_text import stop_text

    tuning = {"stopped_by": "max_minutes", "stop": {"minutes": 15.01, "max_minutes": 15, "tuned_by": "ab" * 32}}
    assert stop_text(tuning) == (
        "max_minutes: 15.01 min of tuning, at most 15; by build abababababab of the same workloads and rules, "
        "whose records it applied"
    )


def test_run_auto_hands_its_builder_the_time_rule() -> None:
    """The stage's auto path wires ``AutoState.time_is_up`` into the builder it searches with."""
    from types import SimpleNamespace

    from tvmbench.core.records import TuningSettings
    from workers.tuning.auto import run_auto

    builder = SimpleNamespace(stop=None)
    job = SimpleNamespace(tuning_auto=RULES, tuning_settings=TuningSettings())
    provenance, measured = run_auto(job, [], [], [], TuningStats(), {}, 0, None, builder=builder)
    assert builder.stop is not None and builder.stop.__self__.rules is RULES and builder.stop() is False
    assert provenance["stopped_by"] in stopping.STOP_REASONS and measured == {}
