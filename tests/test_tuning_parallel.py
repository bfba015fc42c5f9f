"""One model's tasks searched by several Ray workers at once (`[tuning] search_workers`).

The rules first, without Ray or TVM: how tasks are split, when the search stays one, and how the auto
budget's rules read the whole model from one group. Then for real: a tiny MLP (two matmul tasks) tuned by
two Ray workers, a fixed budget and an auto one, on a real local farm of two boards, records in the SQL
store (SQLite) both workers write, applied by the build as after one search.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import onnx
import pytest

from orchestrator.farm import LocalFarm
from orchestrator.plan import plan_jobs
from orchestrator.spec import SpecError, load_spec
from tests.conftest import write_sweep
from tvmbench.core.records import AutoBudget
from workers import model_zoo
from workers.tuning import stopping
from workers.tuning.auto import AutoState
from workers.tuning.parallel import SHARED_STOPS, Tally, split, why_not_parallel
from workers.tuning.stage import TuningEnv
from workers.tuning.stats import TuningStats
from workers.tuning.tasks import TaskInfo

SWEEP = """
name = "parallel"
[[models]]
path = "{model}"
[axes]
executor = ["vm-compiled"]
tuning = [{budget}]
[tuning]
cost_model = "random"
num_trials_per_iter = 2
search_workers = {workers}
{rules}
"""


def _infos(*names: str) -> list[TaskInfo]:
    return [TaskInfo(name=n, weight=1, flops=1.0, index=i) for i, n in enumerate(names)]


def test_split_balances_the_cost_and_keeps_every_group_busy() -> None:
    infos = _infos("a", "b", "c", "d", "e")
    groups = split(infos, {"a": 100, "b": 60, "c": 50, "d": 10, "e": 0}, 2)
    assert sorted(i.name for g in groups for i in g) == ["a", "b", "c", "d", "e"]
    load = [sum({"a": 100, "b": 60, "c": 50, "d": 10, "e": 0}[i.name] for i in g) for g in groups]
    assert sorted(load) == [110, 110], groups  # a+d(+e) against b+c
    assert all([i.index for i in g] == sorted(i.index for i in g) for g in groups)  # the tasks' own order
    # More workers than tasks: one task each, never an empty group.
    assert [len(g) for g in split(infos[:2], {}, 8)] == [1, 1]


def test_the_search_stays_one_where_groups_could_only_wait_on_each_other() -> None:
    elsewhere = TuningEnv(tracker="t", database={"kind": "sql", "url": "sqlite://"})
    assert why_not_parallel(4, elsewhere, 10) is None
    assert why_not_parallel(4, elsewhere, 1) == "one task to tune"
    fenced = TuningEnv(tracker="t", database={"kind": "sql", "url": "sqlite://"}, fence_host="me")
    assert "share this machine's cores" in str(why_not_parallel(4, fenced, 10))
    assert "SQL store" in str(why_not_parallel(4, TuningEnv(tracker="t"), 10))  # in memory
    json_files = TuningEnv(tracker="t", database={"kind": "json", "path": "/tmp/x"})
    assert "SQL store" in str(why_not_parallel(4, json_files, 10))
    child = TuningEnv(tracker="t", database={"kind": "sql", "url": "sqlite://"}, builder="local")
    assert "outside Ray" in str(why_not_parallel(4, child, 10))


class _Shared:
    """A group's view of the others, as SharedRules gives it, over a plain Tally (no actor)."""

    def __init__(self, tally: Tally, group: int) -> None:
        self.tally, self.group = tally, group

    def exchange(self, estimate_ms: float | None, complete: bool) -> dict[str, Any]:
        return self.tally.exchange(self.group, estimate_ms, complete)

    def stopped(self, rule: str, values: dict[str, Any]) -> None:
        self.tally.stopped(self.group, rule, values)


def _group_state(rules: AutoBudget, tally: Tally, group: int, task: str, best_s: float) -> AutoState:
    """A group of one task that has measured one candidate of ``best_s`` seconds."""
    stats = TuningStats()
    stats.add_trials([(0.1, task, best_s)])
    return AutoState(rules, [task], {task: 1}, stats, {task: None}, 0, 10.0, _Shared(tally, group))


def test_until_holds_on_the_whole_models_estimate_and_stops_every_group() -> None:
    tally, rules = Tally(2), AutoBudget(until=10.0, max_trials=1000)
    a = _group_state(rules, tally, 0, "a", 0.006)  # 6 ms: under the 10 ms target alone
    b = _group_state(rules, tally, 1, "b", 0.007)
    # Alone each group is under 10 ms; the model is 13 ms, and until waits for every group's time.
    assert a.check(1) is None and b.check(1) is None
    b2 = _group_state(rules, tally, 1, "b", 0.003)
    stop = b2.check(1)  # 6 + 3 = 9 ms: the model is at the target
    assert stop is not None and stop.rule == "until" and stop.values["estimate_ms"] == pytest.approx(9.0)
    a_again = _group_state(rules, tally, 0, "a", 0.006)
    assert a_again.check(1) == stopping.Stop("until", {**stop.values, "group": 1})  # ended by the other group


def test_plateau_is_a_groups_own_and_counts_its_gain_against_the_whole_model() -> None:
    tally, rules = Tally(2), AutoBudget(plateau_trials=1, plateau_gain=0.1, max_trials=1000)
    other = _group_state(rules, tally, 1, "b", 0.090)  # 90 ms elsewhere in the model
    assert other.check(1) is None
    stats = TuningStats()
    stats.add_trials([(0.1, "a", 0.010), (0.2, "a", 0.008)])  # 10 -> 8 ms: 20 % of the group, 2 % of the model
    group = AutoState(rules, ["a"], {"a": 1}, stats, {"a": None}, 0, None, _Shared(tally, 0))
    stop = group.check(2)
    assert stop is not None and stop.rule == "plateau" and stop.values["gained"] == pytest.approx(0.02)
    assert "plateau" not in SHARED_STOPS and tally.shared_stop() is None  # the other group goes on


def test_the_trial_cap_counts_every_groups_trials() -> None:
    tally, rules = Tally(2), AutoBudget(max_trials=10)
    tally.add_trials(1, 7)
    state = _group_state(rules, tally, 0, "a", 0.001)
    stop = state.check(3)
    assert stop is not None and (stop.rule, stop.values["trials"]) == ("max_trials", 10)
    assert tally.shared_stop() == (0, "max_trials", stop.values)


def test_search_workers_is_checked_and_keys_only_off_its_default(tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    onnx.save(model_zoo.tiny_mlp(), model)
    for bad in ("0", "65", '"many"', "2.5"):
        with pytest.raises(SpecError, match=r"tuning\.search_workers"):
            load_spec(write_sweep(tmp_path, SWEEP.format(model=model, budget=8, workers=bad, rules="")))
    (one,) = plan_jobs(load_spec(write_sweep(tmp_path, SWEEP.format(model=model, budget=8, workers=1, rules=""))))
    (two,) = plan_jobs(load_spec(write_sweep(tmp_path, SWEEP.format(model=model, budget=8, workers=2, rules=""))))
    assert "search_workers" not in one.build_config()["tuning"], "tuned keys of before stay the same"
    assert two.build_config()["tuning"]["search_workers"] == 2 and two.tuning_settings.search_workers == 2


def test_results_show_says_how_the_tasks_were_searched() -> None:
    from tvmbench.answers.tuning_text import stop_text, tuning_lines

    base = {"budget": 64, "trials_run": 12, "trials_from_records": 0, "tuning_s": 30.0, "cost_model": "xgb"}
    groups = [
        {"tasks": ["a", "b"], "node": "n1", "trials": 7, "tuning_s": 29.5, "stopped_by": "until"},
        {"tasks": ["c"], "node": "n2", "trials": 5, "tuning_s": 28.0, "stopped_by": "until"},
    ]
    parallel = {"asked": 2, "workers": 2, "nodes": 2, "groups": groups}
    (line,) = [x for x in tuning_lines({**base, "search": parallel}) if "searched by" in x]
    assert line.strip() == (
        "searched by 2 workers on 2 nodes; groups 1: 2 tasks, 7 trials in 29.5 s, stopped by until; "
        "2: 1 tasks, 5 trials in 28.0 s, stopped by until"
    )
    one = {"asked": 4, "workers": 1, "why": "one task to tune"}
    assert any(
        x.strip() == "searched by 1 worker, 4 asked: one task to tune" for x in tuning_lines({**base, "search": one})
    )
    assert not any("searched by" in x for x in tuning_lines(base)), "one worker asked: nothing to say"
    stop = {"stopped_by": "until", "stop": {"estimate_ms": 9.0, "until_ms": 10.0, "group": 1}}
    assert str(stop_text(stop)).endswith("met in search group 2, which ended every group's search")


@pytest.fixture(scope="module")
def two_boards(tmp_path_factory: pytest.TempPathFactory) -> Any:
    farm = LocalFarm.start(tmp_path_factory.mktemp("farm-logs"), {"host": 2})
    yield farm
    farm.stop()


def _tuned(tmp_path: Path, farm: LocalFarm, budget: str, rules: str = "", baseline: Any = None) -> dict[str, Any]:
    """The tuning provenance of the MLP's build, searched by two workers (records in a SQLite records store)."""
    from workers.executors.registry import build_job
    from workers.executors.requests import BuildRequest

    model = tmp_path / "mlp.onnx"
    onnx.save(model_zoo.tiny_mlp(), model)
    (job,) = plan_jobs(
        load_spec(write_sweep(tmp_path, SWEEP.format(model=model, budget=budget, workers=2, rules=rules)))
    )
    # The two boards are on this machine; handed no fence, as a cluster's driver hands boards elsewhere.
    env = TuningEnv(
        tracker=farm.tracker,
        database={"kind": "sql", "url": f"sqlite:///{tmp_path / 'records.db'}"},
        boards=2,
        baseline=baseline,
    )
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")  # see tests/test_tuning_auto.py
    for handler in [h for h in ms_logger.handlers if h.get_name() is None]:
        ms_logger.removeHandler(handler)
    build, data = build_job(BuildRequest(job, model.read_bytes(), tuning_env=env))
    assert build.ok and data, build.error
    t = build.tuning
    assert t is not None
    search = t["search"]
    assert (search["asked"], search["workers"], search.get("nodes")) == (2, 2, 1), search
    # Each worker searched one of the two tasks, and the build applied both workers' records.
    assert sorted(name for g in search["groups"] for name in g["tasks"]) == sorted(x["name"] for x in t["tasks"])
    assert all(len(g["tasks"]) == 1 and g["trials"] >= 2 for g in search["groups"]), search
    assert all(x["records_found"] and x["best_us"] for x in t["tasks"]), (t["tasks"], t["errors"], t["failed_trials"])
    assert t["trials_run"] == sum(g["trials"] for g in search["groups"]) == sum(x["trials"] for x in t["tasks"])
    # One curve of both groups' trials, on the build's clock, in the order they finished.
    seconds = [point[1] for point in t["curve"]]
    assert len(t["curve"]) == t["trials_run"] and seconds == sorted(seconds), t["curve"]
    assert [p[2] for p in t["curve"]] == sorted((p[2] for p in t["curve"]), reverse=True)
    return t


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_fixed_budget_is_searched_by_two_workers(tmp_path: Path, ray_local: None, two_boards: LocalFarm) -> None:
    t = _tuned(tmp_path, two_boards, "12")  # split by weight x FLOPs, each task at least 4 trials
    assert t["trials_run"] == 12 and all(x["trials"] >= 4 for x in t["tasks"]), t["tasks"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_auto_budget_stops_both_workers_by_the_whole_models_rule(
    tmp_path: Path, ray_local: None, two_boards: LocalFarm
) -> None:
    baseline = {"ms": 1e6, "source": "a baseline far above any candidate"}
    t = _tuned(tmp_path, two_boards, '"auto"', 'max_trials = 64\nuntil = "onnxruntime"', baseline)
    # Each group's first round (a batch of 2) gives its task a time; a group that has it before the other
    # reports one searches on (how far depends on the machine), until the whole model is under the target.
    assert t["stopped_by"] == "until" and t["trials_run"] >= 4, t
    assert {g["stopped_by"] for g in t["search"]["groups"]} == {"until"}
    # The estimate that met the rule is the whole model's: both tasks, at their bests then (bests only fall).
    assert t["stop"]["estimate_ms"] >= sum(x["best_us"] for x in t["tasks"]) / 1e3 * (1 - 1e-5), t  # 6 digits
