"""The Python API: plan and run sweeps and ask the results database, from a notebook or a script.

The CLI's commands are thin layers over the same library calls; here every answer is a pandas DataFrame
(one row per job, configuration or point) so it can be filtered, plotted or joined further. Errors are
the library's own exceptions (`SpecError` for a bad sweep file, `QueryError` for a lookup that finds
nothing), each one line that says what to do.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Everything below is imported where it is used: `import tvmbench` stays cheap (no pandas, ONNX, TVM or Ray
# until a function needs them), as a notebook's first cell should be.
if TYPE_CHECKING:
    import pandas as pd

    from db.store import ResultStore
    from tvmbench.answers.query import Filters

ProgressFn = Callable[[str, dict[str, int]], None]


def _frame(rows: builtins.list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    from tvmbench.answers.analysis_views import records

    return pd.DataFrame(records(rows))


def plan(path: str | Path, *, label: str | None = None, db: str | None = None) -> pd.DataFrame:
    """The job matrix of a sweep file (what `sweep plan` prints): one row per job, with what is cached.

    ``db``: the results database whose builds and results count as done (default: TVMBENCH_DB or the
    SQLite file in TVMBENCH_HOME); it is only read.
    """
    import pandas as pd

    from db.store import ResultStore
    from orchestrator.plan import plan_rows
    from orchestrator.spec import load_spec

    spec = load_spec(path, label=label)
    rows = plan_rows(spec, ResultStore(db, read_only=True))
    return pd.DataFrame(rows).assign(sweep_id=spec.sweep_id)


@dataclass(frozen=True)
class SweepRun:
    """What `run` returns: the sweep id, its result table (one row per job) and the outcome counts.

    Unpacks as ``sweep_id, table = tvmbench.run(...)``.
    """

    sweep_id: str
    table: pd.DataFrame
    outcome: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.sweep_id, self.table))

    @property
    def complete(self) -> bool:
        """Every job has a final row (none waits for a device)."""
        return bool(self.outcome.get("complete"))


def run(
    path: str | Path,
    *,
    db: str | None = None,
    label: str | None = None,
    tracker: str | None = None,
    ray_address: str | None = None,
    boards: int = 1,
    progress: ProgressFn | None = None,
) -> SweepRun:
    """Run (or finish) a sweep as `sweep run` does and return its id and table.

    ``tracker``: HOST:PORT of a TVM RPC tracker (default: the configured farm, else a local one started
    and stopped here, with ``boards`` host boards). ``ray_address``: a Ray cluster (default: a local
    instance). ``progress(event, counts)`` is called as builds and measurements finish.
    """
    from db.engine import refuse_in_memory
    from db.store import ResultStore, ensure_home
    from orchestrator import scheduler
    from orchestrator.farm.errors import check_board_count
    from orchestrator.spec import load_spec
    from tvmbench.answers.query import results

    check_board_count(boards)  # before anything is opened or started: FarmError, one line
    spec = load_spec(path, label=label)
    refuse_in_memory(db)  # a sweep run into memory would be lost with this process
    store = ResultStore(db)
    outcome = scheduler.execute_sweep(
        spec, store, ensure_home(), tracker=tracker, ray_address=ray_address, boards=boards, progress=progress
    )
    summary = {**outcome.summary(), "complete": outcome.complete}
    return SweepRun(spec.sweep_id, _frame(results(store, spec.sweep_id)), summary)


class Results:
    """A results database, read only: ``tvmbench.open(db)``."""

    def __init__(self, db: str | None = None) -> None:
        from db.store import ResultStore

        self.store: ResultStore = ResultStore(db, read_only=True)

    def close(self) -> None:
        """Let go of the database's connections (``with tvmbench.open(db) as results:`` does it on exit)."""
        self.store.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def sweeps(self) -> pd.DataFrame:
        """The sweeps, newest first, with their progress (what `results sweeps` prints)."""
        from tvmbench.answers.query import sweeps_overview

        return _frame(sweeps_overview(self.store))

    def list(self, sweep: str | None = None) -> pd.DataFrame:
        """One row per job of ``sweep`` (id, prefix or label; default: every sweep)."""
        from tvmbench.answers.query import results

        return _frame(results(self.store, sweep))

    def query(self, *, limit: int | None = None, **filters: Any) -> pd.DataFrame:
        """Every result matching ``filters``: sweep, model, target, board, executor, opt_level, pipeline, status,
        since, until (datetimes or ISO strings), max_memory_mb."""
        from tvmbench.answers.query import query

        return query(self.store, _filters(filters), limit=limit)

    def best(self, *, confidence: float = 0.95, metric: str = "steady", **filters: Any) -> pd.DataFrame:
        """Per (model, board): the fastest correct configuration with its CI and speed-ups (`results best`)."""
        from tvmbench.answers.ranking import best

        return _frame(best(self.store, _filters(filters), confidence=confidence, metric=metric))

    def compare(self, a: str, b: str, *, threshold: float = 0.05, alpha: float = 0.05) -> pd.DataFrame:
        """Matched jobs of sweeps ``a`` (baseline) and ``b``: ratio B/A, its CI, the verdict (`results compare`).

        The summary line (geometric mean, counts) is in ``DataFrame.attrs["summary"]``.
        """
        from tvmbench.answers.compare import compare

        result = compare(self.store, a, b, threshold=threshold, alpha=alpha)
        df = _frame(result.rows)
        df.attrs["summary"] = result.summary()
        return df

    def releases(self, *, threshold: float = 0.05, alpha: float = 0.05, **filters: Any) -> pd.DataFrame:
        """Each configuration across the TVM releases it was built with, oldest first (`results releases`).

        The summary line is in ``DataFrame.attrs["summary"]``, the releases in order in ``attrs["releases"]``,
        and whether one is significantly slower than (or broke) the one before it in ``attrs["failed"]``.
        """
        from tvmbench.answers.releases import releases

        result = releases(self.store, _filters(filters), threshold=threshold, alpha=alpha)
        df = _frame(result.rows)
        df.attrs.update(summary=result.summary(), releases=list(result.releases), failed=result.failed)
        return df

    def history(self, job: str, *, method: str = "zscore", lookback: int = 20) -> pd.DataFrame:
        """One configuration (job key or unique prefix) over time, oldest first, each point judged against the
        ones before it; the configuration itself is in ``DataFrame.attrs``."""
        import pandas as pd

        from tvmbench.answers.regressions import Params, history

        data = history(self.store, job, method=method, params=Params(lookback=lookback))
        df = pd.DataFrame(data.pop("points"))
        df.attrs.update(data)
        return df


def open(db: str | None = None) -> Results:
    """The results database at ``db`` (a SQLAlchemy URL or a SQLite file's path; default: TVMBENCH_DB or
    SQLite in TVMBENCH_HOME)."""
    return Results(db)


def _filters(given: dict[str, Any]) -> Filters:
    """Keyword filters as `query.Filters`; an unknown name is a TypeError naming it and the valid ones."""
    from tvmbench.answers.query import Filters

    valid = set(Filters.__dataclass_fields__)
    unknown = sorted(set(given) - valid)
    if unknown:
        raise TypeError(f"unknown filter(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    values = dict(given)
    for key in ("since", "until"):
        if isinstance(values.get(key), str):
            values[key] = datetime.fromisoformat(values[key])
    return Filters(**values)
