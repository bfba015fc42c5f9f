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


def plan(path: str | Path, *, label: str | None = None, db: str | Path | None = None) -> pd.DataFrame:
    """The job matrix of a sweep file (what `sweep plan` prints): one row per job, with what is cached.

    ``db``: the results database whose builds and results count as done (default: TVMBENCH_DB or the
    SQLite file in TVMBENCH_HOME); it is only read.
    """
    import pandas as pd

    from db.store import ResultStore
    from orchestrator.plan import plan_rows
    from orchestrator.spec import load_spec

    spec = load_spec(path, label=label)
    # As `sweep plan`: where no database exists yet (a fresh machine) nothing is cached, and none is created.
    rows = plan_rows(spec, ResultStore(_db(db), read_only=True, missing="empty"))
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
    db: str | Path | None = None,
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
    # Checked before anything starts: a wrong type here used to fail deep in the run (an int tracker in the
    # address parser, a progress that is no function at the first event, once builds had started).
    if tracker is not None and not isinstance(tracker, str):
        raise TypeError(f"tracker must be a 'HOST:PORT' string, not {type(tracker).__name__} {tracker!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a function of (event, counts), not {type(progress).__name__}")
    spec = load_spec(path, label=label)
    db = _db(db)
    refuse_in_memory(db)  # a sweep run into memory would be lost with this process
    store = ResultStore(db)
    outcome = scheduler.execute_sweep(
        spec, store, ensure_home(), tracker=tracker, ray_address=ray_address, boards=boards, progress=progress
    )
    summary = {**outcome.summary(), "complete": outcome.complete}
    return SweepRun(spec.sweep_id, _frame(results(store, spec.sweep_id)), summary)


class Results:
    """A results database, read only: ``tvmbench.open(db)``."""

    def __init__(self, db: str | Path | None = None) -> None:
        from db.store import ResultStore

        self.store: ResultStore = ResultStore(_db(db), read_only=True)

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

        _check_range("confidence", confidence, 0, 1, open_low=True)
        return _frame(best(self.store, _filters(filters), confidence=confidence, metric=metric))

    def compare(self, a: str, b: str, *, threshold: float = 0.05, alpha: float = 0.05) -> pd.DataFrame:
        """Matched jobs of sweeps ``a`` (baseline) and ``b``: ratio B/A, its CI, the verdict (`results compare`).

        The summary line (geometric mean, counts) is in ``DataFrame.attrs["summary"]``.
        """
        from tvmbench.answers.compare import compare

        _check_range("threshold", threshold, 0)
        _check_range("alpha", alpha, 0, 1, open_low=True)
        # distinct: a sweep against itself is ratio 1 everywhere, refused as `results compare` refuses it.
        result = compare(self.store, a, b, threshold=threshold, alpha=alpha, distinct=True)
        df = _frame(result.rows)
        df.attrs["summary"] = result.summary()
        return df

    def releases(self, *, threshold: float = 0.05, alpha: float = 0.05, **filters: Any) -> pd.DataFrame:
        """Each configuration across the TVM releases it was built with, oldest first (`results releases`).

        The summary line is in ``DataFrame.attrs["summary"]``, the releases in order in ``attrs["releases"]``,
        and whether one is significantly slower than (or broke) the one before it in ``attrs["failed"]``.
        """
        from tvmbench.answers.releases import releases

        _check_range("threshold", threshold, 0)
        _check_range("alpha", alpha, 0, 1, open_low=True)
        result = releases(self.store, _filters(filters), threshold=threshold, alpha=alpha)
        df = _frame(result.rows)
        df.attrs.update(summary=result.summary(), releases=list(result.releases), failed=result.failed)
        return df

    def history(self, job: str, *, method: str = "zscore", lookback: int = 20) -> pd.DataFrame:
        """One configuration (job key or unique prefix) over time, oldest first, each point judged against the
        ones before it; the configuration itself is in ``DataFrame.attrs``."""
        import pandas as pd

        from tvmbench.answers.regressions import Params, history

        _check_range("lookback", lookback, Params.min_history)  # a shorter window judges no point
        data = history(self.store, job, method=method, params=Params(lookback=lookback))
        df = pd.DataFrame(data.pop("points"))
        df.attrs.update(data)
        return df


def open(db: str | Path | None = None) -> Results:
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
            try:
                values[key] = datetime.fromisoformat(values[key])
            except ValueError:
                raise ValueError(
                    f"{key} = {values[key]!r} is no date: give a datetime or an ISO string ('2026-01-31', "
                    "'2026-01-31T12:00')"
                ) from None
    return Filters(**values)


def _db(db: Any) -> str | None:
    """``db`` as the store takes it: a URL or a path, given as a string or a ``pathlib.Path``."""
    import os

    if db is None or isinstance(db, str):
        return db
    if isinstance(db, os.PathLike):
        return os.fspath(db)
    raise TypeError(f"db must be a database URL or a SQLite file's path (str or Path), not {type(db).__name__}")


def _check_range(name: str, value: Any, low: float, high: float | None = None, *, open_low: bool = False) -> None:
    """ValueError naming ``name`` unless low <(=) value <(=) high and finite (the CLI's ranges, as a library)."""
    import math

    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, not {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} {value:g}: must be a finite number")
    above = value > low if open_low else value >= low
    if not (above and (high is None or value < high)):
        bounds = f"{'above' if open_low else 'at least'} {low:g}" + (f" and below {high:g}" if high is not None else "")
        raise ValueError(f"{name} {value:g}: must be {bounds}")
