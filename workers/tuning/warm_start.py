"""A warm start from the records of the scope: a cost model trained on them, and seeds for new workloads.

The records a team has stored for a target and board key (one scope: workers/tuning/database.py) are a
training set. Before the search:

- **The cost model is trained on them** (``xgb`` or ``mlp``; ``random`` learns nothing): per workload
  of the scope, its ``BEST`` fastest valid records and an even spread of the rest, ``PER_WORKLOAD`` at
  most, ``TOTAL`` in all; failed trials (MetaSchedule's 1e10 s stub) never. Each record is rebuilt as a
  measure candidate of its workload and given to ``CostModel.update`` with its run times, as the search
  itself does after a batch. The one model then serves every task of the build and keeps learning from
  each. MetaSchedule's XGBoost model answers at random until it has seen 100 measurements
  (``num_warmup_samples``), which a cold search of fewer trials per task never reaches (each task starts
  a model of its own); trained on ``ACTIVE_AFTER`` stored records or more, it ranks from the first round
  (in-process, on a 56x56x24 convolution, 48 trials, three seeds: 259-309 µs with it against 307-352 µs
  with MetaSchedule's warmup kept, and 365-459 µs cold).
- **A task without records of its own is seeded** from the best records of the nearest workloads of its
  shape class (workers/tuning/seeding.py): stored ones, and the build's tasks tuned before it. The seeds
  go into the search's initial population (``SeedingDatabase.get_top_k``, where MetaSchedule's
  evolutionary search picks its measured records) and the best few by the trained cost model
  (``rank_seeds``) are measured in its first batch (``SeededSearch``), in place of the search's
  lowest-ranked picks, so the budget is unchanged.

Records of the same workload were reused before this (a task's stored trials count against its
budget): across models, opt_levels and executors alike, wherever the workload hash under the
``module_equality`` rule is the same. ``[tuning] warm_start = false`` turns all of it off.

The provenance (``Build.tuning["warm_start"]``): ``enabled``, ``trained_on`` (records the cost model was
trained on), ``workloads`` (how many workloads they came from), ``train_s``, ``note`` (why nothing was
trained, when nothing was), and ``seeded``: per seeded task ``task``, ``from`` (the workloads the seeds
came from), ``offered`` (their records tried), ``accepted`` (distinct replays onto the task),
``measured`` (seeds in its first batch), ``ranked`` (whether the cost model picked them),
``best_seed_us`` and ``best_other_us`` (the best seed and the best of the search's own candidates in
that batch).
"""

from __future__ import annotations

import time
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import TuningRecord

from tvmbench.core.errors import one_line
from tvmbench.core.records import MS_FAILED_RUN_S
from workers.tuning.database import _PyDatabaseBase, workload_hash
from workers.tuning.first_batch import AroundSearch, first_batch_strategy, guides
from workers.tuning.seeding import SEEDS_PER_NEIGHBOUR, Neighbour, Seeds, candidate, find_seeds

BEST = SEEDS_PER_NEIGHBOUR  # per workload: its fastest records, for the seeds and the model
PER_WORKLOAD = 64  # per workload at most: the best and a spread of the rest (slow ones teach a ranking too)
TOTAL = 1024  # records the cost model is trained on at most (rebuilding one replays its trace)
TRAINED_KINDS = ("xgb", "mlp")
# Stored records an XGBoost model is trained on for it to rank from the first round on, instead of at
# random until it has seen 100 (its num_warmup_samples): they are measurements like the search's own.
ACTIVE_AFTER = 32
FIRST_BATCH_SHARE = 4  # at most 1/4 of the first batch is seeds: the search's own picks keep the rest


def _valid_secs(record: Any) -> list[float]:
    """A record's run seconds, or [] for a failed trial (no time, or only MetaSchedule's 1e10 stub)."""
    secs = [float(s) for s in (record.run_secs or [])]
    return secs if any(s < MS_FAILED_RUN_S for s in secs) else []


def scope_sample(db: Any, module_equality: str) -> list[tuple[Any, str, list[Any]]]:
    """(workload, hash, valid records fastest first) per workload of the records' scope, sampled as
    ``BEST`` / ``PER_WORKLOAD`` / ``TOTAL`` say: in SQL by one query, elsewhere from all the records."""
    if hasattr(db, "sample"):  # SqlTuningDatabase: no failed trial or unchosen record is rebuilt
        return db.sample(best=BEST, per_workload=PER_WORKLOAD, total=TOTAL)
    from db.tuning_records import spread

    groups: list[tuple[Any, list[tuple[float, Any]]]] = []
    for record in db.get_all_tuning_records():
        secs = _valid_secs(record)
        if not secs:
            continue
        group = next((g for g in groups if g[0].same_as(record.workload)), None)
        if group is None:
            group = (record.workload, [])
            groups.append(group)
        group[1].append((sum(secs) / len(secs), record))
    if not groups:
        return []
    each = max(1, min(PER_WORKLOAD, TOTAL // len(groups)))
    out = []
    for workload, timed in groups[:TOTAL]:
        ranked = [r for _, r in sorted(timed, key=lambda t: t[0])]
        picks = spread(list(range(len(ranked))), min(BEST, each), each)
        out.append((workload, workload_hash(workload.mod, module_equality), [ranked[i] for i in picks]))
    return out


def pretrain(kind: str, sample: list[tuple[Any, str, list[Any]]], target: Any, threads: int) -> tuple[Any, dict]:
    """A ``kind`` cost model trained on ``sample``, and what it was trained on; (None, why) when not."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    if kind not in TRAINED_KINDS:
        return None, {"note": f'cost model "{kind}" learns nothing: not trained'}
    try:
        model = ms.cost_model.CostModel.create(kind, num_tuning_cores=threads, tree_method="auto")
    except Exception as exc:  # xgboost or torch missing (a toolchain's interpreter): tune cold
        return None, {"note": f"cost model not trained: {one_line(exc)}"}
    batches = []
    for workload, _, records in sample:
        candidates, results = [], []
        for record in records:
            secs = _valid_secs(record)
            if not secs:
                continue
            try:
                candidates.append(record.as_measure_candidate())
            except Exception:  # a trace that no longer replays (it did when it was measured): skip it
                continue
            results.append(RunnerResult(run_secs=secs, error_msg=None))
        if candidates:
            batches.append((workload, candidates, results))
    adaptive = getattr(model, "adaptive_training", None)
    for i, (workload, candidates, results) in enumerate(batches):
        if adaptive and i == len(batches) - 1:
            # XGBoost retrains only once its data grew by a fifth: the last workload's records must count.
            model.adaptive_training = False
        # The context gives the features their target and the model its per-workload group.
        model.update(ms.TuneContext(mod=workload.mod, target=target, num_threads=threads), candidates, results)
    if adaptive is not None:
        model.adaptive_training = adaptive
    trained, workloads = sum(len(b[1]) for b in batches), len(batches)
    if trained >= ACTIVE_AFTER and hasattr(model, "num_warmup_samples"):
        model.num_warmup_samples = 0
    return model, {"trained_on": trained, "workloads": workloads}


class WarmStart:
    """One build's warm start: what ``tune_tasks`` gets instead of a database, a cost model and a strategy
    name (``database``, ``cost_model``, ``strategy``), and the provenance it ends with."""

    def __init__(self, db: Any, settings: Any, target: Any, threads: int | str) -> None:
        from tvm.s_tir.meta_schedule.utils import cpu_count

        started = time.perf_counter()
        self.db = db
        self.module_equality = settings.module_equality
        self.threads = cpu_count(logical=False) if threads == "physical" else int(threads)
        self.seeded: list[Seeds] = []
        self.notes: list[str] = []
        self._mates: list[tuple[str, Any]] = []  # (task, module) of this build's tasks, in tuning order
        self._mine: dict[int, str] = {}  # structural hash of a seeded task's module -> task
        try:
            self.sample = scope_sample(db, self.module_equality)
        except Exception as exc:  # an unreadable store must not stop the build: tune cold
            self.sample = []
            self.notes.append(f"stored records not read: {one_line(exc)}")
        try:
            self.cost_model, trained = pretrain(settings.cost_model, self.sample, target, self.threads)
        except Exception as exc:  # a model that cannot learn from them: the search's own, untrained
            self.cost_model, trained = None, {"note": f"cost model not trained: {one_line(exc)}"}
        if self.cost_model is None:
            self.cost_model = settings.cost_model
        self.info = {"trained_on": 0, "workloads": 0, **trained, "train_s": time.perf_counter() - started}
        self.database = SeedingDatabase(db, self)
        self.strategy = SeededSearch(
            self, first_batch_strategy(lambda: guides(self.cost_model), population=settings.population)
        )

    # --- seeds ------------------------------------------------------------------------------------

    def seeds_for(self, context: Any) -> Seeds | None:
        """The seeds of the task ``context`` tunes; None when it has records of its own, or no neighbour."""
        import tvm_ffi

        mod, task = context.mod, str(context.task_name)
        mates, self._mates = list(self._mates), [*self._mates, (task, mod)]
        if self.db.get_top_k(self.db.commit_workload(mod), 1):
            return None  # its own records seed it already (MetaSchedule picks them)
        mine = workload_hash(mod, self.module_equality)
        fresh = {workload_hash(m, self.module_equality): (name, m) for name, m in mates}
        neighbours = [
            Neighbour(f"workload {h[:12]}", wl.mod, records[:SEEDS_PER_NEIGHBOUR])
            for wl, h, records in self.sample
            if h != mine and h not in fresh
        ]
        for h, (name, m) in fresh.items():  # the build's earlier tasks: their records of minutes ago
            if h != mine:
                neighbours.append(
                    Neighbour(name, m, list(self.db.get_top_k(self.db.commit_workload(m), SEEDS_PER_NEIGHBOUR)))
                )
        seeds = find_seeds(task, mod, neighbours)
        if seeds is not None:
            self.seeded.append(seeds)
            self._mine[tvm_ffi.structural_hash(mod)] = task
        return seeds

    def population_seeds(self, workload: Any) -> list[Any]:
        """The seed traces of a seeded task's workload (``SeedingDatabase.get_top_k``), else []."""
        import tvm_ffi

        task = self._mine.get(tvm_ffi.structural_hash(workload.mod))
        seeds = next((s for s in self.seeded if s.task == task), None) if task else None
        return list(seeds.traces) if seeds else []

    def provenance(self) -> dict[str, Any]:
        """The build's ``warm_start`` provenance (see the module docstring)."""
        note = "; ".join([*self.notes, *([self.info["note"]] if self.info.get("note") else [])]) or None
        return {
            "enabled": True,
            "trained_on": self.info["trained_on"],
            "workloads": self.info["workloads"],
            "train_s": self.info["train_s"],
            "note": note,
            "seeded": [s.provenance() for s in self.seeded],
        }


def begin(db: Any, settings: Any, target: Any, threads: int | str) -> WarmStart | None:
    """The build's warm start, or None when ``[tuning] warm_start = false``."""
    return WarmStart(db, settings, target, threads) if settings.warm_start else None


def warm_provenance(warm: WarmStart | None, settings: Any) -> dict[str, Any]:
    """``warm_start`` of a build's tuning provenance: what ``warm`` did, or why there was none."""
    if not settings.warm_start:
        return {"enabled": False}
    if warm is None:
        return {"enabled": True, "trained_on": 0, "workloads": 0, "note": "nothing left to tune", "seeded": []}
    return warm.provenance()


@derived_object
class SeedingDatabase(_PyDatabaseBase):
    """The records' database as the search sees it: a seeded task's ``get_top_k`` ends with its seeds.

    MetaSchedule's evolutionary search starts its population from ``get_top_k`` of the task's workload
    and uses only the records' traces; everything else (and every write) is the database's own, so a
    seed is never stored as a record of the workload.
    """

    def __init__(self, db: Any, warm: WarmStart) -> None:
        self.module_equality = warm.module_equality
        self.db = db
        self.warm = warm

    def has_workload(self, mod: Any) -> bool:
        return bool(self.db.has_workload(mod))

    def commit_workload(self, mod: Any) -> Any:
        return self.db.commit_workload(mod)

    def commit_tuning_record(self, record: Any) -> None:
        self.db.commit_tuning_record(record)

    def get_top_k(self, workload: Any, top_k: int) -> list[Any]:
        own = list(self.db.get_top_k(workload, top_k))
        if len(own) >= top_k:
            return own
        try:
            traces = self.warm.population_seeds(workload)
        except Exception:  # a seed is a help, never the search's failure
            traces = []
        return own + [TuningRecord(trace, workload) for trace in traces[: top_k - len(own)]]

    def get_all_tuning_records(self) -> list[Any]:
        return list(self.db.get_all_tuning_records())

    def __len__(self) -> int:
        return len(self.db)


def ranks(model: Any) -> bool:
    """Whether ``model`` is a trained model object that ranks candidates now (a name is a fresh model)."""
    return model is not None and not isinstance(model, str) and guides(model)


def rank_seeds(cands: list[Any], model: Any, context: Any) -> tuple[list[Any], bool]:
    """``cands`` (seed candidates of ``context``'s task) best first by ``model``'s scores, and whether it
    ranked them: as given (the nearest neighbour's best record first) when it cannot rank yet.

    A record's rank on its own workload says little of its replay onto other shapes (on light_shufflenet
    ``conv2d12``'s first seed ran 731 µs, its best 99 µs); the warm start's model, trained on the scope's
    records of this shape class, ranks the replays themselves.
    """
    if len(cands) < 2 or not ranks(model):
        return cands, False
    try:
        scores = [float(s) for s in model.predict(context, cands)]
    except Exception:  # a model that cannot score them: the source order is still a fair guess
        return cands, False
    order = sorted(range(len(cands)), key=lambda i: -scores[i])  # a higher score is a faster schedule
    return [cands[i] for i in order], True


def measure_order(seeds: list[Any], picks: list[Any], model: Any, context: Any) -> tuple[list[Any], list[int]]:
    """A seeded task's first batch in the order it is measured, and the seeds' positions in it.

    When ``model`` ranks, the whole batch goes best first by its scores: a seed comes before the search's
    own picks only where the model expects it faster (on light_shufflenet ``conv2d4``'s favourite seed ran
    386 µs, a pick of the search 123 µs), so the batch's first trials, which the tuning curve and a
    cancelled search keep, are its most promising. In MetaSchedule's warmup the seeds go first: the nearest
    neighbour's best records are a better guess than a random draw.
    """
    batch, _ = rank_seeds([*seeds, *picks], model, context)
    own = {id(s) for s in seeds}
    return batch, [i for i, c in enumerate(batch) if id(c) in own]


@derived_object
class SeededSearch(AroundSearch):
    """MetaSchedule's evolutionary search, whose first batch of a seeded task holds its best seeds by the
    cost model (``rank_seeds``; at most a quarter of the batch) in place of the search's lowest-ranked
    picks, measured in the model's order among them (``measure_order``)."""

    def __init__(self, warm: WarmStart, inner: Any = None) -> None:
        super().__init__(inner)
        self.warm = warm
        self.seeds: Seeds | None = None
        self.slots: list[int] = []  # positions of the seeds in the batch being measured
        self.first = True
        self.cost_model: Any = None

    def pre_tuning(
        self,
        max_trials: int,
        num_trials_per_iter: int,
        design_spaces: Any,
        database: Any = None,
        cost_model: Any = None,
    ) -> None:
        super().pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.cost_model = cost_model
        try:
            self.seeds = self.warm.seeds_for(self.context)
        except Exception as exc:  # tune this task cold
            self.warm.notes.append(f"{self.context.task_name}: no seeds: {one_line(exc)}")
            self.seeds = None
        self.first = True

    def generate_measure_candidates(self) -> Any:
        picks = self.inner.generate_measure_candidates()
        self.slots = []
        if picks is None or not self.first or self.seeds is None or not self.seeds.traces:
            self.first = False
            return picks
        self.first = False
        picks = list(picks)
        try:
            return self._with_seeds(picks)
        except Exception as exc:
            self.warm.notes.append(f"{self.seeds.task}: seeds not measured: {one_line(exc)}")
            self.slots = []
            return picks

    def _with_seeds(self, picks: list[Any]) -> list[Any]:
        import tvm_ffi

        room = max(1, len(picks) // FIRST_BATCH_SHARE)
        taken = {tvm_ffi.structural_hash(c.sch.mod) for c in picks}
        # A model that ranks picks among every replay; otherwise the first `room` are the seeds, and
        # replaying the rest would be search time spent on nothing.
        wanted = None if ranks(self.cost_model) else room
        fresh: list[Any] = []
        for trace in self.seeds.traces:
            if len(fresh) == wanted:
                break
            cand = candidate(trace, self.context)
            if cand is not None and (key := tvm_ffi.structural_hash(cand.sch.mod)) not in taken:
                taken.add(key)
                fresh.append(cand)
        ranked, self.seeds.ranked = rank_seeds(fresh, self.cost_model, self.context)
        seeded = ranked[:room]
        keep = len(picks) - len(seeded)  # the search ranks its picks best first: its last ones make room
        batch, self.slots = measure_order(seeded, picks[:keep], self.cost_model, self.context)
        return batch

    def notify_runner_results(self, measure_candidates: Any, results: Any) -> None:
        if self.slots and self.seeds is not None:
            times = [_valid_secs(r) for r in results]
            mean_us = [sum(t) / len(t) * 1e6 if t else None for t in times]
            # A batch the inner search cut short (fewer distinct candidates than slots) has fewer results.
            seeds = [mean_us[i] for i in self.slots if i < len(mean_us) and mean_us[i] is not None]
            others = [u for i, u in enumerate(mean_us) if i not in self.slots and u is not None]
            self.seeds.measured = len(self.slots)
            self.seeds.best_seed_us = min(seeds) if seeds else None
            self.seeds.best_other_us = min(others) if others else None
            self.slots = []
        super().notify_runner_results(measure_candidates, results)

    def clone(self) -> Any:
        return SeededSearch(self.warm, self.inner.clone())
