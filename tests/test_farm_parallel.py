"""A board key with several boards measures on all of them at once; a key on this machine's cores, one at a time.

Real Ray, a real tracker and real board agents; the Builder and Runner are stand-ins (the seam's fakes):
the build returns at once and the measurement holds a real session on a real board for a second, so
what is checked is the scheduler's concurrency per key, not TVM.
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
from workers.board_session import Attempt, SessionRunner, ok_run
from workers.executors.base import Executor, not_mcu
from workers.tracker_client import Session

HOLD_S = 1.0


class HoldingRunner(SessionRunner):
    """Holds a real session on a board for HOLD_S; the Run's started/finished times say when."""

    checks_arch = False

    def on_board(self, session: Session, attempt: Attempt, base: dict[str, Any]) -> Any:
        started = time.time()
        time.sleep(HOLD_S)
        return ok_run([HOLD_S * 1e3], **{**base, "started_at": started})


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def _sweep(tmp_path: Path, models_dir: Path, tracker: str, key: str) -> list[tuple[float, float, str]]:
    spec = load_spec(
        write_sweep(
            tmp_path,
            f'[[models]]\npath = "{models_dir}/tiny_mlp.onnx"\n'
            f'[[targets]]\nname = "t"\ntarget = {{ kind = "llvm" }}\nboard_key = "{key}"\narch = "x86_64"\n'
            '[axes]\nexecutor = ["vm-bytecode"]\nopt_level = [0, 1, 2, 3]\n',
        )
    )
    executors = {"vm-bytecode": Executor("vm-bytecode", NoopBuilder(), HoldingRunner(), accepts=not_mcu)}
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
    runs = _sweep(tmp_path, models_dir, two_boards.tracker, "multi")
    assert _max_overlap([(s, f) for s, f, _ in runs]) == 2, runs
    assert len({b for _, _, b in runs}) == 2, "both boards were used"


def test_a_key_on_this_machines_cores_measures_one_at_a_time(
    tmp_path: Path, models_dir: Path, ray_local: None, two_boards: LocalFarm
) -> None:
    runs = _sweep(tmp_path, models_dir, two_boards.tracker, "multi")
    assert _max_overlap([(s, f) for s, f, _ in runs]) == 1, runs
