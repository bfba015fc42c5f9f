"""Tuning records to and from MetaSchedule's JSON database files (`tvmbench tuning export/import`).

A directory with ``database_workload.json`` and ``database_tuning_record.json`` is what
``ms.database.JSONDatabase(work_dir=DIR)`` reads and writes, so records move between tvmbench and plain
TVM scripts. Both directions go through a real ``JSONDatabase``: the files are written by MetaSchedule
itself, byte for byte in its format, and read back the way it reads them.

The files know nothing of boards or TVM versions: an export is one scope (so a JSONDatabase never mixes
a Raspberry Pi's times with a laptop's), and an import is told the board key its times were taken on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tvmbench.core.errors import describe_missing
from tvmbench.core.records import TuningScope, canonical_hash
from workers.tuning.database import MODULE_EQUALITIES, SqlTuningDatabase, canonical_target, installed_tvm_version
from workers.tuning.json_files import JsonFileError, read_records, read_workloads

if TYPE_CHECKING:
    from db.store import ResultStore

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
IMPORT_BATCH = 500  # records written per transaction by an import


class ExchangeError(ValueError):
    """Bad input to an export or import; the message names the culprit and what to do."""


@dataclass
class Exported:
    directory: Path
    scope: dict[str, Any]
    workloads: int = 0
    records: int = 0  # record lines written
    skipped: int = 0  # records the files held already (--append): not written twice


@dataclass
class Imported:
    directory: Path
    records: int = 0  # record lines read from the files
    distinct: int = 0  # of those, different records (a long tuning log repeats them)
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
    module_equality: str | None = None,
    model_name: str | None = None,
) -> TuningScope:
    """The one scope the filters leave, or an ExchangeError listing the candidates."""
    wanted = target_filter(target)
    if module_equality is not None:
        check_module_equality(module_equality)
    scopes = [
        s
        for s in store.tuning_scopes()
        if _matches(wanted, s["target"])
        and (board_key is None or s["board_key"] == board_key)
        and (tvm_version is None or s["tvm_version"] == tvm_version)
        and (module_equality is None or s["module_equality"] == module_equality)
    ]
    if model_name is not None:
        with_model = {
            (w.target_key, w.board_key, w.tvm_version, w.module_equality)
            for w, _ in store.tuning_records(model_name=model_name)
        }
        scopes = [
            s for s in scopes if (s["target_key"], s["board_key"], s["tvm_version"], s["module_equality"]) in with_model
        ]
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
            f"{_narrowing(scopes)}"
        )
    s = scopes[0]
    return TuningScope(
        target=s["target"], board_key=s["board_key"], tvm_version=s["tvm_version"], module_equality=s["module_equality"]
    )


def _narrowing(scopes: list[dict[str, Any]]) -> str:
    """The options that tell ``scopes`` apart, those that would separate them first: a user told to narrow
    by options that cannot (two scopes differing only in module equality) is left with nothing to type."""
    options = {
        "--board-key": "board_key",
        "--target": "target_key",
        "--tvm-version": "tvm_version",
        "--module-equality": "module_equality",
    }
    useful = [opt for opt, key in options.items() if len({str(s[key]) for s in scopes}) > 1]
    return " or ".join(useful or list(options))


def check_module_equality(value: str) -> None:
    """ExchangeError unless ``value`` is one of MetaSchedule's module equalities."""
    if value not in MODULE_EQUALITIES:
        raise ExchangeError(f"--module-equality {value!r} is not one of {', '.join(MODULE_EQUALITIES)}")


def check_tvm_version(value: str) -> str:
    """``value`` if it names a TVM release as the sweep file's tvm axis writes one (0.27.0.post1, 0.28.0rc1)
    or is the TVM installed here (which may be a local build such as 0.28.dev0+g1234); else ExchangeError.

    The version is part of a scope: records stored under a misspelt one are never reused by any sweep.
    """
    from workers.toolchains.spec import parse
    from workers.toolchains.toolchain import ToolchainError

    text = value.strip()
    if text == installed_tvm_version():
        return text
    try:
        release = parse(text).kind == "release" if text else False
    except ToolchainError:
        release = False
    if not release:
        raise ExchangeError(
            f"--tvm-version {value!r} is not a TVM release (such as {installed_tvm_version()}, the TVM here): "
            "give the version the records were tuned with, or leave it out for this TVM"
        )
    return text


def short_target(target: dict[str, Any] | None) -> str:
    """A target in a few words: kind, triple, CPU and cores."""
    target = target or {}
    parts = [str(target.get("kind", "?"))]
    for key in ("mtriple", "mcpu", "num-cores"):
        if key in target:
            parts.append(f"{key}={target[key]}")
    return " ".join(parts)


def check_top(top: int | None) -> None:
    """ExchangeError unless ``top`` (records per workload to export) is None or at least 1."""
    if top is not None and top < 1:
        raise ExchangeError(
            f"--top {top} would export nothing: give N >= 1 (the N fastest valid records per workload), "
            "or leave --top out for every record, failed trials too"
        )


def export_records(
    store: ResultStore,
    directory: Path,
    scope: TuningScope,
    *,
    model_name: str | None = None,
    top: int | None = None,
    append: bool = False,
) -> Exported:
    """Write the records of ``scope`` (of ``model_name``'s workloads; the ``top`` best valid ones per
    workload if ``top`` is given, else every record, failed trials too) as a MetaSchedule JSON database
    in ``directory``."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord, Workload

    check_top(top)
    _output_directory(directory)
    existing = [p.name for p in (directory / WORKLOAD_FILE, directory / RECORD_FILE) if p.exists() and p.stat().st_size]
    if existing and not append:
        raise ExchangeError(
            f"{directory} already holds {' and '.join(existing)}; export into an empty directory, or pass --append "
            "to add these records to that database"
        )
    held = held_records(directory)  # before JSONDatabase reads the files: a bad line is named, not a C++ check
    rows = store.tuning_records(scope, model_name=model_name)
    out = JSONDatabase(work_dir=str(directory), module_equality=scope.module_equality)
    result = Exported(directory, {**scope.__dict__})
    per_workload: dict[int, int] = {}
    workloads: dict[int, Any] = {}
    for wl, rec in rows:
        if top is not None and per_workload.get(wl.id, 0) >= top:
            continue
        if top is not None and not rec.valid:
            continue  # "the best N" means measured ones
        if wl.id not in workloads:
            mod = Workload.from_json([wl.workload_hash, wl.mod_b64]).mod
            workloads[wl.id] = out.commit_workload(mod)
            result.workloads += 1
        per_workload[wl.id] = per_workload.get(wl.id, 0) + 1  # one held already is still among the best N
        if record_key(wl.workload_hash, [rec.trace, rec.run_secs, rec.target, rec.args_info]) in held:
            result.skipped += 1
            continue
        record = TuningRecord.from_json([rec.trace, rec.run_secs, rec.target, rec.args_info], workloads[wl.id])
        out.commit_tuning_record(record)
        result.records += 1
    if not result.records and not result.skipped:
        raise ExchangeError(
            "the selected scope has no records to export" + (f" for model {model_name}" if model_name else "")
        )
    return result


def record_key(workload_hash: str, record: list[Any]) -> tuple[str, str]:
    """What makes a record the same record in a JSON database: its workload's hash and its JSON, canonical."""
    return workload_hash, canonical_hash(_bools_as_ints(record))


def _bools_as_ints(value: Any) -> Any:
    """``value`` with every boolean as 0 or 1: MetaSchedule's JSON writer prints a trace's ``true`` as ``1``
    where the results database keeps ``true``, so the one record read from both would differ."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, list):
        return [_bools_as_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _bools_as_ints(v) for k, v in value.items()}
    return value


def held_records(directory: Path) -> set[tuple[str, str]]:
    """The ``record_key`` of every record the JSON database in ``directory`` holds (none there: empty).

    An --append of records already in the files wrote each one again (MetaSchedule's JSONDatabase appends
    whatever it is given): they are skipped instead, as an import skips the records already stored.
    """
    workload_file, record_file = directory / WORKLOAD_FILE, directory / RECORD_FILE
    if not (workload_file.is_file() and record_file.is_file()):
        return set()
    try:
        workloads = read_workloads(workload_file)
        lines, _ = read_records(record_file, len(workloads))
    except JsonFileError as exc:
        raise ExchangeError(f"{exc}; --append adds to a MetaSchedule JSON database: fix that line") from None
    except OSError as exc:
        raise ExchangeError(f"cannot read the JSON database in {directory}: {exc.strerror or exc}") from None
    return {record_key(workloads[line.workload_index][1][0], line.record) for line in lines}


def _output_directory(directory: Path) -> None:
    """Create ``directory`` for an export, or an ExchangeError saying why it cannot hold one."""
    import os

    if directory.exists() and not directory.is_dir():
        what = "is a file" if directory.is_file() else describe_missing(directory).removesuffix(", not a file")
        raise ExchangeError(f"{directory} {what}, not a directory: give a new or empty directory to export into")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExchangeError(
            f"cannot create {directory} ({exc.strerror or exc}): give a directory you can write"
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ExchangeError(f"{directory} is not writable: give a directory you can write")


def import_records(
    store: ResultStore,
    directory: Path,
    *,
    board_key: str,
    target: str | None = None,
    tvm_version: str | None = None,
    module_equality: str = "structural",
    model_name: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Imported:
    """Read a MetaSchedule JSON database from ``directory`` into the results database.

    Each record keeps its own target; ``target`` is for records that have none, and a record whose own
    target contradicts it is an ExchangeError naming both (storing it under either would be a lie). The
    times are taken to be of boards of ``board_key`` with ``tvm_version`` (default: this TVM; else a TVM
    release, ``check_tvm_version``). Importing twice adds nothing.
    Identical record lines are read once, and the records are written in batches of IMPORT_BATCH rows
    (one transaction each); ``progress(lines read, distinct records)`` follows the reading.
    """
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    check_module_equality(module_equality)
    if tvm_version is not None:
        tvm_version = check_tvm_version(tvm_version)
    if not directory.is_dir():
        raise ExchangeError(
            f"{directory} {describe_missing(directory)}: point at a MetaSchedule work_dir "
            "(the folder ms.database.JSONDatabase(work_dir=...) writes)"
        )
    for name in (WORKLOAD_FILE, RECORD_FILE):
        if not (directory / name).is_file():  # a FIFO or device there is never opened: it may never end
            found = (directory / name).exists() or (directory / name).is_symlink()
            what = f"{name} {describe_missing(directory / name)}" if found else f"has no {name}"
            raise ExchangeError(
                f"{directory} {what}: point at a MetaSchedule work_dir "
                "(what ms.database.JSONDatabase(work_dir=...) writes)"
            )
    fallback = target_filter(target)  # before the files are read: a bad --target is the first thing said
    workload_path, record_path = directory / WORKLOAD_FILE, directory / RECORD_FILE
    try:
        workload_lines = read_workloads(workload_path)
        lines, count = read_records(record_path, len(workload_lines), progress)
    except JsonFileError as exc:
        raise ExchangeError(f"{exc}; fix or remove that line") from None
    except OSError as exc:
        raise ExchangeError(f"cannot read the JSON database in {directory}: {exc.strerror or exc}") from None
    result = Imported(directory, records=count, distinct=len(lines))
    tvm_version = tvm_version or installed_tvm_version()
    workloads: dict[int, Any] = {}
    records = []
    for line in lines:  # distinct lines only: the TVM objects are built once per record
        if line.workload_index not in workloads:
            number, value = workload_lines[line.workload_index]
            try:
                workloads[line.workload_index] = Workload.from_json(value)
            except Exception as exc:
                what = f"not a MetaSchedule workload ({_last_line(exc)})"
                raise ExchangeError(f"{workload_path}:{number}: {what}") from None
        try:
            records.append(TuningRecord.from_json(line.record, workloads[line.workload_index]))
        except Exception as exc:
            raise ExchangeError(f"{record_path}:{line.line}: not a MetaSchedule record ({_last_line(exc)})") from None
    if fallback is not None:  # before anything is written: a refused import leaves the database as it was
        _check_targets(lines, records, fallback, target or "", record_path)
    dbs: dict[str, SqlTuningDatabase] = {}
    bound: dict[tuple[str, int], Any] = {}  # (target, workload index) -> that database's workload object
    before: dict[str, int] = {}
    source = f"import {directory}"[:200]
    writes = []
    for line, record in zip(lines, records, strict=True):
        tgt = canonical_target(record.target) if record.target is not None else fallback
        if tgt is None:
            raise ExchangeError(
                f"{record_path}:{line.line}: the record has no target: give the one it was tuned for with --target"
            )
        key = str(tgt)
        if key not in dbs:
            dbs[key] = SqlTuningDatabase(
                target=tgt, board_key=board_key, tvm_version=tvm_version, module_equality=module_equality,
                model_name=model_name, source=source, store=store,
            )  # fmt: skip
            before[key] = len(dbs[key])
        if (key, line.workload_index) not in bound:  # one structural hash per workload, not one per record
            bound[(key, line.workload_index)] = dbs[key].commit_workload(record.workload.mod)
        writes.append((dbs[key], _rebind(record, bound[(key, line.workload_index)])))
    for start in range(0, len(writes), IMPORT_BATCH):
        with store.batch():  # the workloads are stored above: no record's write needs an answer back
            for db, record in writes[start : start + IMPORT_BATCH]:
                db.commit_tuning_record(record)
    for key, db in dbs.items():
        after = len(db)
        result.new += after - before[key]
        result.scopes.append({**db.scope.__dict__, "records": after})
    result.workloads = len({(key, dbs[key].workload_row_id(w)) for (key, _), w in bound.items()})
    return result


def _check_targets(lines: list[Any], records: list[Any], wanted: dict[str, Any], text: str, path: Path) -> None:
    """ExchangeError at the first record whose own target is not ``wanted`` (``--target text``): the files
    say where the records were tuned, and the option cannot move them to another target."""
    for line, record in zip(lines, records, strict=True):
        if record.target is None:
            continue
        own = canonical_target(record.target)
        if not _matches(wanted, own):
            raise ExchangeError(
                f"{path}:{line.line}: the record was tuned for target {short_target(own)}, not --target {text} "
                f"({short_target(wanted)}); leave --target out to import each record under its own target"
            )


def _last_line(exc: BaseException) -> str:
    """The last line of a TVM error (its message; the lines above are C++ frames), shortened."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def _rebind(record: Any, workload: Any) -> Any:
    """The record attached to this database's workload object (same trace, times, target, args)."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    return TuningRecord(record.trace, workload, record.run_secs, record.target, record.args_info)
