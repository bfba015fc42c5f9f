"""Tuning records to and from MetaSchedule's JSON database files (`tvmbench tuning export/import`).

A directory with ``database_workload.json`` and ``database_tuning_record.json`` is what
``ms.database.JSONDatabase(work_dir=DIR)`` reads and writes, so records move between tvmbench and plain
TVM scripts. Both directions go through a real ``JSONDatabase``: the files are written by MetaSchedule
itself, byte for byte in its format, and read back the way it reads them.

The files know nothing of boards or TVM versions: an export is one scope (so a JSONDatabase never mixes
a Raspberry Pi's times with a laptop's), and an import is told the board key its times were taken on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.records import TuningScope
from workers.tuning.database import MODULE_EQUALITIES, SqlTuningDatabase, canonical_target, installed_tvm_version

if TYPE_CHECKING:
    from db.store import ResultStore

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


class ExchangeError(ValueError):
    """Bad input to an export or import; the message names the culprit and what to do."""


@dataclass
class Exported:
    directory: Path
    scope: dict[str, Any]
    workloads: int = 0
    records: int = 0


@dataclass
class Imported:
    directory: Path
    records: int = 0  # records read from the files
    new: int = 0  # of those, not yet in the database
    workloads: int = 0
    scopes: list[dict[str, Any]] = field(default_factory=list)


def target_filter(text: str | None) -> dict[str, Any] | None:
    """``--target``: a preset name, a TVM tag or a JSON target dict, canonicalised for matching."""
    import json

    from workers.targets import PRESETS

    if text is None:
        return None
    if text in PRESETS:
        spec: Any = PRESETS[text].tvm_target
    elif text.lstrip().startswith("{"):
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExchangeError(
                f'--target {text!r} is not valid JSON ({exc.msg}); write e.g. \'{{"kind": "llvm"}}\''
            ) from None
    else:
        spec = text
    try:
        return canonical_target(spec)
    except Exception as exc:
        raise ExchangeError(
            f"--target {text!r} is not a preset, TVM tag or target dict ({str(exc).splitlines()[0]}); "
            "`tvmbench targets list` shows the presets"
        ) from None


def _matches(wanted: dict[str, Any] | None, stored: dict[str, Any] | None) -> bool:
    """A stored target matches when it has every attribute of the wanted one (num-cores may be extra)."""
    if wanted is None:
        return True
    stored = stored or {}
    return all(stored.get(k) == v for k, v in wanted.items())


def select_scope(
    store: ResultStore,
    *,
    target: str | None = None,
    board_key: str | None = None,
    tvm_version: str | None = None,
    model_name: str | None = None,
) -> TuningScope:
    """The one scope the filters leave, or an ExchangeError listing the candidates."""
    wanted = target_filter(target)
    scopes = [
        s
        for s in store.tuning_scopes()
        if _matches(wanted, s["target"])
        and (board_key is None or s["board_key"] == board_key)
        and (tvm_version is None or s["tvm_version"] == tvm_version)
    ]
    if model_name is not None:
        with_model = {
            (w.target_key, w.board_key, w.tvm_version) for w, _ in store.tuning_records(model_name=model_name)
        }
        scopes = [s for s in scopes if (s["target_key"], s["board_key"], s["tvm_version"]) in with_model]
    if not scopes:
        raise ExchangeError("no tuning records match the filters; `tvmbench tuning list` shows what the database holds")
    if len(scopes) > 1:
        listed = "; ".join(
            f"board {s['board_key']}, target {short_target(s['target'])}, TVM {s['tvm_version']}, "
            f"{s['module_equality']} ({s['records']} records)"
            for s in scopes[:6]
        )
        raise ExchangeError(
            f"records of {len(scopes)} scopes match ({listed}); a JSON database holds one: narrow it with "
            "--board-key, --target or --tvm-version"
        )
    s = scopes[0]
    return TuningScope(
        target=s["target"], board_key=s["board_key"], tvm_version=s["tvm_version"], module_equality=s["module_equality"]
    )


def short_target(target: dict[str, Any] | None) -> str:
    """A target in a few words: kind, triple, CPU and cores."""
    target = target or {}
    parts = [str(target.get("kind", "?"))]
    for key in ("mtriple", "mcpu", "num-cores"):
        if key in target:
            parts.append(f"{key}={target[key]}")
    return " ".join(parts)


def export_records(
    store: ResultStore,
    directory: Path,
    scope: TuningScope,
    *,
    model_name: str | None = None,
    top: int = 0,
    append: bool = False,
) -> Exported:
    """Write the records of ``scope`` (of ``model_name``'s workloads; the ``top`` best per workload if
    ``top`` > 0) as a MetaSchedule JSON database in ``directory``."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord, Workload

    directory.mkdir(parents=True, exist_ok=True)
    existing = [p.name for p in (directory / WORKLOAD_FILE, directory / RECORD_FILE) if p.exists() and p.stat().st_size]
    if existing and not append:
        raise ExchangeError(
            f"{directory} already holds {' and '.join(existing)}; export into an empty directory, or pass --append "
            "to add these records to that database"
        )
    rows = store.tuning_records(scope, model_name=model_name)
    out = JSONDatabase(work_dir=str(directory), module_equality=scope.module_equality)
    result = Exported(directory, {**scope.__dict__})
    per_workload: dict[int, int] = {}
    workloads: dict[int, Any] = {}
    for wl, rec in rows:
        if top and per_workload.get(wl.id, 0) >= top:
            continue
        if top and not rec.valid:
            continue  # "the best N" means measured ones
        if wl.id not in workloads:
            mod = Workload.from_json([wl.workload_hash, wl.mod_b64]).mod
            workloads[wl.id] = out.commit_workload(mod)
            result.workloads += 1
        record = TuningRecord.from_json([rec.trace, rec.run_secs, rec.target, rec.args_info], workloads[wl.id])
        out.commit_tuning_record(record)
        per_workload[wl.id] = per_workload.get(wl.id, 0) + 1
        result.records += 1
    if not result.records:
        raise ExchangeError(
            "the selected scope has no records to export" + (f" for model {model_name}" if model_name else "")
        )
    return result


def import_records(
    store: ResultStore,
    directory: Path,
    *,
    board_key: str,
    target: str | None = None,
    tvm_version: str | None = None,
    module_equality: str = "structural",
    model_name: str | None = None,
) -> Imported:
    """Read a MetaSchedule JSON database from ``directory`` into the results database.

    Each record keeps its own target (``target`` is for records that have none); the times are taken to
    be of boards of ``board_key`` with ``tvm_version`` (default: this TVM). Importing twice adds nothing.
    """
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    if module_equality not in MODULE_EQUALITIES:
        raise ExchangeError(f"--module-equality {module_equality!r} is not one of {', '.join(MODULE_EQUALITIES)}")
    missing = [name for name in (WORKLOAD_FILE, RECORD_FILE) if not (directory / name).is_file()]
    if missing:
        raise ExchangeError(
            f"{directory} has no {' or '.join(missing)}: point at a MetaSchedule work_dir "
            "(what ms.database.JSONDatabase(work_dir=...) writes)"
        )
    fallback = target_filter(target)
    try:
        src = JSONDatabase(work_dir=str(directory), allow_missing=False, module_equality=module_equality)
        records = src.get_all_tuning_records()
    except Exception as exc:
        raise ExchangeError(
            f"cannot read the JSON database in {directory}: {str(exc).splitlines()[-1][:300]}"
        ) from None
    result = Imported(directory)
    tvm_version = tvm_version or installed_tvm_version()
    dbs: dict[str, SqlTuningDatabase] = {}
    seen_workloads: set[tuple[str, int]] = set()
    before: dict[str, int] = {}
    source = f"import {directory}"[:200]
    for record in records:
        tgt = canonical_target(record.target) if record.target is not None else fallback
        if tgt is None:
            raise ExchangeError(f"a record in {directory} has no target: give the one it was tuned for with --target")
        db = dbs.get(str(tgt))
        if db is None:
            db = SqlTuningDatabase(
                target=tgt, board_key=board_key, tvm_version=tvm_version, module_equality=module_equality,
                model_name=model_name, source=source, store=store,
            )  # fmt: skip
            dbs[str(tgt)] = db
            before[str(tgt)] = len(db)
        workload = db.commit_workload(record.workload.mod)
        seen_workloads.add((str(tgt), db.workload_row_id(workload)))
        db.commit_tuning_record(_rebind(record, workload))
        result.records += 1
    for key, db in dbs.items():
        after = len(db)
        result.new += after - before[key]
        result.scopes.append({**db.scope.__dict__, "records": after})
    result.workloads = len(seen_workloads)
    return result


def _rebind(record: Any, workload: Any) -> Any:
    """The record attached to this database's workload object (same trace, times, target, args)."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    return TuningRecord(record.trace, workload, record.run_secs, record.target, record.args_info)
