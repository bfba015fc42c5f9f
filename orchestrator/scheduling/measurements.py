"""The measurement queue: slots per board key, the host fence, retries, and what attempts say about boards.

- Slots: as many measurements of a key in flight as the key has registered boards (counted again every
  BOARD_RECOUNT_S); a key with none still gets one, whose measurement then reports it (pending-device).
- The fence: a key whose boards share this machine's cores is measured one at a time, only while no
  build runs here; no build starts while it is measured or waits to be (instruction counts under qemu
  -icount do not depend on the load: emulated MCU boards are not fenced).
- Retries: an `infra` attempt (the board died) runs again, up to MAX_ATTEMPTS, preferring another board.
- Board health (orchestrator/health.py): boards that ran correctly in this run need no golden check;
  quarantined boards (the store's board states, read again after a board fault) are avoided.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterable
from typing import Protocol

from db.store import ResultStore
from orchestrator.scheduling.jobs import JobState
from tvmbench.core.records import Run, TargetSpec
from workers.aot.boards import is_mcu_target
from workers.tracker_client import registered_keys, tracker_summary

BOARD_RECOUNT_S = 10.0  # how often the boards per key are counted again
MAX_ATTEMPTS = 2  # an `infra` failure (board died) is retried once, on another board if the key has one
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def host_sharing_keys(tracker: str) -> set[str]:
    """Board keys with a board on this machine (timing them needs the build fence)."""
    own = LOCAL_HOSTS | {socket.gethostname()}
    with contextlib.suppress(OSError):
        own |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    keys = set()
    for server in tracker_summary(tracker).get("server_info", []):
        host = (server.get("addr") or [""])[0]
        if host in own:
            keys.add(str(server.get("key", "")).removeprefix("server:"))
    return keys


def counts_instructions(target: TargetSpec) -> bool:
    """Targets measured in emulated instructions (aot-c on an emulated microcontroller), not in time."""
    return bool(target.emulated) and is_mcu_target(target.tvm_target)


class Boards(Protocol):
    """What the scheduler asks the farm: keys sharing this machine's cores, and boards per key."""

    def sharing_keys(self) -> set[str]: ...

    def per_key(self) -> dict[str, int]: ...


class TrackerBoards:
    """The farm as its TVM RPC tracker at ``tracker`` lists it."""

    def __init__(self, tracker: str) -> None:
        self.tracker = tracker

    def sharing_keys(self) -> set[str]:
        """Asked once, as the sweep starts: a tracker that does not answer ends it in one line, before any job."""
        from orchestrator.farm import FarmError

        try:
            return host_sharing_keys(self.tracker)
        except OSError as exc:  # refused, timed out, closed, or something else on that port
            raise FarmError(
                f"tracker {self.tracker} does not answer ({exc}); is it running? `tvmbench farm up` starts a local "
                "one, `tvmbench farm list --tracker HOST:PORT` checks one (the sweep's jobs stay pending: resume it)"
            ) from None

    def per_key(self) -> dict[str, int]:
        return registered_keys(tracker_summary(self.tracker))


class FixedBoards:
    """A farm given as facts instead of asked (tests, benchmarks): keys sharing this machine's cores, boards per key."""

    def __init__(self, sharing: set[str] | None = None, per_key: dict[str, int] | None = None) -> None:
        self.sharing, self.counts = set(sharing or ()), dict(per_key or {})

    def sharing_keys(self) -> set[str]:
        return set(self.sharing)

    def per_key(self) -> dict[str, int]:
        return dict(self.counts)


class Quarantine:
    """Quarantined board ids, read from the store again only after a board fault was recorded."""

    def __init__(self, store: ResultStore) -> None:
        self.store = store
        self._boards: frozenset[str] | None = None

    def boards(self) -> frozenset[str]:
        if self._boards is None:
            self._boards = frozenset(b for b, state in self.store.board_states().items() if state == "quarantined")
        return self._boards

    def stale(self) -> None:
        """The store may quarantine a board when it records the attempt just finished."""
        self._boards = None


class MeasureQueue:
    """Leader jobs waiting per board key, measurements in flight per key, and board health in this run."""

    def __init__(self, boards: Boards, targets: Iterable[TargetSpec], quarantine: Quarantine) -> None:
        self.boards, self.quarantine = boards, quarantine
        self.fenced = boards.sharing_keys() - {t.board_key for t in targets if counts_instructions(t)}
        self.waiting: dict[str, deque[tuple[JobState, int]]] = defaultdict(deque)
        self.measuring: Counter = Counter()
        self.checked_boards: set[str] = set()
        self.unregistered_keys: set[str] = set()  # keys found with no board: later jobs do not wait for one
        self._per_key: dict[str, int] = {}
        self._counted = -BOARD_RECOUNT_S
        self._started: dict[str, int] = {}  # fenced key -> when it last started a measurement (a counter)

    def add(self, state: JobState, attempt: int) -> None:
        self.waiting[state.board_key].append((state, attempt))

    def put_back(self, key: str, items: tuple[tuple[JobState, int], ...]) -> None:
        """Items of a batch that stopped early: first in line again, in their order, same attempts."""
        self.waiting[key].extendleft(reversed(items))

    def __bool__(self) -> bool:
        return any(self.waiting.values())

    def fenced_measuring(self) -> bool:
        return any(self.measuring[k] for k in self.fenced)

    def fence_waiting(self) -> bool:
        return any(self.waiting[k] for k in self.fenced if k in self.waiting)

    def free_slots(self, key: str) -> int:
        if key in self.fenced:
            # Every key on this machine's cores shares its one slot (host and host-tvm0.26.0, host and an
            # emulated board): two timings on the same cores disturb each other, whatever their keys.
            return 1 - sum(self.measuring[k] for k in self.fenced)
        return self.slots(key) - self.measuring[key]

    def in_turn(self) -> list[str]:
        """The keys with waiting jobs, those sharing this machine's slot least recently served first: they
        take turns, so that drift over a sweep does not fall on one key's jobs (one release's, say)."""
        keys = [k for k, queue in self.waiting.items() if queue]
        return sorted(keys, key=lambda k: self._started.get(k, -1) if k in self.fenced else -2)

    def started(self, key: str) -> None:
        """A measurement of ``key`` was submitted."""
        self.measuring[key] += 1
        if key in self.fenced:
            self._started[key] = max(self._started.values(), default=0) + 1

    def slots(self, key: str) -> int:
        """How many measurements of board key ``key`` may run at once: one per registered board (fenced: one)."""
        if key in self.fenced:
            return 1
        now = time.monotonic()
        if now - self._counted >= BOARD_RECOUNT_S:
            self._counted = now
            with contextlib.suppress(OSError):  # the tracker is restarting: keep the last counts
                self._per_key = self.boards.per_key()
        return max(1, self._per_key.get(key, 1))

    def note(self, state: JobState, run: Run) -> None:
        """What a finished attempt says about its board and key."""
        if run.status == "pending-device":
            self.unregistered_keys.add(state.board_key)
        if not run.board_id:
            return
        if run.status in ("ok", "wrong-result") or (run.health == "ok" and run.status not in ("infra", "timeout")):
            self.checked_boards.add(run.board_id)
        if run.status in ("infra", "timeout"):
            self.checked_boards.discard(run.board_id)
            state.failed_on.add(run.board_id)
            self.quarantine.stale()

    @staticmethod
    def retries(run: Run, attempt: int) -> bool:
        """Whether the attempt runs again: the board died (`infra`) and attempts are left."""
        return run.status == "infra" and attempt < MAX_ATTEMPTS
