"""What a tuning run spent and what went wrong, shared by the builder, the runner and the stage.

Runner threads update it concurrently, hence the lock. It becomes part of the build's ``tuning``
provenance (see ``workers.tuning.stage``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

MAX_ERRORS = 5  # sample messages kept; the counts by kind are complete


class TuningStats:
    """Seconds spent building candidates, waiting for boards and measuring; failed trials by kind."""

    def __init__(self, on_trial: Callable[[int], None] | None = None) -> None:
        self._lock = threading.Lock()
        self.times: dict[str, float] = {"build_s": 0.0, "board_wait_s": 0.0, "run_s": 0.0}
        self.failed: Counter = Counter()
        self.errors: list[str] = []
        self.measured = 0  # candidates the runner finished (timed or failed)
        self._on_trial = on_trial

    def add_time(self, what: str, seconds: float) -> None:
        with self._lock:
            self.times[what] = self.times.get(what, 0.0) + seconds

    def fail(self, kind: str, message: str) -> None:
        """Count one failed trial of ``kind`` (build, build-timeout, infra, timeout, device-unavailable...)."""
        with self._lock:
            self.failed[kind] += 1
            line = f"{kind}: {message}"
            if len(self.errors) < MAX_ERRORS and line not in self.errors:
                self.errors.append(line[:400])

    def trial_done(self) -> None:
        with self._lock:
            self.measured += 1
            done = self.measured
        if self._on_trial is not None:
            self._on_trial(done)
