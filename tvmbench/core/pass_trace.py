"""A compact, lossless form of a pass trace, for storage.

A build's trace lists every pass that ran, in order: the Relax-level passes, then the TIR pipeline,
which TVM runs once per kernel when a build lowers kernels one by one (thousands of names for a model
with a hundred kernels). Stored compactly, a run of identical consecutive blocks becomes one entry
``{"repeat": n, "passes": [...]}``; every other pass stays a plain name, in order. ``expand`` gives the
exact list back, so `results show --diff` diffs what really ran. Old rows hold the plain list, which
``expand`` returns unchanged. A marker ``{"stage": "codegen"}`` records where codegen began, so a
build that skipped codegen can take the codegen passes of the identical program it reuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_BLOCK = 400  # longest block looked for (the TIR pipeline of TVM 0.27 is about 60 passes)
MIN_SAVED = 8  # a repeat is folded only when it saves at least this many names


def compact(names: Sequence[str]) -> list[Any]:
    """Fold runs of a repeated block of passes; ``expand(compact(x)) == list(x)``."""
    names = list(names)
    n = len(names)
    # Where each name occurs next, so that only block lengths ending where the block's first name
    # occurs again are tried.
    following: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        following.setdefault(name, []).append(i)
    out: list[Any] = []
    i = 0
    while i < n:
        best_len, best_reps = 0, 1
        for j in following[names[i]]:
            length = j - i
            if length <= 0:
                continue
            if length > MAX_BLOCK or i + 2 * length > n:
                break
            block = names[i : i + length]
            reps = 1
            while names[i + reps * length : i + (reps + 1) * length] == block:
                reps += 1
            if reps > 1 and (reps - 1) * length > (best_reps - 1) * best_len:
                best_len, best_reps = length, reps
        if best_reps > 1 and (best_reps - 1) * best_len >= MIN_SAVED:
            out.append({"repeat": best_reps, "passes": names[i : i + best_len]})
            i += best_len * best_reps
        else:
            out.append(names[i])
            i += 1
    return out


CODEGEN = {"stage": "codegen"}


def compact_split(names: Sequence[str], pipeline_passes: int | None) -> list[Any]:
    """``compact``, with the codegen marker after the first ``pipeline_passes`` names when known."""
    if pipeline_passes is None:
        return compact(names)
    return [*compact(names[:pipeline_passes]), CODEGEN, *compact(names[pipeline_passes:])]


def expand(stored: Sequence[Any] | None) -> list[str]:
    """The full pass list from a stored trace: compact (new rows) or a plain list (old rows)."""
    names: list[str] = []
    for entry in stored or ():
        if isinstance(entry, dict):
            if "repeat" in entry:
                names.extend(list(entry["passes"]) * int(entry["repeat"]))
        else:
            names.append(str(entry))
    return names


def pipeline_passes(stored: Sequence[Any] | None) -> int | None:
    """How many passes ran before codegen, from the marker; None when the trace has none."""
    count = 0
    for entry in stored or ():
        if entry == CODEGEN:
            return count
        count += len(expand([entry]))
    return None
