"""Seeds for a workload without records of its own: the best records of workloads of its shape class.

A shape class is a PrimFunc's block structure with the shapes left out: the blocks in order, each with
its name and iterator kinds (``pad_temp SSSS, conv2d_nchw SSSSRRR, T_add SSSS, ...``). MetaSchedule's
traces find blocks by name and loops by position, so a trace tuned on one member replays on another; a
convolution at 56x56 with 24 channels takes the tiling of one at 64x64 with 16.

Replaying a trace onto other shapes keeps its decisions, and MetaSchedule's own answer to a tile that no
longer divides its loop is to give that tile the whole rest of the loop (``SamplePerfectTile``: a tile of
8 on a loop of 12 becomes 12, the outer tiles 1). ``adapt_tile`` keeps the tiling's shape instead: from
the innermost, the largest divisor of what is left no larger than the old factor. Measured on
small_convnet's first convolution tuned at 64x64x16 (32 trials), its 8 best records replayed onto
56x56x24, 48x48x12, 40x40x20 and 32x32x8 (best of 3 timings of 5 runs each, 2 cores): either replay beat
16 random samples of the design space on every shape (best 51.7 against 107 µs at 56x56x24); MetaSchedule's
own fix-up was up to 6x slower on some records (402 against 66 µs) and adapt_tile up to 1.4x slower on
others (23.4 against 16.6 µs at 48x48x12). Both are kept when they differ: the search measures and ranks
them.

A seed is a schedule of *this* workload, never a record of it: seeds are offered to the search (the
first batch, the initial population) and only what is then measured is stored, with its own times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SEEDS_PER_NEIGHBOUR = 8  # the best records of each similar workload, at most
MAX_NEIGHBOURS = 4  # the nearest similar workloads (by how far their loop extents are)
MAX_OFFERED = 16  # records tried as seeds per task: 8 of one neighbour, 4 each of four


@dataclass(frozen=True)
class Neighbour:
    """A workload that may lend its records: a label, its module, its best valid records, fastest first."""

    label: str
    mod: Any
    records: list[Any]


@dataclass
class Seeds:
    """The seeds of one task: where they came from, how many records were offered and replayed."""

    task: str
    sources: list[str]
    offered: int
    traces: list[Any]  # replays onto the task's module (no post-processing), best source first
    measured: int = 0  # seeds measured in the first batch
    ranked: bool = False  # whether the cost model picked the measured ones (else the source order did)
    best_seed_us: float | None = None  # the first batch's best seed
    best_other_us: float | None = None  # the first batch's best candidate of the search's own

    def provenance(self) -> dict[str, Any]:
        """The task's line in the build's ``warm_start`` provenance."""
        return {
            "task": self.task,
            "from": self.sources,
            "offered": self.offered,
            "accepted": len(self.traces),
            "measured": self.measured,
            "ranked": self.ranked,
            "best_seed_us": self.best_seed_us,
            "best_other_us": self.best_other_us,
        }


def _blocks(mod: Any) -> list[Any]:
    """The blocks of a one-function module, in program order (root excluded)."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    out: list[Any] = []

    def walk(block: Any) -> None:
        for child in sch.get_child_blocks(block):
            out.append(sch.get(child))
            walk(child)

    walk(sch.get_sblock("root"))
    return out


_KINDS = {0: "S", 2: "R"}  # IterVar.iter_type: data parallel, reduction; others print as their number


def shape_class(mod: Any) -> tuple[Any, ...] | None:
    """The module's block structure without shapes, or None where it has none to compare (no blocks)."""
    try:
        blocks = _blocks(mod)
    except Exception:  # a module of another form (several functions): nothing to match it with
        return None
    if not blocks:
        return None
    return tuple(
        (b.name_hint, "".join(_KINDS.get(int(iv.iter_type), str(iv.iter_type)) for iv in b.iter_vars)) for b in blocks
    )


def extents(mod: Any) -> list[int]:
    """The loop extents of every block iterator, in order (what tells near shapes from far ones)."""
    out = []
    for b in _blocks(mod):
        for iv in b.iter_vars:
            try:
                out.append(int(iv.dom.extent))
            except (TypeError, ValueError):  # a symbolic extent
                out.append(1)
    return out


def distance(a: list[int], b: list[int]) -> float:
    """How far two members of a shape class are: the sum of |log| extent ratios."""
    return sum(abs(math.log(max(1, x) / max(1, y))) for x, y in zip(a, b, strict=False))


def adapt_tile(decision: list[int], extent: int) -> list[int]:
    """A perfect tiling of ``extent`` shaped like ``decision``: from the innermost, the largest divisor of
    what is left that is no larger than the old factor; the outermost takes the rest."""
    out = [1] * len(decision)
    left = extent
    for i in range(len(decision) - 1, 0, -1):
        cap = max(1, int(decision[i]))
        factor = max(d for d in range(1, min(cap, left) + 1) if left % d == 0)
        out[i] = factor
        left //= factor
    out[0] = left
    return out


def _adapter(sch: Any) -> Any:
    """A decision provider for ``Trace.apply_to_schedule`` that adapts perfect tiles to this schedule's loops."""

    def provide(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
        if inst.kind.name != "SamplePerfectTile" or decision is None:
            return decision
        try:
            extent = int(sch.get(inputs[0]).extent)
        except (TypeError, ValueError):  # a symbolic loop: MetaSchedule's own handling
            return decision
        old = [int(x) for x in decision]
        return old if math.prod(old) == extent else adapt_tile(old, extent)

    return provide


def replay(trace: Any, mod: Any, *, adapt: bool) -> Any | None:
    """``trace`` replayed onto ``mod`` (post-processing left out): the schedule, or None if it does not fit."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod, error_render_level="none")
    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=_adapter(sch) if adapt else None)
    except Exception:  # a block or loop the trace names is not there: not a seed
        return None
    return sch


def find_seeds(task: str, mod: Any, neighbours: list[Neighbour]) -> Seeds | None:
    """The seeds for ``mod`` from the neighbours of its shape class, or None when it has no neighbour."""
    import tvm_ffi

    mine = shape_class(mod)
    if mine is None:
        return None
    own = extents(mod)
    near = sorted(
        (n for n in neighbours if n.records and shape_class(n.mod) == mine),
        key=lambda n: distance(own, extents(n.mod)),
    )[:MAX_NEIGHBOURS]
    if not near:
        return None
    # The best record of each neighbour first (nearest first), then the second best of each, ...
    ranks = min(SEEDS_PER_NEIGHBOUR, max(1, MAX_OFFERED // len(near)))
    offered = [n.records[rank] for rank in range(ranks) for n in near if rank < len(n.records)]
    traces, seen = [], set()
    for record in offered:
        for adapt in (True, False):
            sch = replay(record.trace, mod, adapt=adapt)
            if sch is None:
                continue
            key = tvm_ffi.structural_hash(sch.mod)
            if key not in seen:
                seen.add(key)
                traces.append(sch.trace)
    return Seeds(task=task, sources=[n.label for n in near], offered=len(offered), traces=traces)


def candidate(trace: Any, context: Any) -> Any | None:
    """A measure candidate of ``context``'s workload from a seed: replayed and post-processed as the
    search does its own, or None where a post-processor refuses it."""
    from tvm import s_tir
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    sch = s_tir.Schedule(context.mod, error_render_level="none")
    try:
        trace.apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        for postproc in context.space_generator.postprocs:
            if not postproc.apply(sch):
                return None
    except Exception:  # a post-processor that raises refuses it too
        return None
    return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
