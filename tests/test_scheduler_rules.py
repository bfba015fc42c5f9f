"""The scheduler's rules with fake Builders and Runners, through the in-process pool and a real SQLite store.

No Ray, no TVM, no farm: program reuse, equivalence, the host fence, retries, quarantine, cancel and
resume, each in well under a second. The real-Ray integration tests (test_sweep.py, test_faults_sweep.py,
test_chaos.py) cover the same rules end to end.
"""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx
import pytest

from db import models as m
from db.store import ResultStore
from orchestrator.plan import plan_jobs
from orchestrator.scheduling import sweep as loop
from orchestrator.scheduling.baselines import BaselineWait
from orchestrator.scheduling.events import Listener
from orchestrator.scheduling.jobs import JobState
from orchestrator.scheduling.measurements import FixedBoards
from orchestrator.scheduling.pool import InlinePool, TaskLost
from orchestrator.scheduling.run import execute_sweep, run_sweep
from orchestrator.scheduling.tuning_turns import TuningTurns
from orchestrator.spec import SpecError, SweepSpec, load_spec
from tests.conftest import write_sweep
from tvmbench.core.records import AutoBudget, Build, Job, ModelRef, Run, TargetSpec
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.build_common import tvm_versions
from workers.executors.base import Executor, not_mcu
from workers.executors.requests import BuildRequest, MeasureRequest
from workers.program_index import reuse_key

TVM = tvm_versions()[0]
HEAVY = ("ray", "tvm")


@pytest.fixture(scope="module", autouse=True)
def _no_ray_or_tvm() -> Iterator[None]:
    """None of these tests may start Ray or import TVM (checked where they were not imported before)."""
    before = {name for name in HEAVY if name in sys.modules}
    yield
    assert {name for name in HEAVY if name in sys.modules} <= before, "a scheduler rule test imported Ray or TVM"


class FakeBuilder:
    """Builds at once; ``program(job)`` says which jobs have the identical program (default: each its own)."""

    def __init__(self, program: Callable[[Job], str] = lambda job: job.key) -> None:
        self.program = program
        self.compiled: list[str] = []  # build keys that ran codegen

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        job, claim = request.job, request.claim
        key, fingerprint = job.build_key(TVM), self.program(job)
        owner = claim(reuse_key(fingerprint, job), key) if claim is not None else None
        if owner is not None:
            return Build(build_key=key, status="ok", fingerprint=fingerprint, reused_from=owner), None
        self.compiled.append(key)
        data = f"artifact of {fingerprint}".encode()
        sha = hashlib.sha256(data).hexdigest()
        return Build(build_key=key, status="ok", fingerprint=fingerprint, artifact_sha256=sha, artifact_size=1), data


class FakeRunner:
    """Runs at once on a board of the job's key: the first of ``boards`` not avoided or preferred against.

    ``outcome(job, attempt, board)`` gives the status (default ok); ``calls`` records what each run was given.
    """

    def __init__(self, boards: tuple[str, ...] = ("b1", "b2"), outcome: Callable[..., str] | None = None) -> None:
        self.boards, self.outcome = boards, outcome or (lambda _job, _attempt, _board: "ok")
        self.calls: list[dict[str, Any]] = []

    def run(self, request: MeasureRequest) -> Run:
        job, attempt, builds_in_flight = request.job, request.attempt, request.builds_in_flight
        ids = [f"{job.target.board_key}@{b}" for b in self.boards]
        usable = [b for b in ids if b not in request.avoid]
        chosen = next((b for b in usable if b not in request.prefer_not), usable[0])
        board = {
            f: getattr(request, f) for f in ("avoid", "prefer_not", "registration_wait_s", "golden", "checked_boards")
        }
        self.calls.append({"job": job.key, "attempt": attempt, "board": chosen, "artifact": request.artifact, **board,
                           "builds_in_flight": builds_in_flight})  # fmt: skip
        status = self.outcome(job, attempt, chosen)
        samples = (1.0,) if status == "ok" else ()
        return Run(job_key=job.key, attempt=attempt, status=status, board_id=chosen, samples_ms=samples,
                   builds_in_flight=builds_in_flight, error=None if status == "ok" else "board said no")  # fmt: skip


class Events(Listener):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_build_done(self, job: Job, build: Build) -> None:
        self.seen.append("build_done")

    def on_run_done(self, run: Run, *, final: bool, equivalent: bool) -> None:
        self.seen.append("equivalent" if equivalent else "run_done")

    def on_retry(self, run: Run) -> None:
        self.seen.append("retry")

    def on_cancel(self, pending: int) -> None:
        self.seen.append("cancel")


def make_spec(tmp_path: Path, board_keys: tuple[str, ...], opt_levels: tuple[int, ...] = (2,)) -> SweepSpec:
    """tiny_mlp on one llvm target per board key (distinct targets: distinct build keys), vm-bytecode."""
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "tiny_mlp.onnx")
    spec = load_spec(write_sweep(tmp_path, '[[models]]\npath = "tiny_mlp.onnx"\n[measure]\nnumber = 1\nrepeat = 1\n'))
    targets = tuple(
        TargetSpec(f"t{i}", tvm_target={"kind": "llvm", "fake": i}, board_key=key, arch="x86_64")
        for i, key in enumerate(board_keys)
    )
    return replace(spec, targets=targets, opt_levels=opt_levels)


def sweep(
    spec: SweepSpec,
    store: ResultStore,
    tmp_path: Path,
    builder: FakeBuilder,
    runner: FakeRunner,
    pool: InlinePool | None = None,
    boards: FixedBoards | None = None,
    **options: Any,
):
    executors = options.pop("executors", None) or {
        "vm-bytecode": Executor("vm-bytecode", builder, runner, accepts=not_mcu)
    }
    return run_sweep(
        spec,
        store,
        "tracker.invalid:9190",
        ArtifactCache(tmp_path / "artifacts"),
        health_checks=False,
        executors=executors,
        pool=pool or InlinePool(),
        boards=boards or FixedBoards(per_key={"k": 2}),
        **options,
    )


def model_ref() -> ModelRef:
    return ModelRef("tiny_mlp", "0" * 64, "tiny_mlp.onnx", (("x", (1, 16), "float32"),))


def runs_of(store: ResultStore, sweep_id: str) -> list[tuple[str, int, str, str | None, str | None]]:
    """(job key, attempt, status, board, equivalent_to) of every run of the sweep, in order."""
    from sqlalchemy import select

    with store.read() as s:
        rows = s.execute(
            select(m.Job.job_key, m.Run.attempt, m.Run.status, m.Run.board_id, m.Run.equivalent_to)
            .join(m.Job, m.Job.id == m.Run.job_id)
            .where(m.Job.sweep_id == sweep_id)
            .order_by(m.Run.id)
        ).all()
    return [tuple(r) for r in rows]


def test_identical_programs_compile_once_and_share_the_artifact(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k",), opt_levels=(2, 3))
    builder = FakeBuilder(program=lambda job: "one program")  # opt_level 2 and 3 lower to the same IR
    runner = FakeRunner()
    outcome = sweep(spec, store, tmp_path, builder, runner, boards=FixedBoards(per_key={"k": 1}))
    assert len(builder.compiled) == 1 and outcome.built == 2 and outcome.codegen_skipped == 1, outcome
    builds = [store.get_build(j.build_key(TVM)) for j in plan_jobs(spec)]
    assert {b.artifact_sha256 for b in builds} == {builds[0].artifact_sha256} and builds[0].artifact_sha256


def test_a_model_file_changed_after_it_was_read_is_refused_before_anything_is_recorded(
    tmp_path: Path, store: ResultStore
) -> None:
    spec = make_spec(tmp_path, ("k",))
    onnx.save(model_zoo.tiny_mlp(seed=1), tmp_path / "tiny_mlp.onnx")  # re-exported while the farm started
    with pytest.raises(SpecError, match=r"tiny_mlp.onnx changed since the sweep file was read"):
        sweep(spec, store, tmp_path, FakeBuilder(), FakeRunner())
    assert store.get_sweep(spec.sweep_id) is None  # no rows claim the old model's hash
    (tmp_path / "tiny_mlp.onnx").unlink()
    with pytest.raises(SpecError, match=r"tiny_mlp.onnx: cannot be read now"):
        sweep(spec, store, tmp_path, FakeBuilder(), FakeRunner())


def test_a_follower_gets_the_leaders_run_with_equivalent_to(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k",), opt_levels=(2, 3))
    events = Events()
    runner = FakeRunner()
    outcome = sweep(spec, store, tmp_path, FakeBuilder(program=lambda job: "one program"), runner,
                    listeners=(events,))  # fmt: skip
    assert len(runner.calls) == 1, runner.calls
    (leader, _, status, board, none), (follower, attempt, copied, same_board, equivalent_to) = runs_of(
        store, spec.sweep_id
    )
    assert none is None and equivalent_to == leader and follower != leader
    assert (attempt, copied, same_board) == (1, status, board)
    assert (outcome.measured, outcome.equivalent, dict(outcome.statuses)) == (1, 1, {"ok": 2})
    assert events.seen.count("equivalent") == 1


def test_no_build_runs_while_a_fenced_board_measures(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("host", "host", "host", "remote", "remote", "remote"))
    pool = InlinePool(builds_at_once=2)
    runner = FakeRunner()
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), runner, pool=pool,
                    boards=FixedBoards(sharing={"host"}, per_key={"host": 3, "remote": 3}))  # fmt: skip
    assert dict(outcome.statuses) == {"ok": 6}

    def fenced(kind: str, items: list[Any]) -> bool:
        return kind == "measure" and items[0].request.job.target.board_key == "host"

    for kind, items, in_flight in pool.submitted:
        if kind == "build":
            assert not any(fenced(*other) for other in in_flight), "a build started while a host board was timed"
        if fenced(kind, items):
            assert not any(k == "build" or fenced(k, i) for k, i in in_flight), "a host board was not timed alone"
    host_runs = [
        c for c in runner.calls if c["job"] in {j.key for j in plan_jobs(spec) if j.target.board_key == "host"}
    ]
    assert len(host_runs) == 3 and {c["builds_in_flight"] for c in host_runs} == {0}
    # Remote boards are not fenced: one of them was measured while a build ran.
    assert any(c["builds_in_flight"] for c in runner.calls if c not in host_runs)


def test_keys_sharing_this_machine_are_timed_one_at_a_time_and_take_turns(tmp_path: Path, store: ResultStore) -> None:
    # A release's host boards (host-tvm0.26.0) run on the same cores as the installed release's (host).
    keys = ("host", "host-tvm0.26.0")
    spec = make_spec(tmp_path, keys * 3)
    pool = InlinePool(builds_at_once=2)
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), FakeRunner(), pool=pool,
                    boards=FixedBoards(sharing=set(keys), per_key=dict.fromkeys(keys, 2)))  # fmt: skip
    assert dict(outcome.statuses) == {"ok": 6}
    measures = [(items, in_flight) for kind, items, in_flight in pool.submitted if kind == "measure"]
    for _items, in_flight in measures:
        assert not any(kind == "measure" for kind, _ in in_flight), "two timings on this machine's cores at once"
    order = [items[0].request.job.target.board_key for items, _ in measures]
    counts = {key: sum(len(items) for items, _ in measures if items[0].request.job.target.board_key == key)
              for key in keys}  # fmt: skip
    assert counts == dict.fromkeys(keys, 3)
    # While both keys had jobs waiting, no key was served twice in a row (the batches take turns).
    assert all(a != b for a, b in itertools.pairwise(order)), order


def test_an_infra_failure_runs_again_on_another_board_then_ends(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k", "k2"))
    flaky, dead = (j.key for j in plan_jobs(spec))  # k: fails once on b1; k2: every board dies
    events = Events()

    def outcome_of(job: Job, attempt: int, board: str) -> str:
        return "infra" if job.key == dead or (board.endswith("@b1") and attempt == 1) else "ok"

    runner = FakeRunner(outcome=outcome_of)
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), runner, listeners=(events,))
    runs = runs_of(store, spec.sweep_id)
    assert [r[:4] for r in runs if r[0] == flaky] == [(flaky, 1, "infra", "k@b1"), (flaky, 2, "ok", "k@b2")]
    assert [r[1:3] for r in runs if r[0] == dead] == [(1, "infra"), (2, "infra")]  # MAX_ATTEMPTS, then it ends
    retried = [c for c in runner.calls if c["attempt"] == 2 and c["job"] == flaky]
    assert retried[0]["prefer_not"] == {"k@b1"}
    assert store.job_statuses(spec.sweep_id) == {flaky: "ok", dead: "infra"}
    assert dict(outcome.statuses) == {"ok": 1, "infra": 1} and events.seen.count("retry") == 2


def test_a_quarantined_board_is_avoided(tmp_path: Path, store: ResultStore) -> None:
    with store._tx() as s:  # a board an earlier sweep quarantined
        s.add(m.Board(id="k@b1", key="k", state="quarantined", consecutive_failures=3, last_seen=datetime.now(UTC)))
    spec = make_spec(tmp_path, ("k", "k"))
    runner = FakeRunner()
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), runner)
    assert dict(outcome.statuses) == {"ok": 2}
    assert all(c["avoid"] == {"k@b1"} for c in runner.calls) and len(runner.calls) == 2
    assert {r[3] for r in runs_of(store, spec.sweep_id)} == {"k@b2"}


def test_a_board_quarantined_mid_sweep_is_avoided_from_then_on(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k",) * 5)
    runner = FakeRunner(outcome=lambda _job, _attempt, board: "infra" if board == "k@b1" else "ok")
    sweep(spec, store, tmp_path, FakeBuilder(), runner, boards=FixedBoards(per_key={"k": 1}))
    assert store.board_states()["k@b1"] == "quarantined"
    on_b1 = [i for i, c in enumerate(runner.calls) if c["board"] == "k@b1"]
    assert len(on_b1) == 3  # QUARANTINE_AFTER faults in a row, then never again
    assert all("k@b1" in c["avoid"] for c in runner.calls[on_b1[-1] + 1 :]) and runner.calls[on_b1[-1] + 1 :]


def test_cancel_ends_pending_jobs_and_keeps_finished_rows(
    tmp_path: Path, store: ResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "CANCEL_POLL_S", 0.0)
    spec = make_spec(tmp_path, ("k",) * 6)
    events = Events()

    def cancel_after_two(job: Job, attempt: int, board: str) -> str:
        if len(runner.calls) == 2:
            store.request_cancel(spec.sweep_id)  # `tvmbench sweep cancel` from another process
        return "ok"

    runner = FakeRunner(outcome=cancel_after_two)
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), runner, boards=FixedBoards(per_key={"k": 1}),
                    listeners=(events,))  # fmt: skip
    statuses = Counter(store.job_statuses(spec.sweep_id).values())
    assert statuses == Counter({"ok": 2, "cancelled": 4}), statuses
    assert len(runner.calls) == 2 and store.get_sweep(spec.sweep_id).status == "cancelled"
    assert outcome.statuses == Counter({"ok": 2, "cancelled": 4}) and events.seen[-1] == "cancel"


def test_a_run_after_a_cancel_keeps_the_sweep_cancelled_and_a_resume_finishes_it(
    tmp_path: Path, store: ResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "CANCEL_POLL_S", 0.0)
    spec = make_spec(tmp_path, ("k",) * 3)

    def cancel_after_one(job: Job, attempt: int, board: str) -> str:
        if len(first.calls) == 1:
            store.request_cancel(spec.sweep_id)
        return "ok"

    first = FakeRunner(outcome=cancel_after_one)
    sweep(spec, store, tmp_path, FakeBuilder(), first, boards=FixedBoards(per_key={"k": 1}))
    assert store.get_sweep(spec.sweep_id).status == "cancelled"
    # `sweep run` of the file again: the cancelled jobs are final to it, and it ran nothing. It stored the
    # sweep as complete before, with two jobs that never ran.
    again = FakeRunner()
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), again)
    assert again.calls == [] and outcome.statuses == Counter({"ok": 1, "cancelled": 2}), outcome
    assert store.get_sweep(spec.sweep_id).status == "cancelled"
    # `sweep plan` said "0 job(s) to run, 3 already final", while `sweep resume` runs two of them again.
    from rich.console import Console

    from orchestrator.plan import plan_rows
    from tvmbench.answers.report import plan_table

    console = Console(record=True, width=300)
    plan_table(console, spec.sweep_id, plan_rows(spec, store))
    assert (
        f"0 job(s) to run, 3 already final (2 cancelled: `tvmbench sweep resume {spec.sweep_id}` runs them again)"
        in console.export_text()
    )
    resumed = sweep(spec, store, tmp_path, FakeBuilder(), FakeRunner(), reopen_cancelled=True)
    assert resumed.statuses == Counter({"ok": 3}) and store.get_sweep(spec.sweep_id).status == "complete"


def test_a_second_run_skips_final_jobs(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k", "gone"))
    _, waiting = (j.key for j in plan_jobs(spec))
    first = FakeRunner(outcome=lambda job, _a, _b: "pending-device" if job.key == waiting else "ok")
    assert not sweep(spec, store, tmp_path, FakeBuilder(), first).complete
    builder, second = FakeBuilder(), FakeRunner()
    outcome = sweep(spec, store, tmp_path, builder, second)
    assert [(c["job"], c["attempt"]) for c in second.calls] == [(waiting, 2)]  # attempts go on counting
    assert builder.compiled == [] and outcome.cached == 1 and outcome.already_final == 1, outcome
    assert outcome.complete and store.get_sweep(spec.sweep_id).status == "complete"


class LosingBuilder(FakeBuilder):
    """Its worker dies building the jobs in ``lose`` (TaskLost out of the pool, as after Ray's last retry),
    after claiming their program in the index as a real build does first."""

    def __init__(self, lose: set[str], program: Callable[[Job], str] = lambda job: job.key) -> None:
        super().__init__(program)
        self.lose = lose

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        job = request.job
        if job.key not in self.lose:
            return super().build(request)
        if request.claim is not None:
            request.claim(reuse_key(self.program(job), job), job.build_key(TVM))
        raise TaskLost("WorkerCrashedError: the worker died (killed by the OOM killer)")


def job_rows(store: ResultStore, sweep_id: str) -> dict[str, tuple[str, str | None, object]]:
    """job key -> (status, error, finished_at) of the sweep's jobs."""
    from sqlalchemy import select

    with store.read() as s:
        rows = s.execute(
            select(m.Job.job_key, m.Job.status, m.Job.error, m.Job.finished_at).where(m.Job.sweep_id == sweep_id)
        )
        return {key: (status, error, finished) for key, status, error, finished in rows}


def test_a_build_that_lost_its_worker_stays_pending_and_a_resume_builds_it(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k", "k2"))
    kept, lost = plan_jobs(spec)
    outcome = sweep(spec, store, tmp_path, LosingBuilder({lost.key}), FakeRunner())
    assert not outcome.complete and dict(outcome.statuses) == {"ok": 1, "pending": 1}, outcome
    rows = job_rows(store, spec.sweep_id)
    assert rows[kept.key][0] == "ok"
    status, error, finished_at = rows[lost.key]
    assert status == "pending" and finished_at is None
    assert "lost its Ray worker (WorkerCrashedError" in error and f"sweep resume {spec.sweep_id}" in error, error
    assert store.get_build(lost.build_key(TVM)) is None  # not a compiler failure: no build row says so
    builder = FakeBuilder()
    outcome = sweep(spec, store, tmp_path, builder, FakeRunner())
    assert builder.compiled == [lost.build_key(TVM)] and outcome.complete and outcome.already_final == 1, outcome
    assert store.job_statuses(spec.sweep_id) == {kept.key: "ok", lost.key: "ok"}


def test_a_build_reusing_the_program_of_a_lost_build_compiles_it_itself(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k",), opt_levels=(2, 3))
    first, second = plan_jobs(spec)
    builder = LosingBuilder({first.key}, program=lambda job: "one program")  # O2 and O3 lower alike
    outcome = sweep(spec, store, tmp_path, builder, FakeRunner(), pool=InlinePool(builds_at_once=2))
    # The second claimed the program after the first (its claim still in the index) died: not parked for ever.
    assert builder.compiled == [second.build_key(TVM)], builder.compiled
    assert store.job_statuses(spec.sweep_id) == {first.key: "pending", second.key: "ok"}
    assert dict(outcome.statuses) == {"ok": 1, "pending": 1}


def test_a_sweep_with_nothing_left_starts_no_farm_and_no_pool(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k", "k"))
    sweep(spec, store, tmp_path, FakeBuilder(), FakeRunner())
    # No tracker, no Ray, no pool given: finding that nothing is left needs none of them.
    outcome = execute_sweep(spec, store, tmp_path / "home", tracker="tracker.invalid:1")
    assert (outcome.already_final, dict(outcome.statuses)) == (2, {"ok": 2})
    assert store.get_sweep(spec.sweep_id).status == "complete"


def test_cheap_builds_and_measurements_share_tasks(tmp_path: Path, store: ResultStore) -> None:
    spec = make_spec(tmp_path, ("k",) * 40)
    pool = InlinePool(builds_at_once=2)
    outcome = sweep(spec, store, tmp_path, FakeBuilder(), FakeRunner(), pool=pool,
                    boards=FixedBoards(per_key={"k": 1}))  # fmt: skip
    assert dict(outcome.statuses) == {"ok": 40} and outcome.built == 40
    sizes = Counter(kind for kind, _, _ in pool.submitted)
    assert sizes["build"] < 40 and sizes["measure"] < 40, sizes  # batched once the first were seen to be quick
    assert [r[1] for r in runs_of(store, spec.sweep_id)] == [1] * 40


def _build_tasks(pool: InlinePool) -> list[list[tuple[int, str]]]:
    """(opt_level, executor) of the jobs of each build task, in submission order."""
    return [
        sorted((i.job.opt_level, i.job.executor) for i in items) for kind, items, _ in pool.submitted if kind == "build"
    ]


@pytest.mark.parametrize("lowering", ["shared", None])
def test_builds_that_lower_alike_share_a_task_unless_a_cpu_would_idle(
    tmp_path: Path, store: ResultStore, lowering: str | None
) -> None:
    builder, runner = FakeBuilder(), FakeRunner()
    names = ("vm-bytecode", "vm-compiled")
    executors = {n: Executor(n, builder, runner, accepts=not_mcu, lowering=lowering) for n in names}
    spec = replace(make_spec(tmp_path, ("k",), opt_levels=(1, 2)), executors=names)
    pool = InlinePool(builds_at_once=2)
    outcome = sweep(spec, store, tmp_path, builder, runner, pool=pool, executors=executors)
    assert dict(outcome.statuses) == {"ok": 4} and len(builder.compiled) == 4
    if lowering is None:  # each build its own task while none is known to be cheap
        assert _build_tasks(pool)[:2] == [[(1, "vm-bytecode")], [(2, "vm-bytecode")]]
    else:  # two CPUs, each with a configuration whose two builds share one pipeline run
        assert _build_tasks(pool) == [
            [(1, "vm-bytecode"), (1, "vm-compiled")],
            [(2, "vm-bytecode"), (2, "vm-compiled")],
        ]
    # One configuration on two free CPUs: sharing would leave one idle, so the two builds run side by side.
    one = replace(spec, opt_levels=(3,), name="one configuration")
    pool = InlinePool(builds_at_once=2)
    sweep(one, store, tmp_path, builder, runner, pool=pool, executors=executors)
    assert _build_tasks(pool) == [[(3, "vm-bytecode")], [(3, "vm-compiled")]]


class BaselineRunner(FakeRunner):
    """A FakeRunner whose ok runs have a median (the baseline an auto budget tunes until); logs its runs."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def run(self, request: MeasureRequest) -> Run:
        self.log.append(f"run {request.job.executor} {'auto' if request.job.tuning_auto else request.job.tuning}")
        return replace(super().run(request), median_ms=2.5)


class LoggingBuilder(FakeBuilder):
    """A FakeBuilder that logs each build and keeps the baseline its tuning env was given."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log, self.baselines = log, {}

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        job = request.job
        self.log.append(f"build {job.executor} {'auto' if job.tuning_auto else job.tuning}")
        if job.tuning_auto is not None:
            self.baselines[job.key] = request.tuning_env.baseline
        return super().build(request)


@pytest.fixture
def no_tracker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuned job's env counts its key's boards on the tracker (which imports TVM's RPC): here there is none."""

    def unreachable(tracker: str) -> Any:
        raise OSError(f"no tracker at {tracker}")

    monkeypatch.setattr("workers.tracker_client.tracker_summary", unreachable)


def auto_sweep(tmp_path: Path, executors: tuple[str, ...], label: str = "") -> SweepSpec:
    """tiny_mlp untuned and with an auto budget tuning until onnxruntime, on board key "k"."""
    spec = make_spec(tmp_path, ("k",))
    auto = AutoBudget(until="onnxruntime", max_trials=8)
    return replace(spec, executors=executors, tunings=(0, "auto"), tuning_auto=auto, label=label)


def fake_executors(builder: FakeBuilder, runner: FakeRunner, names: tuple[str, ...]) -> dict[str, Executor]:
    return {name: Executor(name, builder, runner, accepts=not_mcu) for name in names}


def test_an_auto_build_until_the_baseline_starts_once_the_baseline_job_is_measured(
    tmp_path: Path, store: ResultStore, no_tracker: None
) -> None:
    log: list[str] = []
    builder, runner = LoggingBuilder(log), BaselineRunner(log)
    names = ("onnxruntime", "vm-bytecode")
    spec = auto_sweep(tmp_path, names)
    outcome = sweep(spec, store, tmp_path, builder, runner, pool=InlinePool(builds_at_once=3),
                    executors=fake_executors(builder, runner, names))  # fmt: skip
    assert dict(outcome.statuses) == {"ok": 3}, outcome
    # Three CPUs: both other builds start at once, the auto build only after the baseline's run.
    assert log.index("build vm-bytecode auto") > log.index("run onnxruntime 0"), log
    assert log.index("build vm-bytecode 0") < log.index("run onnxruntime 0"), log
    (auto_job,) = [j for j in plan_jobs(spec) if j.tuning_auto]
    (ort_job,) = [j for j in plan_jobs(spec) if j.executor == "onnxruntime"]
    assert builder.baselines[auto_job.key] == {"ms": 2.5, "source": f"onnxruntime job {ort_job.key[:12]} of this sweep"}


def test_without_a_baseline_job_an_auto_build_takes_the_stored_median_or_says_why_not(
    tmp_path: Path, store: ResultStore, no_tracker: None
) -> None:
    log: list[str] = []
    builder, runner = LoggingBuilder(log), BaselineRunner(log)
    alone = auto_sweep(tmp_path, ("vm-bytecode",), label="alone")
    sweep(alone, store, tmp_path, builder, runner, executors=fake_executors(builder, runner, ("vm-bytecode",)))
    (auto_job,) = [j for j in plan_jobs(alone) if j.tuning_auto]
    assert "no ok onnxruntime result of tiny_mlp on board key k" in builder.baselines.pop(auto_job.key)["why"]
    names = ("onnxruntime", "vm-bytecode")
    with_ort = auto_sweep(tmp_path, names, label="with ort")
    sweep(with_ort, store, tmp_path, builder, runner, executors=fake_executors(builder, runner, names))
    builder.baselines.clear()
    # A new sweep with no baseline job of its own (and another cap: a build of its own, not the cached one).
    later = replace(auto_sweep(tmp_path, ("vm-bytecode",)), tuning_auto=AutoBudget(until="onnxruntime", max_trials=9))
    sweep(later, store, tmp_path, builder, runner, executors=fake_executors(builder, runner, ("vm-bytecode",)))
    (auto_job,) = [j for j in plan_jobs(later) if j.tuning_auto]
    (ort_job,) = [j for j in plan_jobs(with_ort) if j.executor == "onnxruntime"]
    got = builder.baselines[auto_job.key]
    assert got["ms"] == 2.5 and got["source"].startswith(f"stored onnxruntime job {ort_job.key[:12]} of sweep"), got


def test_parked_builds_are_released_when_nothing_else_can_happen() -> None:
    ort = Job(model=model_ref(), target=TargetSpec("t", {"kind": "llvm"}, "k", "x86_64"), executor="onnxruntime",
              opt_level=2, pipeline="per-target")  # fmt: skip
    auto = replace(ort, executor="vm-bytecode", tuning=8, tuning_auto=AutoBudget(until="onnxruntime"))
    fixed = replace(auto, tuning_auto=AutoBudget(until=1.5))  # a number of ms waits for nobody
    states = {k: [JobState(j, k)] for k, j in (("b-ort", ort), ("b-auto", auto), ("b-fixed", fixed))}
    wait = BaselineWait(states)
    assert wait.hold(["b-ort", "b-auto", "b-fixed"]) == ["b-ort", "b-fixed"]
    assert wait.released() == [] and wait.parked == {"b-auto": states["b-ort"]}
    assert wait.released(idle=True) == ["b-auto"] and not wait.parked  # the safety net: never stuck
    cached = BaselineWait(states)
    assert cached.hold(["b-ort"]) == ["b-ort"] and not cached.parked  # a cached auto build waits for nothing
    states["b-ort"][0].status = "pending-device"  # an outcome, though not ok: the build goes, without a median
    again = BaselineWait(states)
    again.hold(["b-auto"])
    assert again.released() == ["b-auto"] and again.baseline(auto) is None


def test_tuned_builds_of_the_same_workloads_take_turns_smallest_budget_first(
    tmp_path: Path, store: ResultStore, no_tracker: None
) -> None:
    log: list[str] = []
    builder, runner = LoggingBuilder(log), FakeRunner()
    names = ("vm-bytecode", "vm-compiled")
    spec = replace(make_spec(tmp_path, ("k",)), executors=names, tunings=(0, 16, 8))
    pool = InlinePool(builds_at_once=4)
    outcome = sweep(spec, store, tmp_path, builder, runner, pool=pool, executors=fake_executors(builder, runner, names))
    assert dict(outcome.statuses) == {"ok": 6}, outcome
    tuned = [line for line in log if not line.endswith(" 0")]
    assert tuned == ["build vm-bytecode 8", "build vm-compiled 8", "build vm-bytecode 16", "build vm-compiled 16"]
    for kind, items, in_flight in pool.submitted:
        if kind == "build" and any(item.job.tuning for item in items):  # no other tuned build beside it
            assert not [i for k, its in in_flight if k == "build" for i in its if i.job.tuning], in_flight
    # The untuned builds do not wait: both were submitted before the first tuned build finished.
    builds = [items for kind, items, _ in pool.submitted if kind == "build"]
    first_tuned = next(i for i, items in enumerate(builds) if items[0].job.tuning)
    assert sum(1 for items in builds[: first_tuned + 2] for item in items if not item.job.tuning) == 2, log


class TunedBuilder(FakeBuilder):
    """A FakeBuilder whose tuned builds say they ran their whole budget, as the tuning stage's provenance does."""

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        build, data = super().build(request)
        job = request.job
        tuning = {"trials_run": job.tuning - 2, "trials_from_records": 2} if job.tuning else None
        return replace(build, tuning=tuning), data


class TuningEvents(Listener):
    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def on_tuning(self, done: int, budget: int) -> None:
        self.seen.append((done, budget))


def test_the_progress_ends_at_each_tuned_builds_final_trials(
    tmp_path: Path, store: ResultStore, no_tracker: None
) -> None:
    # The pool's progress table shows nothing here (as when a build's last report lands after the last poll).
    builder, runner, events = TunedBuilder(), FakeRunner(), TuningEvents()
    spec = replace(make_spec(tmp_path, ("k",)), tunings=(0, 8, 16))
    outcome = sweep(spec, store, tmp_path, builder, runner, listeners=(events,))
    assert dict(outcome.statuses) == {"ok": 3}, outcome
    assert events.seen == [(8, 8), (24, 24)], events.seen


class AutoBuilder(FakeBuilder):
    """A FakeBuilder whose auto builds stop by ``rule`` (tuning nothing when handed a stop) and keep what
    they were handed."""

    def __init__(self, rule: str) -> None:
        super().__init__()
        self.rule, self.handed = rule, {}

    def build(self, request: BuildRequest) -> tuple[Build, bytes | None]:
        build, data = super().build(request)
        job, tuned_by = request.job, request.tuning_env.tuned_by if request.tuning_env else None
        if job.tuning_auto is None:
            return build, data
        self.handed[job.executor] = tuned_by
        stop = {"minutes": 15.0, "max_minutes": 15.0}
        ran = 0 if tuned_by else 40
        tuning = {"trials_run": ran, "trials_from_records": 40 - ran, "stopped_by": self.rule, "stop": stop}
        return replace(build, tuning=tuning), data


@pytest.mark.parametrize("rule", ["max_minutes", "error"])
def test_an_auto_twin_takes_the_stop_of_the_build_that_tuned_its_workloads(
    tmp_path: Path, store: ResultStore, no_tracker: None, rule: str
) -> None:
    names = ("vm-bytecode", "vm-compiled")
    builder, runner = AutoBuilder(rule), FakeRunner()
    spec = replace(make_spec(tmp_path, ("k",)), executors=names, tunings=("auto",), tuning_auto=AutoBudget())
    outcome = sweep(spec, store, tmp_path, builder, runner, executors=fake_executors(builder, runner, names))
    assert dict(outcome.statuses) == {"ok": 2}, outcome
    first, twin = (plan_jobs(spec)[i] for i in (0, 1))
    assert builder.handed[first.executor] is None
    if rule == "error":  # a search that crashed hands nothing on: the twin searches for itself
        assert builder.handed[twin.executor] is None
        return
    stop = {"minutes": 15.0, "max_minutes": 15.0}
    key = first.build_key(tvm_versions()[0])
    assert builder.handed[twin.executor] == {"build_key": key, "stopped_by": rule, "stop": stop}


def test_only_the_same_rules_and_settings_hand_a_stop_on() -> None:
    base = Job(model=model_ref(), target=TargetSpec("t", {"kind": "llvm"}, "k", "x86_64"), executor="vm-bytecode",
               opt_level=2, pipeline="per-target", tuning=2000, tuning_auto=AutoBudget())  # fmt: skip
    jobs = {
        "first": base,
        "twin": replace(base, executor="vm-compiled", opt_level=3),
        "longer": replace(base, tuning_auto=AutoBudget(max_minutes=30.0)),
        "mlp": replace(base, tuning_settings=replace(base.tuning_settings, cost_model="mlp")),
        "fixed": replace(base, tuning=64, tuning_auto=None),
        "nhwc": replace(base, layout="NHWC"),  # takes its turn, but its workloads are its own: no stop handed
    }
    turns = TuningTurns({k: [JobState(j, k)] for k, j in jobs.items()})
    tuning = {"stopped_by": "plateau", "stop": {"trials": 64, "tuned_by": "older"}}
    turns.tuned("first", Build("first", status="ok", tuning=tuning))
    assert turns.tuned_by("twin") == {"build_key": "first", "stopped_by": "plateau", "stop": {"trials": 64}}
    assert [turns.tuned_by(k) for k in ("longer", "mlp", "fixed", "nhwc")] == [None, None, None, None]
    failed = TuningTurns({k: [JobState(j, k)] for k, j in jobs.items()})
    failed.tuned("first", Build("first", status="build", error="x", tuning=tuning))
    assert failed.tuned_by("twin") is None  # a failed build hands nothing on


def test_turns_are_per_workload_group() -> None:
    base = Job(model=model_ref(), target=TargetSpec("t", {"kind": "llvm"}, "k", "x86_64"), executor="vm-bytecode",
               opt_level=2, pipeline="per-target", tuning=64)  # fmt: skip
    jobs = {
        "a64": base,
        "a8": replace(base, executor="vm-compiled", opt_level=3, tuning=8),  # same tasks: same group
        # Another layout takes its turn too: without convolutions it has the same tasks (before, a conv1d
        # net's NCHW and NHWC builds searched one workload side by side); with them, the same boards.
        "nhwc": replace(base, layout="NHWC"),
        "other-key": replace(base, target=TargetSpec("t", {"kind": "llvm"}, "k2", "x86_64")),
        "untuned": replace(base, tuning=0),
    }
    turns = TuningTurns({k: [JobState(j, k)] for k, j in jobs.items()})
    queued = turns.order(list(jobs))
    assert queued == ["a8", "a64", "nhwc", "other-key", "untuned"]
    turns.started("a8")
    assert turns.first_free(queued[1:]) == 2  # a64 and nhwc wait; the other key may go
    assert turns.first_free(["a64", "untuned"]) == 1
    turns.finished("a8")
    assert turns.first_free(["a64"]) == 0


def test_the_rules_run_without_ray_or_tvm_in_a_fresh_process() -> None:
    """The module's tests again in a process of their own, where the fixture's check is not vacuous."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "not fresh_process"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "error" not in proc.stdout.splitlines()[-1], proc.stdout[-500:]
