"""The progress bar's trials: what the tuned builds of a sweep have done, summed for the listeners.

Builds in flight report trials done / budget to the progress table (workers/tuning/progress.py), read
about once a second; a build that came back counts as its provenance says, since its last report to the
table is fire and forget and may land after the last read (the table and the builds share build keys).
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.scheduling.events import Listener
from tvmbench.core.records import Build

TUNING_POLL_S = 1.0  # how often the trials of tuned builds are read for the progress bar


class TuningProgress:
    """Trials done / budget over a sweep's tuned builds, to ``listener.on_tuning`` whenever the sum changes."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._polled = 0.0
        self._seen: dict[str, tuple[int, int]] = {}
        self._final: dict[str, tuple[int, int]] = {}  # build key -> (trials, budget) of finished builds

    def poll(self, pool: Any) -> None:
        """Read the builds in flight from ``pool``'s progress table, at most every TUNING_POLL_S."""
        now = time.monotonic()
        if now - self._polled < TUNING_POLL_S:
            return
        self._polled = now
        table = pool.tuning_progress()
        if table is not None:
            self.report(table)

    def report(self, table: dict[str, tuple[int, int]]) -> None:
        """Trials done / budget summed over ``table`` (finished builds as their provenance says), if changed."""
        table = {**table, **self._final}
        if table == self._seen:
            return
        self._seen = table
        self.listener.on_tuning(sum(d for d, _ in table.values()), sum(b for _, b in table.values()))

    def finished(self, build_key: str, build: Build, budget: int) -> None:
        """A tuned build came back (``budget``: its job's): its final trials, stored and measured."""
        tuning = build.tuning or {}
        if not budget or "trials_run" not in tuning:
            return
        self._final[build_key] = (int(tuning["trials_run"]) + int(tuning.get("trials_from_records") or 0), budget)
        self.report(self._seen)
