"""results query / best / regressions on synthetic rows written through the ORM."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.synthetic import T0, Result, add_sweep, noisy, row_by
from tvmbench.answers import query as q
from tvmbench.answers import ranking, regressions


@pytest.fixture
def filled(store):  # type: ignore[no-untyped-def]
    """Two sweeps: an old one and a newer one with ok, wrong-result, build-failed and emulated jobs."""
    add_sweep(store, "old0001", [Result(executor="vm-compiled", samples=noisy(9.0))], label="old", created_at=T0)
    add_sweep(
        store,
        "new0002",
        [
            Result(executor="vm-compiled", opt_level=2, samples=noisy(4.0, seed=1)),
            Result(executor="vm-compiled", opt_level=0, samples=noisy(8.0, seed=2)),
            Result(executor="vm-bytecode", opt_level=2, samples=noisy(6.0, seed=3)),
            Result(executor="onnxruntime", opt_level=0, samples=noisy(5.0, seed=4)),
            # wrong results are faster here, and must never win
            Result(executor="vm-bytecode", opt_level=0, status="wrong-result", samples=noisy(1.0, seed=5)),
            Result(executor="vm-bytecode", opt_level=3, status="build", error="boom"),
            # an emulated board: different clock, never ranked with real hardware
            Result(
                board_key="arm64-emu", target="arm64", executor="vm-compiled", emulated=True, samples=noisy(0.5, seed=6)
            ),
        ],
        label="new",
        created_at=T0 + timedelta(days=1),
    )
    return store


def test_query_filters_are_applied(filled) -> None:  # type: ignore[no-untyped-def]
    df = q.query(filled)
    assert list(df.columns) == list(q.COLUMNS)
    assert len(df) == 8
    assert df.iloc[0]["sweep_id"] == "new0002"  # newest sweep first
    assert set(q.query(filled, q.Filters(sweep="new"))["sweep_id"]) == {"new0002"}  # by label
    assert len(q.query(filled, q.Filters(sweep="old0"))) == 1  # by id prefix
    assert set(q.query(filled, q.Filters(executor="vm-bytecode"))["opt_level"]) == {0, 2, 3}
    assert len(q.query(filled, q.Filters(status="ok", opt_level=2))) == 4
    assert len(q.query(filled, q.Filters(board="arm64-emu"))) == 1
    assert len(q.query(filled, q.Filters(board="host@127.0.0.1"))) == 6  # board id prefix (build failure has no run)
    assert len(q.query(filled, q.Filters(until=T0 + timedelta(hours=1)))) == 1
    assert len(q.query(filled, q.Filters(since=T0 + timedelta(hours=1)))) == 7
    # a quote in a value is data, not SQL
    assert q.query(filled, q.Filters(model="x' OR '1'='1")).empty


def test_query_unknown_sweep_is_a_named_error(filled) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(q.QueryError, match="no sweep 'nope'"):
        q.query(filled, q.Filters(sweep="nope"))


def test_group_and_pivot(filled) -> None:  # type: ignore[no-untyped-def]
    df = q.query(filled, q.Filters(sweep="new", board="host"))
    g = q.group(df, ["executor"])
    vb = g[g["executor"] == "vm-bytecode"].iloc[0]
    assert (vb["jobs"], vb["ok"]) == (3, 1)
    assert vb["fastest"] == pytest.approx(6.0, rel=0.05)  # the wrong-result 1 ms is not counted
    p = q.pivot(df, ["model"], "opt_level")
    assert list(p.columns) == ["model", "opt_level=0", "opt_level=2"]
    with pytest.raises(q.QueryError, match="cannot group by nonsense"):
        q.group(df, ["nonsense"])


def test_group_and_pivot_take_what_a_user_may_type(filled) -> None:  # type: ignore[no-untyped-def]
    df = q.query(filled, q.Filters(sweep="new", board="host"))
    # A column named twice is grouped by once (pandas raised "cannot insert executor, already exists").
    assert q.group(df, ["executor", "executor"]).equals(q.group(df, ["executor"]))
    with pytest.raises(q.QueryError, match="--pivot executor is also in --group-by"):
        q.pivot(df, ["executor"], "executor")
    # A key no job has (no layout axis here) is "-", as grouping shows it; pandas would drop every row.
    p = q.pivot(df, ["executor"], "layout")
    assert list(p.columns) == ["executor", "layout=-"] and len(p) == 3, p
    assert p.set_index("executor").loc["vm-bytecode", "layout=-"] == pytest.approx(6.0, rel=0.05)


def test_best_names_winner_speedups_and_keeps_emulated_apart(filled) -> None:  # type: ignore[no-untyped-def]
    rows = ranking.best(filled)
    host = row_by(rows, board_key="host")
    assert host["sweep_id"] == "new0002"  # the newest sweep with results for (model, board)
    assert host["best"].startswith("vm-compiled O2")
    assert not host["uncertain"] and host["verdict"].endswith("is fastest")
    assert host["best_lo"] < host["best_median"] < host["best_hi"]
    assert host["speedup_vs_slowest"] == pytest.approx(2.0, rel=0.06)
    assert host["speedup_vs_onnxruntime"] == pytest.approx(1.25, rel=0.06)
    assert host["candidates"] == 3  # ok, non-baseline jobs only
    emu = row_by(rows, board_key="arm64-emu")
    assert emu["emulated"] and emu["candidates"] == 1


def test_best_says_uncertain_when_top_two_overlap(store) -> None:  # type: ignore[no-untyped-def]
    add_sweep(
        store,
        "tie0001",
        [
            Result(executor="vm-compiled", samples=noisy(4.0, rel=0.05, seed=1)),
            Result(executor="vm-bytecode", samples=noisy(4.02, rel=0.05, seed=2)),
        ],
    )
    (row,) = ranking.best(store)
    assert row["uncertain"]
    assert row["verdict"].startswith("uncertain:") and "overlap" in row["verdict"]


def test_best_never_ranks_other_units_with_ms(store) -> None:  # type: ignore[no-untyped-def]
    add_sweep(
        store,
        "units01",
        [
            Result(executor="vm-compiled", samples=noisy(4.0)),
            Result(executor="vm-bytecode", unit="instructions", samples=noisy(100.0)),
        ],
    )
    rows = ranking.best(store)
    assert {(r["unit"], r["candidates"]) for r in rows} == {("ms", 1), ("instructions", 1)}


def _history(store, centers: list[float]) -> None:  # type: ignore[no-untyped-def]
    for i, c in enumerate(centers):
        add_sweep(
            store,
            f"hist{i:03d}",
            [Result(samples=noisy(c, seed=i)), Result(executor="vm-bytecode", samples=noisy(7.0, seed=100 + i))],
            created_at=T0 + timedelta(days=i),
            tvm_version="0.28.0" if i == len(centers) - 1 else "0.27.0",
        )


@pytest.mark.parametrize("method", ["zscore", "mad"])
def test_regressions_find_the_slowed_config_only(store, method: str) -> None:  # type: ignore[no-untyped-def]
    _history(store, [4.0, 4.1, 3.9, 4.05, 3.95, 4.0, 8.0])
    found = regressions.find(store, method=method)
    assert [(r["executor"], r["sweep_id"]) for r in found] == [("vm-compiled", "hist006")]
    assert found[0]["ratio"] == pytest.approx(2.0, rel=0.05)
    assert (found[0]["tvm_version"], found[0]["baseline_tvm_version"]) == ("0.28.0", "0.27.0")
    everything = regressions.find(store, method=method, include_all=True)
    assert len(everything) == 2
    # judged as of an earlier sweep, nothing had regressed yet
    assert regressions.find(store, q.Filters(sweep="hist005"), method=method) == []


def test_regressions_need_history_and_a_known_method(store) -> None:  # type: ignore[no-untyped-def]
    _history(store, [4.0, 9.0])
    rows = regressions.find(store, include_all=True)
    assert all(not r["regressed"] and "needed" in r["note"] for r in rows)
    with pytest.raises(q.QueryError, match="unknown regression method 'psychic'"):
        regressions.find(store, method="psychic")
