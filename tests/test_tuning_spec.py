"""The tuning axis and settings, the budget split and the host fence: fast checks without a farm."""

from __future__ import annotations

import time
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from orchestrator.plan import plan_jobs
from orchestrator.spec import SpecError, parse_spec
from tests.conftest import write_sweep
from tvmbench.cli import app
from tvmbench.core.records import Job
from workers import model_zoo
from workers.fence import _HostFenceState
from workers.tuning.tasks import MIN_TASK_TRIALS, TaskInfo, allocate, profile_shares, tune_order

BASE = '[[models]]\npath = "{model}"\n'


def _spec(tmp_path: Path, extra: str) -> object:
    model = tmp_path / "m.onnx"
    if not model.exists():
        onnx.save(model_zoo.tiny_mlp(), model)
    return parse_spec(BASE.format(model=model) + extra, base=tmp_path)


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        ("[axes]\ntuning = [-1]\n", "axes.tuning"),
        ("[axes]\ntuning = [1.5]\n", "axes.tuning"),
        ("[axes]\ntuning = [10000000]\n", "axes.tuning"),
        ('[axes]\ntuning = ["64"]\n', "axes.tuning"),
        ("[axes]\ntuning = [true]\n", "axes.tuning"),
        ("[axes]\ntuning = [64]\n[tuning]\ntrials_per_task = 0\n", "tuning.trials_per_task"),
        ("[axes]\ntuning = [64]\n[tuning]\nnum_trials_per_iter = 2.5\n", "tuning.num_trials_per_iter"),
        ('[axes]\ntuning = [64]\n[tuning]\ncost_model = "gbdt"\n', "tuning.cost_model"),
        ('[axes]\ntuning = [64]\n[tuning]\nmodule_equality = "loose"\n', "tuning.module_equality"),
        ("[axes]\ntuning = [64]\n[tuning]\nseed = -3\n", "tuning.seed"),
        ("[axes]\ntuning = [64]\n[tuning]\nrunner_timeout_s = 0\n", "tuning.runner_timeout_s"),
        ("[axes]\ntuning = [64]\n[tuning]\npopulation = 4\n", "tuning.population = 4: must be an integer from 8"),
        ('[axes]\ntuning = [64]\n[tuning]\npopulation = "small"\n', "tuning.population"),
        ("[axes]\ntuning = [64]\n[tuning]\npopulation = 1000000\n", "tuning.population"),
        ("[axes]\ntuning = [64]\n[tuning]\ntrials = 5\n", "unknown key 'trials'"),
        ("[tuning]\nseed = 1\n", "[tuning]: the sweep tunes nothing"),
        ('[axes]\ntuning = [64]\nexecutor = ["onnxruntime"]\n', "needs a Relax VM executor"),
    ],
)
def test_bad_tuning_settings_name_the_key(tmp_path: Path, extra: str, culprit: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec(tmp_path, extra)
    assert culprit in str(err.value), err.value


def test_population_enters_the_key_only_off_the_default_and_reaches_the_search(tmp_path: Path) -> None:
    from workers.tuning.first_batch import first_batch_strategy

    default = plan_jobs(_spec(tmp_path, "[axes]\ntuning = [64]\n"))[0]
    same = plan_jobs(_spec(tmp_path, "[axes]\ntuning = [64]\n[tuning]\npopulation = 512\n"))[0]
    small = plan_jobs(_spec(tmp_path, "[axes]\ntuning = [64]\n[tuning]\npopulation = 128\n"))[0]
    assert "population" not in default.build_config()["tuning"], "tuned keys of before stay the same"
    assert same.build_key("v") == default.build_key("v") and same.key == default.key
    assert small.build_config()["tuning"]["population"] == 128
    assert small.build_key("v") != default.build_key("v")
    search = first_batch_strategy(lambda: False, population=small.tuning_settings.population)
    assert search.inner.population_size == 128
    assert first_batch_strategy(lambda: False).inner.population_size == 512


def test_bad_budget_is_exit_2_naming_the_key(tmp_path: Path, home: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(model_zoo.tiny_mlp(), model)
    sweep = write_sweep(tmp_path, BASE.format(model=model) + "[axes]\ntuning = [0, -64]\n")
    result = CliRunner().invoke(app, ["sweep", "plan", str(sweep)])
    assert result.exit_code == 2, result.output
    assert "axes.tuning" in result.output and "-64" in result.output, result.output


def test_untuned_jobs_keep_their_keys_and_tuned_ones_differ(tmp_path: Path) -> None:
    plain = plan_jobs(_spec(tmp_path, ""))
    swept = plan_jobs(_spec(tmp_path, '[axes]\ntuning = [0, 64]\nexecutor = ["vm-bytecode", "onnxruntime"]\n'))
    assert "tuning" not in plain[0].build_config()
    by_budget = {(j.executor, j.tuning): j for j in swept}
    # The ONNX Runtime baseline is not tuned: planned once. The untuned VM job is today's job, same keys.
    assert set(by_budget) == {("vm-bytecode", 0), ("vm-bytecode", 64), ("onnxruntime", 0)}
    assert by_budget[("vm-bytecode", 0)].key == plain[0].key
    tuned = by_budget[("vm-bytecode", 64)]
    assert tuned.build_key("v") != plain[0].build_key("v")
    assert tuned.build_config()["tuning"]["board_key"] == "host"  # timings on these boards chose it
    other_seed = plan_jobs(_spec(tmp_path, "[axes]\ntuning = [64]\n[tuning]\nseed = 7\n"))[0]
    assert other_seed.build_key("v") != tuned.build_key("v")
    # The fast keys equal the documented hashes of build_config() (a tuned key must never be an untuned one's).
    from tvmbench.core.records import canonical_hash

    for job in (tuned, other_seed):
        assert job.build_key("v") == canonical_hash({**job.build_config(), "tvm": "v"})


def test_sweep_id_of_untuned_sweeps_is_unchanged(tmp_path: Path) -> None:
    assert _spec(tmp_path, "").sweep_id == _spec(tmp_path, "[axes]\ntuning = [0]\n").sweep_id


def _tasks() -> list[TaskInfo]:
    return [
        TaskInfo("reshape", 1, 0.0, 0),
        TaskInfo("mean", 1, 6.5e4, 1),
        TaskInfo("matmul", 1, 330.0, 2),
        TaskInfo("conv_big", 1, 1.9e7, 3),
        TaskInfo("conv_small", 1, 3.7e6, 4),
    ]


def test_budget_follows_flops_not_the_default_scheduler() -> None:
    trials, basis = allocate(_tasks(), 64)
    assert basis == "flops"
    assert sum(trials.values()) == 64
    assert trials["reshape"] == trials["matmul"] == trials["mean"] == 0  # no FLOPs worth a search
    assert trials["conv_big"] > trials["conv_small"] >= MIN_TASK_TRIALS


def test_small_budget_goes_whole_to_the_heaviest_task() -> None:
    trials, _ = allocate(_tasks(), 16)
    assert trials == {"reshape": 0, "mean": 0, "matmul": 0, "conv_big": 16, "conv_small": 0}


def test_cap_per_task_spreads_the_rest() -> None:
    trials, _ = allocate(_tasks(), 64, max_per_task=20)
    assert trials["conv_big"] == 20 and trials["conv_small"] == 20
    assert sum(trials.values()) <= 64


def test_profile_weights_win_over_flops() -> None:
    profile = {
        "available": True,
        "kernels": [
            {"name": "mean", "kind": "kernel", "total_ms": 9.0},
            {"name": "conv_big", "kind": "kernel", "total_ms": 1.0},
            {"name": "vm.builtin.alloc", "kind": "builtin", "total_ms": 50.0},
        ],
    }
    trials, basis = allocate(_tasks(), 40, profile_ms=profile_shares(profile))
    assert basis == "profile"
    assert trials["mean"] == 36 and trials["conv_big"] == 4
    assert profile_shares({"available": False, "reason": "stock server"}) is None


def test_tasks_with_most_trials_are_tuned_first_ties_in_extraction_order() -> None:
    tasks = _tasks()
    trials = {"reshape": 4, "mean": 4, "matmul": 0, "conv_big": 40, "conv_small": 16}
    order = [t.name for t in tune_order(tasks, trials)]
    assert order == ["conv_big", "conv_small", "reshape", "mean", "matmul"]
    assert [t.name for t in tasks][:2] == ["reshape", "mean"]  # the extracted list is left as it was


def test_fence_keeps_builds_and_timings_apart() -> None:
    fence = _HostFenceState()
    assert fence.try_build("b1", 60) and fence.try_build("b2", 60)
    assert not fence.try_time("t1", 60)  # builds run: no timing
    assert not fence.try_build("b3", 60)  # a timing waits: no new build
    fence.release("b1")
    fence.release("b2")
    assert fence.try_time("t1", 60)
    assert not fence.try_time("t2", 60) and not fence.try_build("b4", 60)  # a timing is alone
    fence.release("t1")
    fence.release("t2")
    assert fence.try_build("b4", 60)


def test_fence_forgets_holders_that_died() -> None:
    fence = _HostFenceState()
    assert fence.try_time("killed", 0.05)
    time.sleep(0.1)  # its TTL passes (a holder cancelled without releasing)
    assert fence.try_build("b", 60)
    assert fence.state()["timing"] == 0


def test_plan_shows_tasks_and_trials(tmp_path: Path, home: Path) -> None:
    model = tmp_path / "net.onnx"
    onnx.save(model_zoo.small_convnet(size=16, channels=4), model)
    sweep = write_sweep(tmp_path, BASE.format(model=model) + "[axes]\ntuning = [0, 24]\n")
    result = CliRunner().invoke(app, ["sweep", "plan", str(sweep), "--json"])
    assert result.exit_code == 0, result.output
    import json

    jobs = json.loads(result.output)["jobs"]
    tuned = [j for j in jobs if j["tuning"]]
    assert len(jobs) == 2 and len(tuned) == 1
    plan = tuned[0]["tuning_plan"]
    names = {t["name"]: t for t in plan["tasks"]}
    assert any("conv2d" in n for n in names), names
    assert sum(t["trials"] for t in plan["tasks"]) == 24
    assert plan["trials_covered"] == 0 and plan["trials_to_run"] == 24
    text = CliRunner().invoke(app, ["sweep", "plan", str(sweep)])
    assert "24 to run, 0 covered by stored records" in text.output, text.output


def test_plan_extracts_each_programs_tasks_once(tmp_path: Path, home: Path, monkeypatch) -> None:
    """Six budgets x two VM modes of one program: one extraction (800 tuned jobs took 63 s to plan when each
    extracted its own tasks and opened the records database), and each budget still gets its own split."""
    import json

    from orchestrator import tuning

    calls: list[str] = []
    real = tuning._extract_tasks
    monkeypatch.setattr(tuning, "_extract_tasks", lambda job, *a: calls.append(job.key) or real(job, *a))
    model = tmp_path / "net.onnx"
    onnx.save(model_zoo.small_convnet(size=16, channels=4), model)
    axes = '[axes]\nexecutor = ["vm-bytecode", "vm-compiled"]\ntuning = [8, 16, 24, 32, 40, 48]\n'
    result = CliRunner().invoke(app, ["sweep", "plan", str(write_sweep(tmp_path, BASE.format(model=model) + axes)),
                                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    plans = [j["tuning_plan"] for j in json.loads(result.output)["jobs"]]
    assert len(plans) == 12 and len(calls) == 1, calls
    assert sorted(sum(t["trials"] for t in p["tasks"]) for p in plans) == sorted([8, 16, 24, 32, 40, 48] * 2)
    # The two VM modes of each budget have one plan: one table, its heading naming both jobs.
    text = CliRunner().invoke(app, ["sweep", "plan", str(tmp_path / "sweep.toml")]).output
    heads = [line for line in text.splitlines() if "covered by stored records" in line]
    assert len(heads) == 6 and all(h.startswith("jobs ") and h.count(",") >= 1 for h in heads), text


def test_job_default_is_untuned() -> None:
    assert Job.__dataclass_fields__["tuning"].default == 0


def test_plan_task_work_keeps_three_digits_for_tiny_tasks() -> None:
    """A 4200-FLOP task read 0.00 MFLOP in `sweep plan` (2 decimals) but 0.0042 in `results show`."""
    from tvmbench.answers.columns import PLAN_TASKS, TUNED_TASKS

    for columns in (PLAN_TASKS, TUNED_TASKS):
        mflop = next(c for c in columns if c.key == "mflop")
        assert mflop.text({"flops": 4200}) == "0.0042"
        assert mflop.text({"flops": 173_000_000}) == "173"
        assert mflop.text({"flops": None}) == "-"
