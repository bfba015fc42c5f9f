"""A board key with several boards measures on all of them at once; a key on this machine's cores, one at a time.

Real Ray, a real tracker and real board agents; the Builder and Runner are stand-ins (the seam's fakes):
the build returns at once and the measurement holds a real session on a real board until a second one
does, so what is checked is the scheduler's concurrency per key, not TVM.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import orchestrator.scheduler as scheduler
from benchmarks.sweep_speed import NoopBuilder
from db.store import ResultStore
from orchestrator.farm import LocalFarm
from orchestrator.scheduling import measurements
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from workers.artifacts import ArtifactCache
from workers.board_session import SessionRunner, ok_run
from workers.executors.base import Executor, not_mcu
from workers.executors.requests import MeasureRequest
from workers.tracker_client import Session


class HoldingRunner(SessionRunner):
    """Holds a real session on a board until a second measurement holds one too (or ``wait_s`` passes).

    Each measurement leaves a mark in ``meeting`` when it starts holding its board. Waiting for the
    second mark, not for a fixed time, makes the overlap certain however slow the machine is: a key
    given two slots meets its second measurement, a key given one never does (the first waits
    ``wait_s`` alone and the later ones find its mark and return at once).
    """

    checks_arch = False

    def __init__(self, meeting: Path, wait_s: float) -> None:
        self.meeting, self.wait_s = meeting, wait_s

    def on_board(self, session: Session, request: MeasureRequest, base: dict[str, Any]) -> Any:
        started = time.time()
        (self.meeting / f"{request.job.key}-{request.attempt}").touch()
        deadline = time.monotonic() + self.wait_s
        while len(list(self.meeting.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        return ok_run([(time.time() - started) * 1e3], **{**base, "started_at": started})


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def _sweep(tmp_path: Path, models_dir: Path, tracker: str, key: str, wait_s: float) -> list[tuple[float, float, str]]:
    spec = load_spec(
        write_sweep(
            tmp_path,
            f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n'
            f'[[targets]]\nname = "t"\ntarget = {{ kind = "llvm" }}\nboard_key = "{key}"\narch = "x86_64"\n'
            '[axes]\nexecutor = ["vm-bytecode"]\nopt_level = [0, 1, 2, 3]\n',
        )
    )
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    runner = HoldingRunner(meeting, wait_s)
    executors = {"vm-bytecode": Executor("vm-bytecode", NoopBuilder(), runner, accepts=not_mcu)}
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        outcome = scheduler.run_sweep(
            spec, store, tracker, ArtifactCache(tmp_path / "artifacts"), health_checks=False, executors=executors
        )
        assert dict(outcome.statuses) == {"ok": 4}, outcome
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT started_at, finished_at, board_id FROM runs").fetchall()
    finally:
        store.close()
    return [(_epoch(s), _epoch(f), b) for s, f, b in rows]


def _epoch(value: Any) -> float:
    from datetime import UTC, datetime

    stamp = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


@pytest.fixture
def two_boards(tmp_path: Path):
    farm = LocalFarm.start(tmp_path / "farm", {"multi": 2})
    yield farm
    farm.stop()


def test_a_key_with_two_remote_boards_measures_two_at_once(
    tmp_path: Path, models_dir: Path, ray_local: None, two_boards: LocalFarm, monkeypatch
) -> None:
    # The boards run on this machine; told they do not share its cores, the key gets a slot per board.
    monkeypatch.setattr(measurements, "host_sharing_keys", lambda _tracker: set())
    # A long wait: it only runs out if the scheduler never lets the second measurement start.
    runs = _sweep(tmp_path, models_dir, two_boards.tracker, "multi", wait_s=120.0)
    assert _max_overlap([(s, f) for s, f, _ in runs]) == 2, runs
    assert len({b for _, _, b in runs}) == 2, "both boards were used"


def test_a_key_on_this_machines_cores_measures_one_at_a_time(
    tmp_path: Path, models_dir: Path, ray_local: None, two_boards: LocalFarm
) -> None:
    # A wrongly granted second slot would start its measurement within these seconds and overlap the first.
    runs = _sweep(tmp_path, models_dir, two_boards.tracker, "multi", wait_s=3.0)
    assert _max_overlap([(s, f) for s, f, _ in runs]) == 1, runs
