"""Tuned builds of another TVM release: real 0.26.0 toolchain, real Ray, a real farm with a 0.26.0 host board.

The 0.26.0 toolchain is the one tests/test_toolchains.py caches in ~/.cache/tvmbench-test. A tuned job of
0.26.0 (budget 16, small_convnet, random cost model: a provisioned toolchain has no xgboost) tunes in
that toolchain's child, its candidates timed on the farm's only board, host-tvm0.26.0; its records land in
SQL under TVM 0.26.0; a second sweep of the same job (another label, an empty artifact cache, so the
build and its tuning stage run again) finds them and measures nothing.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from db import models as m
from db.store import ResultStore
from orchestrator.farm import LocalFarm, wait_until
from orchestrator.scheduler import run_sweep
from orchestrator.scheduling.events import SweepOutcome
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.cli import app
from tvmbench.core.records import Build, Job, ModelRef, TargetSpec, TuningScope
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.toolchains import provision
from workers.toolchains import tuning as files
from workers.toolchains.boards import release_key
from workers.toolchains.toolchain import Toolchain
from workers.tracker_client import registered_keys, tracker_summary
from workers.tuning.stage import TuningEnv

RELEASE = "0.26.0"
BUDGET = 16
SWEEP = """
name = "tuned-release"
label = "{label}"
[[models]]
path = "{model}"
[axes]
tuning = [{budget}]
tvm = ["{release}"]
[tuning]
cost_model = "random"
num_trials_per_iter = 16
[measure]
number = 2
repeat = 3
"""

# Real tuning in a child process on 2 shared cores: minutes, past the suite's default per test.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def tvm026(cached_home: Path) -> Toolchain:
    """TVM 0.26.0, provisioned on the first run and found in the cache after."""
    return provision.add(RELEASE)


@dataclass
class Tuned:
    store: ResultStore
    farm: LocalFarm
    first: SweepOutcome
    second: SweepOutcome
    builds: list[Build]  # of the first sweep, then of the second
    progress: list[dict[str, Any]]  # tuning and built progress events of both sweeps, each with its "sweep"
    tmp: Path


def _sweep(tmp: Path, label: str) -> Any:
    text = SWEEP.format(label=label, model=tmp / "small_convnet.onnx", budget=BUDGET, release=RELEASE)
    return load_spec(write_sweep(tmp, text, name=f"{label}.toml"))


def _build_of(store: ResultStore, sweep_id: str) -> Build:
    with store._sessions() as s:
        (job,) = s.scalars(select(m.Job).where(m.Job.sweep_id == sweep_id))
        build_key = job.build_key
    build = store.get_build(build_key)
    assert build is not None, f"no build row for {build_key}"
    return build


@pytest.fixture(scope="module")
def tuned(tvm026: Toolchain, tmp_path_factory: pytest.TempPathFactory, ray_local: None) -> Iterator[Tuned]:
    tmp = tmp_path_factory.mktemp("releases-tuning")
    onnx.save(model_zoo.small_convnet(), tmp / "small_convnet.onnx")
    farm = LocalFarm.start(tmp / "farm", {"host": 1}, toolchains=[tvm026])  # host-tvm0.26.0 only
    store = ResultStore(f"sqlite:///{tmp / 'results.db'}")
    try:
        seen: list[dict[str, int]] = []
        outcomes, builds = [], []
        for label in ("first", "again"):
            spec = _sweep(tmp, label)
            outcomes.append(
                run_sweep(
                    spec,
                    store,
                    farm.tracker,
                    ArtifactCache(tmp / f"artifacts-{label}"),  # empty: the build (and its tuning) runs again
                    progress=lambda event, counts, label=label: (
                        seen.append({**counts, "sweep": label}) if event in ("tuning", "built") else None
                    ),
                    health_checks=False,
                )
            )
            builds.append(_build_of(store, spec.sweep_id))
        yield Tuned(store, farm, outcomes[0], outcomes[1], builds, seen, tmp)
    finally:
        store.close()
        farm.stop()


def test_a_tuned_job_of_another_release_tunes_in_its_toolchain(tuned: Tuned) -> None:
    build = tuned.builds[0]
    assert dict(tuned.first.statuses) == {"ok": 1}, (tuned.first, build.error)
    assert build.status == "ok" and build.tvm_version == RELEASE, (build.status, build.error, build.tvm_version)
    t = build.tuning
    assert t is not None and t["budget"] == BUDGET
    assert t["trials_run"] == BUDGET and t["trials_from_records"] == 0, t
    assert t["cost_model"] == "random" and t["database"] == "sql", t
    tuned_tasks = [x for x in t["tasks"] if x["trials"]]
    assert tuned_tasks and all(x["records_found"] and x["best_us"] > 0 for x in tuned_tasks), t["tasks"]
    # The records were applied in 0.26.0's own traced PassContext.
    assert "MetaScheduleApplyDatabase" in build.pass_trace


def test_its_candidates_ran_on_the_boards_of_its_release(tuned: Tuned) -> None:
    # The farm has no board of the installed release: a candidate timed anywhere but host-tvm0.26.0 is
    # impossible, and every one of the 16 was timed (no failed trial).
    keys = registered_keys(tracker_summary(tuned.farm.tracker))
    assert set(keys) == {release_key("host", RELEASE)}, keys
    t = tuned.builds[0].tuning
    assert t["failed_trials"] == {} and t["errors"] == [], t
    assert t["run_s"] > 0 and t["build_s"] > 0, t


def test_its_records_are_stored_under_its_release(tuned: Tuned) -> None:
    with tuned.store._sessions() as s:
        workloads = list(s.scalars(select(m.TuningWorkload)))
        records = list(s.scalars(select(m.TuningRecord)))
    assert workloads and {(w.tvm_version, w.board_key) for w in workloads} == {(RELEASE, "host")}
    assert len(records) == BUDGET, len(records)  # one per measured candidate, none lost, none twice
    assert all(r.valid for r in records), [r.run_secs for r in records]


def test_progress_reached_the_sweep(tuned: Tuned) -> None:
    first = [p for p in tuned.progress if p["sweep"] == "first"]
    assert first and first[-1]["trials_budget"] == BUDGET, tuned.progress
    assert first[-1]["trials_done"] == BUDGET, tuned.progress  # the child's trials, read through its file
    # The same job again measures nothing: its trials come from the stored records, counted apart.
    again = [p for p in tuned.progress if p["sweep"] == "again"]
    assert again[-1]["trials_done"] == 0 and again[-1]["trials_reused"] == BUDGET, tuned.progress


def test_the_same_job_again_reuses_its_records(tuned: Tuned) -> None:
    again = tuned.builds[1]
    assert dict(tuned.second.statuses) == {"ok": 1}, (tuned.second, again.error)
    t = again.tuning
    assert t["trials_from_records"] == BUDGET and t["trials_run"] == 0, t
    assert again.fingerprint == tuned.builds[0].fingerprint  # the same records chose the same program
    with tuned.store._sessions() as s:
        assert len(list(s.scalars(select(m.TuningRecord)))) == BUDGET  # nothing measured, nothing added


def test_plan_counts_the_records_of_the_jobs_release(tuned: Tuned) -> None:
    # A larger budget is not built yet, so the plan shows its tuning. 0.27 hashes the same PrimFuncs
    # differently, so the 0.26.0 child extracts and hashes the tasks; the plan counts what 0.26.0 stored.
    text = SWEEP.format(label="bigger", model=tuned.tmp / "small_convnet.onnx", budget=2 * BUDGET, release=RELEASE)
    sweep = write_sweep(tuned.tmp, text, name="bigger.toml")
    result = CliRunner().invoke(app, ["sweep", "plan", str(sweep), "--db", tuned.store.url, "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["jobs"][0]["tuning_plan"]
    assert plan["trials_covered"] == BUDGET and plan["trials_to_run"] == BUDGET, plan


def _our_children() -> list[int]:
    """Pids of toolchain children started from this worktree (their cwd is the project root)."""
    from workers.toolchains.probe import PROJECT_ROOT

    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if b"workers.toolchains.child" in cmdline and Path(os.readlink(proc / "cwd")) == Path(PROJECT_ROOT):
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return pids


def _records(store: ResultStore) -> int:
    with store._sessions() as s:
        return len(list(s.scalars(select(m.TuningRecord.id))))


def test_cancel_kills_the_child_keeps_its_records_and_resume_continues(tuned: Tuned, tmp_path: Path) -> None:
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")  # no records yet: it tunes from scratch
    # Two rounds of 4: the cancel comes after the first round's records, the resume runs the rest.
    budget = BUDGET // 2
    text = SWEEP.format(label="cancel", model=tuned.tmp / "small_convnet.onnx", budget=budget, release=RELEASE)
    spec = load_spec(write_sweep(tmp_path, text.replace("num_trials_per_iter = 16", "num_trials_per_iter = 4")))
    cache = ArtifactCache(tmp_path / "artifacts")
    box: list = []
    thread = threading.Thread(
        target=lambda: box.append(run_sweep(spec, store, tuned.farm.tracker, cache, health_checks=False)),
        daemon=True,
    )
    thread.start()
    try:
        wait_until(lambda: _records(store) >= 1, 600, "the first tuning records of the 0.26.0 child")
        assert _our_children(), "no toolchain child is tuning"
        result = CliRunner().invoke(app, ["sweep", "cancel", spec.sweep_id, "--db", store.url])
        assert result.exit_code == 0, result.output
        thread.join(60)
        assert box, "the cancel did not stop the sweep in time"
        assert set(store.job_statuses(spec.sweep_id).values()) == {"cancelled"}
        wait_until(lambda: not _our_children(), 120, "the toolchain child to end with its build task")
        kept = _records(store)
        assert kept >= 1  # what the child measured before the cancel is in SQL
        outcome = run_sweep(spec, store, tuned.farm.tracker, cache, health_checks=False, reopen_cancelled=True)
        assert dict(outcome.statuses) == {"ok": 1}, outcome
        t = _build_of(store, spec.sweep_id).tuning
        # It continued from those records (the child counts the valid ones) and ran only the rest.
        assert t["trials_from_records"] >= 1 and t["trials_run"] + t["trials_from_records"] == budget, t
    finally:
        thread.join(60)
        store.close()


# --- the bridge alone: SQL <-> MetaSchedule's JSON files, no TVM ---------------------------------------


def _bridged_job() -> Job:
    """A tuned job the records bridge can be handed without a model or a build (its tests need neither)."""
    return Job(
        model=ModelRef(name="m", sha256="0" * 64, source="m.onnx", inputs=()),
        target=TargetSpec(name="host", tvm_target={"kind": "llvm"}, board_key="host", arch="x86_64"),
        executor="",
        opt_level=3,
        pipeline="default",
        tuning=8,
    )


def test_bridge_hands_stored_records_over_and_stores_only_complete_new_lines(tmp_path: Path) -> None:
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    scope = TuningScope(target={"kind": "llvm", "num-cores": 2}, board_key="host", tvm_version=RELEASE)
    trace = [[["GetBlock", [], [], ["b0"]]], []]
    stored_wl = store.commit_tuning_workload(scope, "111", "bW9kLWE=", model_name="m")
    store.commit_tuning_record(stored_wl, [trace, [1e-3], scope.target, [["TENSOR", "float32", [1], 0]]])
    job = _bridged_job()
    env = TuningEnv(tracker="", database={"kind": "sql", "url": store.url}, board_key="host-tvm0.26.0")
    folder = tmp_path / "child"
    folder.mkdir()
    bridge = files.RecordsBridge(folder, job, env, "k" * 64)
    bridge.write_request()
    assert json.loads((folder / files.REQUEST_FILE).read_text())["board_key"] == "host-tvm0.26.0"
    bridge.poll()
    assert not (folder / files.READY_FILE).exists()  # no scope from the child yet: nothing handed over
    (folder / files.SCOPE_FILE).write_text(json.dumps(scope.__dict__))
    bridge.poll()
    assert (folder / files.READY_FILE).is_file() and bridge.exported == 1
    workloads = (folder / files.RECORDS_DIR / files.WORKLOAD_FILE).read_text().splitlines()
    assert [json.loads(line) for line in workloads] == [["111", "bW9kLWE="]]
    # The child appends a workload and two records, the second one half written.
    with (folder / files.RECORDS_DIR / files.WORKLOAD_FILE).open("a") as f:
        f.write(json.dumps(["222", "bW9kLWI="]) + "\n")
    record = [1, [trace, [2e-3], scope.target, [["TENSOR", "float32", [1], 0]]]]
    with (folder / files.RECORDS_DIR / files.RECORD_FILE).open("a") as f:
        f.write(json.dumps(record) + "\n" + json.dumps([0, [trace, [3e-3], None, None]])[:20])
    bridge.poll()
    assert bridge.stored == 1  # the half line waits for its end
    with (folder / files.RECORDS_DIR / files.RECORD_FILE).open("a") as f:
        f.write(json.dumps([0, [trace, [3e-3], None, None]])[20:] + "\n")
    bridge.poll()
    bridge.close()
    assert bridge.stored == 2
    rows = store.tuning_records(scope)
    assert sorted((w.workload_hash, r.run_secs[0]) for w, r in rows) == [("111", 1e-3), ("111", 3e-3), ("222", 2e-3)]
    store.close()


class _ActorlessFence:
    """The host fence's own state (workers/fence._HostFenceState) behind Fence's try_hold/release, no Ray."""

    def __init__(self) -> None:
        from workers.fence import _HostFenceState

        self.state = _HostFenceState()

    def try_hold(self, kind: str, holder: str, ttl_s: float) -> bool:
        return self.state.try_build(holder, ttl_s) if kind == "build" else self.state.try_time(holder, ttl_s)

    def release(self, holder: str) -> None:
        self.state.release(holder)


@dataclass
class _ParentHold:
    fence: _ActorlessFence
    holder: str


def test_bridge_asks_the_host_fence_for_the_child(tmp_path: Path) -> None:
    fence = _ActorlessFence()
    assert fence.try_hold("build", "parent", 60) and fence.try_hold("build", "other build", 60)
    scope = TuningScope(target={"kind": "llvm"}, board_key="host", tvm_version=RELEASE)
    env = TuningEnv(tracker="", database={"kind": "memory"})
    job = _bridged_job()
    bridge = files.RecordsBridge(tmp_path, job, env, "k" * 64, hold=_ParentHold(fence, "parent"), fence=fence)
    bridge.write_request()
    assert json.loads((tmp_path / files.REQUEST_FILE).read_text())["fence"] is True
    (tmp_path / files.SCOPE_FILE).write_text(json.dumps(scope.__dict__))
    bridge.poll()
    assert "parent" not in fence.state.builds  # its own build hold would fence out the child's timings
    child = files.FileFence(tmp_path / files.FENCE_DIR)
    timed, leave = threading.Event(), threading.Event()

    def time_one() -> None:
        with child.timing(ttl_s=30):
            timed.set()
            leave.wait(30)

    thread = threading.Thread(target=time_one, daemon=True)
    thread.start()
    wait_until(lambda: any((tmp_path / files.FENCE_DIR).glob("*.time")), 120, "the child's ask")
    bridge.poll()
    assert not timed.is_set() and fence.state.waiting_timers  # another build holds the fence: it waits
    fence.release("other build")
    wait_until(lambda: (bridge.poll(), timed.is_set())[1], 120, "the grant once the build let go")
    assert len(fence.state.timing) == 1 and not fence.try_hold("build", "new build", 60)  # timing alone
    leave.set()
    thread.join(60)
    bridge.poll()
    assert fence.state.timing == {} and list((tmp_path / files.FENCE_DIR).iterdir()) == []
    # A child killed while it holds the fence: the parent lets go of it when the child is gone.
    (tmp_path / files.FENCE_DIR / "dead.time").write_text("30")
    bridge.poll()
    assert "dead" in fence.state.timing
    bridge.close()
    assert fence.state.timing == {} and fence.try_hold("build", "new build", 60)
