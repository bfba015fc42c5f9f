"""Tuning progress from inside build tasks to the sweep driver's progress bar: one named Ray actor per sweep.

A tuned build runs for minutes inside one Ray task; the driver only sees it finish. The stage reports
"trials done / budget" here after every measured batch and the driver reads the table while it waits.

The table holds the trials *measured by this build*: the stage's count starts at the trials its stored
records cover (its first report, before any batch) and a reporter subtracts that start, so the progress
bar never counts records read from the database as trials that ran (the build's provenance keeps them
apart too: ``trials_run`` and ``trials_from_records``).
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "tvmbench"


def progress_name(sweep_id: str) -> str:
    return f"tvmbench-tuning-progress:{sweep_id}"


class _ProgressTable:
    def __init__(self) -> None:
        self.table: dict[str, tuple[int, int]] = {}

    def report(self, build_key: str, done: int, budget: int) -> None:
        self.table[build_key] = (done, budget)

    def snapshot(self) -> dict[str, tuple[int, int]]:
        return dict(self.table)

    def clear(self) -> None:
        self.table.clear()


def create_progress(sweep_id: str) -> Any:
    """The driver's progress table for ``sweep_id`` (created once per driver, emptied for each run)."""
    import ray

    actor = ray.remote(num_cpus=0)(_ProgressTable)
    table = actor.options(name=progress_name(sweep_id), namespace=NAMESPACE, get_if_exists=True).remote()
    table.clear.remote()  # a rerun in the same driver starts counting afresh
    return table


class ProgressReporter:
    """The build task's side: ``report(done)``; silent when no driver listens (a build outside a sweep).

    ``done`` counts the trials the stored records cover plus those measured since; the first report is
    taken for the former (workers/tuning/stage.py reports it before the first batch) and the table gets
    ``done`` less it: the trials this build measured.
    """

    def __init__(self, name: str | None, build_key: str, budget: int, from_records: int | None = None) -> None:
        self.build_key, self.budget = build_key, budget
        # The trials covered by stored records: the first report unless given (0 for counts that are
        # measured trials already, as a toolchain child's FileProgress writes them).
        self.from_records = from_records
        self._actor: Any = None
        if name:
            import ray

            try:
                self._actor = ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                self._actor = None

    def report(self, done: int) -> None:
        if self.from_records is None:
            self.from_records = done
        if self._actor is not None:
            try:
                measured = max(0, done - self.from_records)
                self._actor.report.remote(self.build_key, measured, self.budget)  # fire and forget
            except Exception:
                self._actor = None


class FileProgress:
    """``report(done)`` into a JSON file (``{"done", "budget"}``), replaced whole so a reader never sees half.

    A toolchain's child has no Ray: its parent (the build task) reads the file and reports to the actor
    through a ProgressReporter given ``from_records=0``. The file's ``done`` is therefore the trials
    measured already (the child's first count, the records' share, taken off here, and kept as
    ``from_records``): the parent's first read may come after the last batch of a fast search.
    """

    def __init__(self, path: str, budget: int) -> None:
        self.path, self.budget = path, budget
        self.from_records: int | None = None

    def report(self, done: int) -> None:
        import json
        import os

        if self.from_records is None:
            self.from_records = done
        partial = f"{self.path}.partial"
        with open(partial, "w") as f:
            measured = max(0, done - self.from_records)
            json.dump({"done": measured, "budget": self.budget, "from_records": self.from_records}, f)
        os.replace(partial, self.path)


def read_progress(path: str) -> tuple[int, int] | None:
    """(done, budget) from a FileProgress file, None while there is none (or it cannot be read)."""
    import json

    try:
        with open(path) as f:
            value = json.load(f)
        return int(value["done"]), int(value["budget"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
