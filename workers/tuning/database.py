"""MetaSchedule tuning records in the results database: a ``PyDatabase`` over the project's SQL store.

A team's PostgreSQL (or a SQLite file) then shares tuning across people and sweeps: the same sweep run
again finds its records, a larger budget continues from them, another model with the same workload
reuses them. The database is constructed from a URL, so a Ray worker opens its own connection.

Records are kept in MetaSchedule's own JSON forms (``Workload.as_json`` / ``TuningRecord.as_json``) and
rebuilt with ``from_json``, so what goes in and what comes out is what ``JSONDatabase`` reads and writes
(``tvmbench tuning export`` writes the files through a real ``JSONDatabase``). Ordering and validity
follow ``JSONDatabase``: fastest mean run time first, ties oldest first, a record without a real run
time (MetaSchedule's 1e10 stub) or without a schedule never in ``get_top_k``.

One instance is one scope (target, board key, TVM version, module equality): MetaSchedule's queries
carry no target or board, so the scope is what keeps a Raspberry Pi's records from a laptop's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import MemoryDatabase, PyDatabase, TuningRecord, Workload
from tvm.s_tir.meta_schedule.database.database import _PyDatabase

from tvmbench.core.records import MS_FAILED_RUN_S, TuningScope

if TYPE_CHECKING:
    from tvm.ir import IRModule

    from db.store import ResultStore

MODULE_EQUALITIES = ("structural", "ignore-tensor", "anchor-block")


def installed_tvm_version() -> str:
    """The TVM version records are made with here (a part of every scope)."""
    import tvm

    return str(tvm.__version__)


def canonical_target(target: Any) -> dict[str, Any]:
    """A target (dict, tag, ``Target``) as ``Target.export()``: the form MetaSchedule stores with records."""
    import json

    from tvm.target import Target

    exported = (target if isinstance(target, Target) else Target(target)).export()
    # Through JSON: the FFI map/array types become plain dicts and lists that compare and hash.
    return json.loads(json.dumps(_plain(exported)))


def _plain(value: Any) -> Any:
    """FFI containers (Map, Array, String, IntImm) as Python dicts, lists, str and numbers."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value.__str__() if isinstance(value, str) else value
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__"):
        return [_plain(v) for v in value]
    if hasattr(value, "value"):  # IntImm / FloatImm
        return value.value
    return str(value)


def make_scope(
    target: Any, board_key: str, *, tvm_version: str | None = None, module_equality: str = "structural"
) -> TuningScope:
    """The scope of records tuned for ``target`` on boards of ``board_key`` with this TVM."""
    if module_equality not in MODULE_EQUALITIES:
        raise ValueError(f"module_equality {module_equality!r} is not one of {', '.join(MODULE_EQUALITIES)}")
    return TuningScope(
        target=canonical_target(target),
        board_key=board_key,
        tvm_version=tvm_version or installed_tvm_version(),
        module_equality=module_equality,
    )


def workload_of(mod: IRModule, module_equality: str = "structural") -> Workload:
    """The MetaSchedule ``Workload`` of ``mod``, its hash taken the way ``module_equality`` says.

    MetaSchedule exposes the module-equality hash only through its databases; a throwaway
    ``MemoryDatabase`` computes it exactly as ``JSONDatabase`` does.
    """
    return MemoryDatabase(module_equality=module_equality).commit_workload(mod)


def workload_hash(mod: IRModule, module_equality: str = "structural") -> str:
    """MetaSchedule's hash of ``mod`` (decimal, the first field of a ``database_workload.json`` line)."""
    return str(workload_of(mod, module_equality).as_json()[0])


class _PyDatabaseWithEquality(_PyDatabase):
    """``_PyDatabase`` with the module equality first, so ``derived_object`` can pass it as a field.

    The stock ``PyDatabase`` leaves the C++ side at "structural", which is what decides how an
    anchor-block record is applied at compile time.
    """

    def __init__(self, module_equality: str, *methods: Any) -> None:
        super().__init__(*methods, module_equality=module_equality)


class _PyDatabaseBase(PyDatabase):
    _tvm_metadata = {  # noqa: RUF012 (the layout derived_object reads)
        "cls": _PyDatabaseWithEquality,
        "fields": ["module_equality"],
        "methods": PyDatabase._tvm_metadata["methods"],
    }


@derived_object
class SqlTuningDatabase(_PyDatabaseBase):
    """MetaSchedule database whose workloads and records live in the results database.

    ``SqlTuningDatabase(url, target=..., board_key=...)`` opens the store itself (SQLite file or
    PostgreSQL URL), so it can be built inside a Ray worker. ``model_name`` (optional) notes which model's
    tuning met each workload; ``source`` (e.g. "sweep <id>") is kept with every record it commits.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        target: Any,
        board_key: str,
        tvm_version: str | None = None,
        module_equality: str = "structural",
        model_name: str | None = None,
        source: str | None = None,
        store: ResultStore | None = None,
    ) -> None:
        from db.store import ResultStore

        self.scope = make_scope(target, board_key, tvm_version=tvm_version, module_equality=module_equality)
        self.module_equality = module_equality
        self.model_name = model_name
        self.source = source
        self._owns_store = store is None
        self.store = store if store is not None else ResultStore(url)
        # Workloads met in this process: (Workload object, row id, hash). Few per tuning run.
        self._workloads: list[tuple[Workload, int, str]] = []
        # Rebuilding a record replays its trace on a schedule; rows never change, so keep them.
        self._records: dict[int, TuningRecord] = {}
        self._linked: set[int] = set()  # workload rows already linked to model_name

    def close(self) -> None:
        """Close the store if this database opened it."""
        if self._owns_store:
            self.store.close()

    # --- workloads ------------------------------------------------------------------------------

    def _known(self, workload: Workload | None = None, shash: str | None = None) -> tuple[Workload, int] | None:
        for obj, row_id, h in self._workloads:
            if (workload is not None and obj.same_as(workload)) or (shash is not None and h == shash):
                return obj, row_id
        return None

    def _find(self, mod: IRModule) -> tuple[Workload, int] | None:
        """The workload of ``mod`` in this scope (memory first, then SQL), or None."""
        fresh = workload_of(mod, self.module_equality)
        shash = str(fresh.as_json()[0])
        known = self._known(shash=shash)
        if known is not None:
            return known
        row = self.store.tuning_workload(self.scope, shash)
        if row is None:
            return None
        self._workloads.append((fresh, row.id, shash))
        return fresh, row.id

    def has_workload(self, mod: IRModule) -> bool:
        """Whether this scope has a workload equal to ``mod``."""
        return self._find(mod) is not None

    def commit_workload(self, mod: IRModule) -> Workload:
        """The workload of ``mod``, stored in this scope if it was not there yet."""
        found = self._find(mod)
        if found is not None:
            self._link_model(found[1])
            return found[0]
        workload = workload_of(mod, self.module_equality)
        shash, mod_b64 = (str(x) for x in workload.as_json())
        row_id = self.store.commit_tuning_workload(
            self.scope, shash, mod_b64, model_name=self.model_name, task_name=_task_name(mod)
        )
        self._workloads.append((workload, row_id, shash))
        self._linked.add(row_id)
        return workload

    def _link_model(self, row_id: int) -> None:
        if self.model_name and row_id not in self._linked:
            self.store.link_tuning_model(row_id, self.model_name)
            self._linked.add(row_id)

    def workload_row_id(self, workload: Workload) -> int:
        """The SQL row id of ``workload`` in this scope (stored first if it is new)."""
        known = self._known(workload=workload)
        if known is not None:
            return known[1]
        shash = str(workload.as_json()[0])
        known = self._known(shash=shash)
        if known is not None:
            return known[1]
        self.commit_workload(workload.mod)
        return self.workload_row_id(workload)

    # --- records --------------------------------------------------------------------------------

    def commit_tuning_record(self, record: TuningRecord) -> None:
        """Store one measured candidate (a failed one too: it is a trial spent)."""
        row_id = self.workload_row_id(record.workload)
        self.store.commit_tuning_record(row_id, _plain(record.as_json()), source=self.source)

    def _record(self, row: Any, workload: Workload) -> TuningRecord:
        cached = self._records.get(row.id)
        if cached is None:
            cached = TuningRecord.from_json([row.trace, row.run_secs, row.target, row.args_info], workload)
            self._records[row.id] = cached
        return cached

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        """The ``top_k`` fastest valid records of ``workload``, fastest first."""
        return self.top_k_of_first(workload, top_k, None)

    def top_k_of_first(self, workload: Workload, top_k: int, first_n: int | None) -> list[TuningRecord]:
        """``get_top_k`` among the first ``first_n`` records of ``workload`` in store order (None: all).

        In SQL, so a fixed budget's view (``BudgetView``) rebuilds only the records it returns.
        """
        from db import tuning_records

        if top_k < 0:
            raise ValueError("top_k must be non-negative")
        if top_k == 0 or (first_n is not None and first_n <= 0):
            return []
        row_id = self.workload_row_id(workload)
        known = self._known(workload=workload) or self._known(shash=str(workload.as_json()[0]))
        obj = known[0] if known else workload
        if first_n is None:
            rows = self.store.tuning_top_k(row_id, top_k)
        else:
            with self.store.read() as session:
                rows = tuning_records.top_k(session, row_id, top_k, first_n)
        return [self._record(row, obj) for row in rows]

    def get_all_tuning_records(self) -> list[TuningRecord]:
        """Every record of this scope, valid or not, per workload fastest first."""
        out = []
        for wl, row in self.store.tuning_records(self.scope):
            obj = self._workload_object(wl)
            out.append(self._record(row, obj))
        return out

    def _workload_object(self, wl: Any) -> Workload:
        for obj, rid, _ in self._workloads:
            if rid == wl.id:
                return obj
        obj = Workload.from_json([wl.workload_hash, wl.mod_b64])
        self._workloads.append((obj, wl.id, wl.workload_hash))
        return obj

    def __len__(self) -> int:
        """How many records (valid or not) this scope holds."""
        return self.store.tuning_record_count(self.scope)

    # --- tvmbench's questions -------------------------------------------------------------------

    def trials_covered(self, mods: list[IRModule]) -> list[dict[str, Any]]:
        """Per module (a tuning task's IRModule): trials already stored, how many ran, best seconds."""
        hashes = [workload_hash(mod, self.module_equality) for mod in mods]
        coverage = self.store.tuning_coverage(self.scope, hashes)
        return [{"workload_hash": h, **coverage[h]} for h in hashes]

    def sample(self, *, best: int, per_workload: int, total: int) -> list[tuple[Workload, str, list[TuningRecord]]]:
        """(workload, hash, valid records fastest first) per workload of the scope: its ``best`` records and
        a spread of the rest, ``per_workload`` at most, ``total`` in all (a warm start's training set)."""
        out = []
        for wl, rows in self.store.tuning_sample(self.scope, best=best, per_workload=per_workload, total=total):
            obj = self._workload_object(wl)
            out.append((obj, wl.workload_hash, [self._record(row, obj) for row in rows]))
        return out


def _mean_if_valid(trace: Any, run_secs: Any) -> float | None:
    """Mean run seconds of a record's JSON, or None when MetaSchedule would never apply it (a failed trial).

    db.tuning_records.tuning_record_rank's rule (MetaSchedule's IsValid), restated: a toolchain's child
    (another TVM release, in a venv without SQLAlchemy) applies records through this module too.
    """
    times = [float(t) for t in run_secs or []]
    insts = trace[0] if trace else []
    scheduled = bool(insts) and insts[0][0] != "EnterPostproc"
    if not scheduled or not times or all(t == MS_FAILED_RUN_S for t in times):
        return None
    return sum(times) / len(times)


def record_mean_s(record: TuningRecord) -> float | None:
    """A record's mean run seconds, or None when MetaSchedule would never apply it (a failed trial)."""
    trace, run_secs = (_plain(x) for x in record.as_json()[:2])
    return _mean_if_valid(trace, run_secs)


def _in_store_order(db: Any, workload: Workload) -> list[tuple[float | None, Callable[[], TuningRecord]]]:
    """(mean seconds or None, the record) per record of ``workload`` in ``db``, oldest first, failed trials
    too, for databases other than ``SqlTuningDatabase`` (which answers in SQL).

    A ``JSONDatabase`` keeps its records sorted by run time, so its file is read instead: MetaSchedule
    appends one line per committed record. Rebuilding a record replays its trace, so only the records
    asked for are rebuilt. A ``MemoryDatabase`` lists its records as committed.
    """
    import json

    from tvm.s_tir.meta_schedule.database import JSONDatabase

    shash = str(workload.as_json()[0])
    if isinstance(db, JSONDatabase):
        with open(db.path_workload) as f:
            hashes = [str(json.loads(line)[0]) for line in f if line.strip()]
        out: list[tuple[float | None, Callable[[], TuningRecord]]] = []
        with open(db.path_tuning_record) as f:
            for line in f:
                if not line.strip():
                    continue
                index, record = json.loads(line)
                if hashes[index] == shash:
                    rebuild = functools.partial(TuningRecord.from_json, record, workload)
                    out.append((_mean_if_valid(record[0], record[1]), rebuild))
        return out
    seen: list[tuple[Workload, str]] = []  # each workload's hash once (as_json serialises its module)

    def hash_of(w: Workload) -> str:
        for obj, h in seen:
            if obj.same_as(w):
                return h
        seen.append((w, str(w.as_json()[0])))
        return seen[-1][1]

    mine = [r for r in db.get_all_tuning_records() if hash_of(r.workload) == shash]
    return [(record_mean_s(r), lambda r=r: r) for r in mine]  # built already: nothing to rebuild


def stored_means(db: Any, workload: Workload) -> list[float | None]:
    """Mean run seconds (None: failed) of every record of ``workload`` in ``db``, oldest first (not SQL)."""
    return [mean for mean, _ in _in_store_order(db, workload)]


def top_k_of_first(db: Any, workload: Workload, top_k: int, first_n: int) -> list[TuningRecord]:
    """The ``top_k`` fastest valid records among the first ``first_n`` of ``workload`` in ``db``."""
    if top_k <= 0 or first_n <= 0:
        return []
    if hasattr(db, "top_k_of_first"):  # SqlTuningDatabase: in SQL
        return list(db.top_k_of_first(workload, top_k, first_n))
    timed = [(mean, rebuild) for mean, rebuild in _in_store_order(db, workload)[:first_n] if mean is not None]
    timed.sort(key=lambda x: x[0])  # stable: ties stay oldest first, as MetaSchedule orders them
    return [rebuild() for _, rebuild in timed[:top_k]]


@derived_object
class BudgetView(_PyDatabaseBase):
    """A build's database as a fixed budget stands for it: each workload holds only its first records.

    ``first_n`` maps a workload hash (``workload_hash`` under the same module equality) to how many of the
    workload's records in store order the budget accounts for (stored before the build and counted against
    it, plus those it measured; failed trials count, but are never applied). A workload it does not name
    holds none. ``MetaScheduleApplyDatabase`` over this view then applies to each task the best record an
    N-trial run would have found, not the best of every run since, so a program tuned with 2 trials is not
    the program of an earlier, larger budget that happens to share the database. Read-only.
    """

    def __init__(self, database: Any, first_n: dict[str, int], module_equality: str = "structural") -> None:
        self.database = database
        self.first_n = dict(first_n)
        self.module_equality = module_equality
        self._seen: dict[str, Workload] = {}  # workloads the view was asked about, for get_all / len

    def has_workload(self, mod: IRModule) -> bool:
        """Whether the underlying database has a workload equal to ``mod``."""
        return bool(self.database.has_workload(mod))

    def commit_workload(self, mod: IRModule) -> Workload:
        """The underlying database's workload of ``mod`` (stored there if new, as MetaSchedule expects)."""
        workload = self.database.commit_workload(mod)
        self._seen.setdefault(str(workload.as_json()[0]), workload)
        return workload

    def commit_tuning_record(self, record: TuningRecord) -> None:
        """Refused: the view only applies records; tuning writes to the database itself."""
        raise RuntimeError("a BudgetView is read-only: commit tuning records to the build's database")

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        """The ``top_k`` fastest valid records among the first ``first_n`` of ``workload``."""
        if top_k < 0:
            raise ValueError("top_k must be non-negative")
        shash = str(workload.as_json()[0])
        self._seen.setdefault(shash, workload)
        return top_k_of_first(self.database, workload, top_k, self.first_n.get(shash, 0))

    def get_all_tuning_records(self) -> list[TuningRecord]:
        """The valid records the view holds, of the workloads it was asked about, per workload fastest first."""
        return [r for w in self._seen.values() for r in self.get_top_k(w, self.first_n.get(str(w.as_json()[0]), 0))]

    def __len__(self) -> int:
        """How many records ``get_all_tuning_records`` returns."""
        return len(self.get_all_tuning_records())


def trials_covered(
    url: str | None,
    mods: list[IRModule],
    *,
    target: Any,
    board_key: str,
    tvm_version: str | None = None,
    module_equality: str = "structural",
    store: ResultStore | None = None,
) -> list[dict[str, Any]]:
    """Trials the database already holds for each of ``mods`` in one scope (for `sweep plan`).

    Needs no MetaSchedule database object: the hashes are computed here, one SQL query counts.
    """
    from db.store import ResultStore

    scope = make_scope(target, board_key, tvm_version=tvm_version, module_equality=module_equality)
    own = store is None
    store = store if store is not None else ResultStore(url)
    try:
        hashes = [workload_hash(mod, module_equality) for mod in mods]
        coverage = store.tuning_coverage(scope, hashes)
        return [{"workload_hash": h, **coverage[h]} for h in hashes]
    finally:
        if own:
            store.close()


def _task_name(mod: IRModule) -> str | None:
    """The PrimFunc's name in a one-function task module (what MetaSchedule's task table prints)."""
    try:
        names = [gv.name_hint for gv in mod.get_global_vars()]
    except Exception:  # not worth failing a commit over a label
        return None
    # Extracted tasks are usually renamed "main": no label is better than a misleading one.
    return names[0] if len(names) == 1 and names[0] != "main" else None
