"""Reading MetaSchedule's JSON database files line by line: every bad line named by file and number.

``ms.database.JSONDatabase`` reads the two files in C++ and fails with its own check message
(``json_array->size() == 2``), naming neither the file nor the line; and it rebuilds every line, even
the 50,000 copies of a handful of records a long tuning log can hold. Here each file is read as JSON
lines, identical record lines are counted once, and only the distinct ones become TVM objects.

The format (MetaSchedule's own): ``database_workload.json`` holds one ``[hash, base64 IRModule]`` per
line; ``database_tuning_record.json`` one ``[workload line index, [trace, run_secs, target, args_info]]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROGRESS_EVERY = 1000  # record lines between two progress reports


class JsonFileError(ValueError):
    """A line of a JSON database file is not what MetaSchedule writes; the message names file and line."""


@dataclass(frozen=True)
class RecordLine:
    """One distinct record line: where it first appears, its workload's index and its record JSON."""

    line: int
    workload_index: int
    record: list[Any]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of the non-empty lines of ``path``."""
    with path.open(encoding="utf-8", errors="strict") as f:
        for number, text in enumerate(f, start=1):
            text = text.strip()
            if text:
                yield number, text


def _parse(path: Path, number: int, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:  # [[[[...: MetaSchedule never nests a line more than a few levels
        raise JsonFileError(f"{path}:{number}: JSON nested too deeply to be a MetaSchedule database line") from None


def read_workloads(path: Path) -> list[tuple[int, list[str]]]:
    """Every workload line of ``path`` as (line number, [hash, base64 module]), in file order."""
    out = []
    try:
        for number, text in _lines(path):
            value = _parse(path, number, text)
            if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
                raise JsonFileError(
                    f"{path}:{number}: expected [workload hash, base64 module] as MetaSchedule writes it"
                )
            out.append((number, value))
    except UnicodeDecodeError:
        raise JsonFileError(f"{path}: not a text file; a MetaSchedule database file is JSON lines") from None
    return out


def read_records(
    path: Path, workloads: int, progress: Callable[[int, int], None] | None = None
) -> tuple[list[RecordLine], int]:
    """The distinct record lines of ``path`` (first occurrence kept) and the number of record lines.

    ``workloads``: how many workload lines there are (each record names one by index). ``progress``
    is called with (lines read, distinct so far) every PROGRESS_EVERY lines and at the end.
    """
    seen: set[str] = set()
    distinct: list[RecordLine] = []
    count = 0
    try:
        for number, text in _lines(path):
            count += 1
            if text not in seen:
                seen.add(text)
                value = _parse(path, number, text)
                if not (
                    isinstance(value, list)
                    and len(value) == 2
                    and isinstance(value[0], int)
                    and isinstance(value[1], list)
                    and len(value[1]) == 4
                ):
                    raise JsonFileError(
                        f"{path}:{number}: expected [workload index, [trace, run_secs, target, args_info]] "
                        "as MetaSchedule writes it"
                    )
                if not 0 <= value[0] < workloads:
                    raise JsonFileError(
                        f"{path}:{number}: workload index {value[0]} but the workload file has {workloads} line(s)"
                    )
                distinct.append(RecordLine(number, value[0], value[1]))
            if progress is not None and count % PROGRESS_EVERY == 0:
                progress(count, len(distinct))
    except UnicodeDecodeError:
        raise JsonFileError(f"{path}: not a text file; a MetaSchedule database file is JSON lines") from None
    if progress is not None and count % PROGRESS_EVERY:
        progress(count, len(distinct))
    return distinct, count
