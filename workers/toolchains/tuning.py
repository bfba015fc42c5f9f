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
5. ``fence/`` (both ways), when the release's boards share this machine's cores: the host fence is a Ray
   actor the child cannot reach, so the child asks for a hold by a file (``<holder>.build`` around each
   candidate compile, ``<holder>.time`` around each timing: ``FileFence``), the parent asks the actor on
   its behalf each poll and answers ``<holder>.granted``; ``<holder>.done`` lets go. The parent lets go
   of its own build hold once the child starts (it would fence out the child's timings, as the
   in-process stage's ``Hold.paused`` avoids), and of whatever the child still held when it ends.

Kept in SQL, the records are the release's (the scope carries its TVM version): the same tuned job
again reuses them; a job of another release never sees them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
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
FENCE_DIR = "fence"
HOLD_KINDS = ("build", "time")
GRANT_POLL_S = 0.05  # the child's wait for a grant (the parent answers within one of its polls)


class FileFence:
    """The child's host fence: ``building()`` and ``timing()`` as ``workers.fence.Fence`` has them, asked
    for through files its parent answers (see the module docstring)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def building(self, ttl_s: float = 1800.0) -> Iterator[None]:
        with self._hold("build", ttl_s, None):
            yield

    @contextlib.contextmanager
    def timing(self, ttl_s: float = 300.0, stop: Any = None) -> Iterator[float]:
        with self._hold("time", ttl_s, stop) as waited:
            yield waited

    @contextlib.contextmanager
    def _hold(self, kind: str, ttl_s: float, stop: Any) -> Iterator[float]:
        holder = uuid.uuid4().hex
        ask = self.folder / f"{holder}.{kind}"
        partial = self.folder / f"{holder}.partial"
        partial.write_text(str(ttl_s))
        os.replace(partial, ask)  # whole: the parent reads the TTL from it
        started = time.monotonic()
        try:
            while not (self.folder / f"{holder}.granted").exists():
                if stop is not None and stop():
                    raise RuntimeError("stopped while waiting for the host fence")
                time.sleep(GRANT_POLL_S)
            yield time.monotonic() - started
        finally:
            (self.folder / f"{holder}.done").write_text("")


class RecordsBridge:
    """Polled by ``build_in_toolchain`` while a tuned child runs; see the module docstring."""

    def __init__(
        self, directory: Path, job: Job, env: Any, build_key: str, hold: Any = None, fence: Any = None
    ) -> None:
        from workers.fence import local_fence
        from workers.tuning.progress import ProgressReporter

        self.directory, self.job, self.env = directory, job, env
        # The host fence, asked on the child's behalf (None: the release's boards do not share our cores).
        # ``fence``: anything with Fence's try_hold and release (tests); default the host's Ray actor.
        if fence is None:
            found = local_fence(env.fence_host)
            fence = found if found.active else None
        self._fence = fence
        self._hold = hold  # this build task's own build hold, let go of while the child tunes
        self._held: set[str] = set()  # the child's holders granted and not yet let go
        self.records = directory / RECORDS_DIR
        self.source = f"build {build_key[:16]}"
        self.scope: TuningScope | None = None
        self._store: Any = None
        self._offsets = {WORKLOAD_FILE: 0, RECORD_FILE: 0}  # bytes already read of each file
        self._workload_ids: list[int] = []  # SQL row id of each workload line, in file order
        # The child's file counts measured trials already (FileProgress): nothing to take off.
        self._reporter = ProgressReporter(env.progress, build_key, job.tuning, from_records=0)
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
            "fence": self._fence is not None,
            "baseline": env.baseline,  # an auto budget's until = "onnxruntime" (the child cannot look it up)
            "tuned_by": env.tuned_by,
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
            if self._fence is not None and self._hold is not None:
                self._hold.fence.release(self._hold.holder)  # or the child's timings would wait for it
        if self._fence is not None:
            self._answer_fence()
        if self.scope is not None and self.sql:
            self._store_new()
        progress = _read_progress(self.directory / PROGRESS_FILE)
        if progress is not None and progress != self._reported:
            self._reported = progress
            self._reporter.report(progress[0])

    def close(self) -> None:
        """Let go of what the child still held (it ended, or was killed mid-hold) and close the store."""
        if self._fence is not None:
            for holder in self._held:
                self._fence.release(holder)
            self._held.clear()
        if self._store is not None:
            self._store.close()

    def _answer_fence(self) -> None:
        """Ask the host fence for each hold the child wants, tell it when granted, let go when it is done."""
        assert self._fence is not None
        folder = self.directory / FENCE_DIR
        if not folder.is_dir():
            return
        for ask in sorted(p for kind in HOLD_KINDS for p in folder.glob(f"*.{kind}")):
            holder, kind = ask.stem, ask.suffix[1:]
            if (folder / f"{holder}.done").exists():
                self._fence.release(holder)
                self._held.discard(holder)
                for name in (ask.name, f"{holder}.granted", f"{holder}.done"):
                    with contextlib.suppress(FileNotFoundError):
                        (folder / name).unlink()
            # Not granted yet: asked again every poll (a waiting timer that stops asking stops blocking builds).
            elif holder not in self._held and self._fence.try_hold(kind, holder, float(ask.read_text())):
                self._held.add(holder)
                (folder / f"{holder}.granted").write_text("")

    # --- SQL -> files -----------------------------------------------------------------------------

    def _export(self) -> None:
        """The scope's stored records as MetaSchedule's JSON files (every record, failed trials too)."""
        assert self.scope is not None
        index: dict[int, int] = {}  # workload row id -> line index
        workloads, records = [], []
        # In the order they were stored (the store gives them fastest first): a fixed budget applies the best
        # of a task's *first* records (workers/tuning/database.BudgetView), in the child as in this process.
        for wl, rec in sorted(self.store().tuning_records(self.scope), key=lambda pair: pair[1].id):
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
