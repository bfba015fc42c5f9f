"""The parent's half of a tuned build in a toolchain: records in and out of the SQL store, progress on.

A toolchain's child has TVM, numpy and onnx only: no Ray, no SQLAlchemy. It tunes with a MetaSchedule
``JSONDatabase`` in its folder, compiles candidates in its own process and times them on boards of its
release (``release_key(key, release)``: the candidates are that release's artifacts). The parent, the Ray
build task, bridges the rest through files in the child's folder, polled while the child runs:

1. ``tuning.json`` (parent -> child): the tracker, the release's board key, boards to avoid, the profile.
2. ``scope.json`` (child -> parent): the records' scope as the child's TVM computes it (its target's
   ``Target.export()``, its version). The parent then writes the scope's stored records into
   ``records/`` as MetaSchedule's two JSON files, straight from the rows (no TVM object is rebuilt here:
   the rows hold that release's own serialised modules, which this process's TVM need not read), and
   ``records.ready``; the child opens its database only after that.
3. ``records/database_*.json`` (child -> parent): MetaSchedule appends a line per new workload and per
   measured candidate. Each poll stores the complete new lines in SQL under that scope, so a cancel
   (the Ray task killed, the child with it: ``child.watch_parent``) loses at most one poll's lines.
4. ``progress.json`` (child -> parent): trials done / budget, passed on to the sweep's progress actor.

Kept in SQL, the records are the release's (the scope carries its TVM version): the same tuned job
again reuses them; a job of another release never sees them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tvmbench.core.records import Job, TuningScope

WORKLOAD_FILE = "database_workload.json"  # MetaSchedule's names (workers/tuning/exchange.py)
RECORD_FILE = "database_tuning_record.json"
REQUEST_FILE = "tuning.json"
SCOPE_FILE = "scope.json"
READY_FILE = "records.ready"
PROGRESS_FILE = "progress.json"
RECORDS_DIR = "records"


class RecordsBridge:
    """Polled by ``build_in_toolchain`` while a tuned child runs; see the module docstring."""

    def __init__(self, directory: Path, job: Job, env: Any, build_key: str) -> None:
        from workers.tuning.progress import ProgressReporter

        self.directory, self.job, self.env = directory, job, env
        self.records = directory / RECORDS_DIR
        self.source = f"build {build_key[:16]}"
        self.scope: TuningScope | None = None
        self._store: Any = None
        self._offsets = {WORKLOAD_FILE: 0, RECORD_FILE: 0}  # bytes already read of each file
        self._workload_ids: list[int] = []  # SQL row id of each workload line, in file order
        self._reporter = ProgressReporter(env.progress, build_key, job.tuning)
        self._reported: tuple[int, int] | None = None
        self.exported = 0  # record lines handed to the child
        self.stored = 0  # new record lines stored in SQL

    def write_request(self) -> None:
        """What the child's TuningEnv is made of (JSON: the child reads it without our records module)."""
        env = self.env
        request = {
            "tracker": env.tracker,
            "board_key": env.board_key or self.job.target.board_key,
            "avoid": sorted(env.avoid),
            "boards": env.boards,
            "profile": env.profile,
        }
        (self.directory / REQUEST_FILE).write_text(json.dumps(request))

    @property
    def sql(self) -> bool:
        return self.env.database.get("kind") == "sql"

    def store(self) -> Any:
        if self._store is None:
            from db.store import ResultStore

            self._store = ResultStore(self.env.database["url"])
        return self._store

    def poll(self) -> None:
        """One round: hand the records over once the scope is known, store new lines, pass progress on."""
        if self.scope is None and (self.directory / SCOPE_FILE).is_file():
            self.scope = TuningScope(**json.loads((self.directory / SCOPE_FILE).read_text()))
            self.records.mkdir(exist_ok=True)
            if self.sql:
                self._export()
            (self.directory / READY_FILE).write_text("ready")
        if self.scope is not None and self.sql:
            self._store_new()
        progress = _read_progress(self.directory / PROGRESS_FILE)
        if progress is not None and progress != self._reported:
            self._reported = progress
            self._reporter.report(progress[0])

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    # --- SQL -> files -----------------------------------------------------------------------------

    def _export(self) -> None:
        """The scope's stored records as MetaSchedule's JSON files (every record, failed trials too)."""
        assert self.scope is not None
        index: dict[int, int] = {}  # workload row id -> line index
        workloads, records = [], []
        for wl, rec in self.store().tuning_records(self.scope):
            if wl.id not in index:
                index[wl.id] = len(workloads)
                workloads.append(json.dumps([wl.workload_hash, wl.mod_b64]))
                self._workload_ids.append(wl.id)
            records.append(json.dumps([index[wl.id], [rec.trace, rec.run_secs, rec.target, rec.args_info]]))
        for name, lines in ((WORKLOAD_FILE, workloads), (RECORD_FILE, records)):
            data = "".join(line + "\n" for line in lines)
            (self.records / name).write_text(data)
            self._offsets[name] = len(data.encode())  # the child's own lines start after these
        self.exported = len(records)

    # --- files -> SQL -----------------------------------------------------------------------------

    def _new_lines(self, name: str) -> list[Any]:
        """The complete lines appended to ``name`` since the last poll, parsed (a half-written one waits)."""
        path = self.records / name
        if not path.is_file():
            return []
        with path.open("rb") as f:
            f.seek(self._offsets[name])
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offsets[name] += end
        return [json.loads(line) for line in data[:end].decode().splitlines() if line.strip()]

    def _store_new(self) -> None:
        store, scope = self.store(), self.scope
        assert scope is not None
        # Records first: every workload a record read now names was written before it, so it is among
        # the workload lines read after (the other order could meet a record of a workload not yet read).
        records = self._new_lines(RECORD_FILE)
        for shash, mod_b64 in self._new_lines(WORKLOAD_FILE):
            row_id = store.commit_tuning_workload(scope, str(shash), mod_b64, model_name=self.job.model.name)
            store.link_tuning_model(row_id, self.job.model.name)  # a workload another model met first
            self._workload_ids.append(row_id)
        for index, record in records:
            if store.commit_tuning_record(self._workload_ids[index], record, source=self.source):
                self.stored += 1


def _read_progress(path: Path) -> tuple[int, int] | None:
    from workers.tuning.progress import read_progress

    return read_progress(str(path))
