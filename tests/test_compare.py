"""`results compare`, the analysis CLI commands, and one real sweep run twice through Ray and the farm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from db import models as m
from db.store import ResultStore
from orchestrator.farm import LocalFarm
from tests.conftest import write_sweep
from tests.synthetic import Result, add_sweep, noisy, row_by
from tvmbench.answers import query as reads
from tvmbench.answers.compare import compare

runner = CliRunner()


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(__import__("tvmbench.cli", fromlist=["app"]).app, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _pair(store, slow_factor: float = 1.0, status_b: str = "ok") -> None:  # type: ignore[no-untyped-def]
    configs = [("vm-compiled", 2, 4.0), ("vm-compiled", 0, 6.0), ("vm-bytecode", 2, 5.0), ("vm-bytecode", 0, 9.0)]
    add_sweep(store, "aaaa0001", [Result(executor=e, opt_level=o, samples=noisy(c, seed=i)) for i, (e, o, c) in
                                  enumerate(configs)], label="a")  # fmt: skip
    b = [Result(executor=e, opt_level=o, samples=noisy(c, seed=10 + i)) for i, (e, o, c) in enumerate(configs)]
    b[0] = Result(executor="vm-compiled", opt_level=2, samples=noisy(4.0 * slow_factor, seed=20))
    b[3] = Result(executor="vm-bytecode", opt_level=0, status=status_b, samples=noisy(9.0, seed=21))
    b.append(Result(executor="vm-bytecode", opt_level=3, samples=noisy(3.0)))  # only in B
    from datetime import timedelta

    from tests.synthetic import T0

    add_sweep(store, "bbbb0002", b, label="b", created_at=T0 + timedelta(days=1))


def test_compare_same_sweep_twice_finds_nothing(store) -> None:  # type: ignore[no-untyped-def]
    _pair(store)
    result = compare(store, "a", "b")
    assert len(result.rows) == 4 and result.only_b == 1 and result.only_a == 0
    assert {r["verdict"] for r in result.rows} == {"same"}
    assert 0.95 < result.geomean_ratio < 1.05
    assert "0 regression(s)" in result.summary()


def test_compare_flags_slowdown_speedup_and_breakage(store) -> None:  # type: ignore[no-untyped-def]
    _pair(store, slow_factor=3.0, status_b="wrong-result")
    result = compare(store, "aaaa", "bbbb")
    slow = row_by(result.rows, executor="vm-compiled", opt_level=2)
    assert slow["verdict"] == "regression"
    assert slow["ratio"] == pytest.approx(3.0, rel=0.05) and slow["ratio_lo"] > 2.5 and slow["p_value"] < 0.01
    assert row_by(result.rows, executor="vm-bytecode", opt_level=0)["verdict"] == "broken"
    assert row_by(result.rows, executor="vm-compiled", opt_level=0)["verdict"] == "same"
    assert result.count("regression") == 1
    backwards = compare(store, "b", "a")  # the same data the other way round is an improvement
    assert row_by(backwards.rows, executor="vm-compiled", opt_level=2)["verdict"] == "improvement"
    assert row_by(backwards.rows, executor="vm-bytecode", opt_level=0)["verdict"] == "fixed"


def test_compare_threshold_hides_small_real_changes(store) -> None:  # type: ignore[no-untyped-def]
    _pair(store, slow_factor=1.2)
    assert compare(store, "a", "b", threshold=0.05).count("regression") == 1
    assert compare(store, "a", "b", threshold=0.5).count("regression") == 0


def test_cli_analysis_commands(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _pair(store, slow_factor=3.0)
    db = ["--db", store.url]
    code, out = _cli("results", "compare", "a", "b", *db)
    assert code == 1 and "regression" in out and "geometric mean ratio" in out
    code, out = _cli("results", "compare", "a", "b", "--json", *db)
    data = json.loads(out)
    assert code == 1 and data["only_b"] == 1 and sum(r["verdict"] == "regression" for r in data["rows"]) == 1
    code, out = _cli("results", "compare", "a", "nope", *db)
    assert code == 2 and "no sweep 'nope'" in out

    code, out = _cli("results", "query", "--sweep", "b", "--executor", "vm-bytecode", "--csv", *db)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("sweep_id,sweep_label,sweep_created_at,job_key") and len(lines) == 4
    code, out = _cli("results", "query", "--group-by", "sweep_label", "--pivot", "executor", "--json", *db)
    pivot = {r["sweep_label"]: r for r in json.loads(out)}
    assert code == 0 and set(pivot) == {"a", "b"} and pivot["a"]["executor=vm-compiled"] == pytest.approx(5, rel=0.1)
    code, out = _cli("results", "query", "--since", "yesterday", *db)
    assert code != 0 and "--since 'yesterday'" in out
    code, out = _cli("results", "query", "--group-by", "colour", *db)
    assert code == 2 and "cannot group by colour" in out

    code, out = _cli("results", "best", "--json", *db)
    (best,) = json.loads(out)
    assert code == 0 and best["sweep_id"] == "bbbb0002" and best["best"].startswith("vm-bytecode O3")
    code, out = _cli("results", "best", "--sweep", "a", *db)
    assert code == 0 and "vm-compiled O2 per-target (host) is fastest" in out

    code, out = _cli("results", "regressions", "--all", "--json", *db)
    assert code == 0 and all(r["note"].endswith("needed") for r in json.loads(out))  # one earlier result only


def test_show_diff_of_pass_traces_and_missing_profile(store) -> None:  # type: ignore[no-untyped-def]
    a = Result(executor="vm-compiled", opt_level=0, samples=noisy(4.0), pass_trace=["Normalize", "LegalizeOps"])
    b = Result(executor="vm-compiled", opt_level=2, samples=noisy(3.0),
               pass_trace=["Normalize", "FuseOps", "LegalizeOps"])  # fmt: skip
    add_sweep(store, "diff0001", [a, b])
    code, out = _cli("results", "show", a.job_key[:10], "--diff", b.job_key[:10], "--db", store.url)
    assert code == 0
    assert "+FuseOps" in out and "-Normalize" not in out
    assert "kernel profile: not recorded" in out
    code, out = _cli("results", "show", a.job_key[:10], "--diff", "ffffffffff", "--db", store.url)
    assert code == 2 and "no job with key starting 'ffffffffff' to diff against" in out  # not found


def test_kernel_profile_shapes_are_normalised() -> None:
    from tvmbench.answers.why import normalise_profile

    assert normalise_profile({"fused_conv": 2.0, "add": 0.5}) == [("fused_conv", 2.0), ("add", 0.5)]
    listed = [
        {"name": "mm", "duration_us": 1500.0},
        {"name": "add", "duration_us": 100.0},
        {"name": "mm", "time_ms": 1},
    ]
    assert normalise_profile({"kernels": listed}) == [("mm", 2.5), ("add", 0.1)]
    assert normalise_profile("garbage") == []
    # The board agent's own shape (workers/board_agent.profile_module): total_ms per run over all calls.
    agent = {"available": True, "run_ms": 3.0, "kernels": [
        {"name": "fused_conv2d_add_relu", "kind": "kernel", "calls_per_run": 2, "total_ms": 2.0},
        {"name": "vm.builtin.alloc_storage", "kind": "builtin", "calls_per_run": 3, "total_ms": 0.25},
    ]}  # fmt: skip
    assert normalise_profile(agent) == [("fused_conv2d_add_relu", 2.0), ("vm.builtin.alloc_storage", 0.25)]


def test_show_puts_each_tuned_kernel_beside_its_time_alone() -> None:
    """A tuned build's profile: each tuned kernel in the program against calls x its best time alone."""
    import io

    from rich.console import Console

    from tvmbench.answers.analysis_views import print_kernels
    from tvmbench.answers.why import kernels_alone

    tasks = [
        {"name": "fused_conv2d_add_relu", "weight": 2, "trials": 48, "best_us": 400.0},
        {"name": "softmax", "weight": 1, "trials": 0, "best_us": None},  # never timed: nothing to set beside
    ]
    alone = kernels_alone({"build": {"tuning": {"tasks": tasks}}})
    assert alone == {"fused_conv2d_add_relu": pytest.approx(0.8)}
    assert kernels_alone({"build": {"tuning": None}}) == {} and kernels_alone({}) == {}
    out = io.StringIO()
    kernels = [("fused_conv2d_add_relu", 2.0), ("vm.builtin.alloc_storage", 0.25), ("softmax", 0.1)]
    print_kernels(Console(file=out, width=200), kernels, 10, alone)
    text = out.getvalue()
    assert "fused_conv2d_add_relu  (tuned alone 0.8000 ms, 2.50x in the program)" in text
    assert "alloc_storage\n" in text and "softmax\n" in text  # untuned: no time alone to compare
    assert "1 tuned kernel: 2.000 ms in the program" in text and "0.800 ms as the search timed" in text
    out = io.StringIO()
    print_kernels(Console(file=out, width=200), kernels, 10)  # an untuned build: the plain list
    assert "tuned alone" not in out.getvalue() and "search" not in out.getvalue()


# --- integration: a real sweep, twice -------------------------------------------------------------

SWEEP = """
name = "compare-e2e"
[[models]]
path = "{models}/tiny_cnn.onnx"
[axes]
executor = ["vm-bytecode", "vm-compiled"]
opt_level = [0, 2]
[measure]
number = 20
repeat = 10
"""


def copy_sweep(store: ResultStore, source_id: str, new_id: str, label: str, inflate: dict[str, float]) -> None:
    """A copy of a stored sweep under a new id and label, with the samples of some jobs multiplied."""
    with store._sessions.begin() as s:
        src = s.get(m.Sweep, source_id)
        s.add(
            m.Sweep(**{c.key: getattr(src, c.key) for c in m.Sweep.__table__.columns} | {"id": new_id, "label": label})
        )
        s.flush()
        for job in s.scalars(select(m.Job).where(m.Job.sweep_id == source_id)):
            skip = {"id", "sweep_id", "final_run_id"}
            copy = m.Job(**{c.key: getattr(job, c.key) for c in m.Job.__table__.columns if c.key not in skip})
            copy.sweep_id = new_id
            s.add(copy)
            s.flush()
            run = s.get(m.Run, job.final_run_id)
            factor = inflate.get(job.job_key, 1.0)
            fields = {c.key: getattr(run, c.key) for c in m.Run.__table__.columns if c.key not in ("id", "job_id")}
            fields |= {"samples": [factor * x for x in run.samples], "median": factor * run.median}
            new_run = m.Run(job_id=copy.id, **fields)
            s.add(new_run)
            s.flush()
            copy.final_run_id = new_run.id


@pytest.mark.slow
def test_real_sweep_twice_compares_clean_and_flags_a_slowed_config(
    tmp_path: Path, models_dir: Path, ray_local: None, local_farm: LocalFarm
) -> None:
    from orchestrator.scheduler import run_sweep
    from orchestrator.spec import load_spec
    from workers.artifacts import ArtifactCache

    path = write_sweep(tmp_path, SWEEP.format(models=models_dir))
    store = ResultStore(f"sqlite:///{tmp_path / 'r.db'}")
    cache = ArtifactCache(tmp_path / "artifacts")
    try:
        for label in ("a", "b"):
            outcome = run_sweep(load_spec(path, label=label), store, local_farm.tracker, cache)
            assert dict(outcome.statuses) == {"ok": 4}, reads.results(store)
        db = ["--db", store.url]
        # Same spec, same board, one after the other. Whether the two sweeps' medians differ is up to the
        # machine (a busy CI host shifts whole sweeps by 1.1-1.9x), so no verdict is expected here: each row's
        # verdict must follow from its own ratio, CI and p-value (the rule, recomputed), from real samples.
        result = compare(store, "a", "b")
        for r in result.rows:  # shown on failure
            print(r["executor"], r["opt_level"], r["median_a"], r["median_b"], r["ratio"], r["ratio_lo"], r["p_value"])
        assert len(result.rows) == 4, result.rows
        for r in result.rows:
            assert r["p_value"] == r["p_value"] and r["ratio_lo"] <= r["ratio"] <= r["ratio_hi"], r
            significant = r["p_value"] < 0.05
            expected = (
                "regression"
                if significant and r["ratio"] > 1.05 and r["ratio_lo"] > 1
                else "improvement"
                if significant and r["ratio"] < 1 / 1.05 and r["ratio_hi"] < 1
                else "same"
            )
            assert r["verdict"] == expected, r

        code, out = _cli("results", "best", "--sweep", "b", "--json", *db)
        (best,) = json.loads(out)
        assert code == 0 and best["model"] == "tiny_cnn" and best["board_key"] == "host" and best["candidates"] >= 1
        assert best["verdict"].endswith(("is fastest", "(the only configuration measured)")) or best["uncertain"]

        # Sweep "slow": the real results of B with one configuration three times slower. Exactly that one is
        # flagged, at the default threshold, and the CLI exits 1.
        victim = row_by(result.rows, executor="vm-compiled", opt_level=2)["job_key"]
        copy_sweep(store, result.sweep_b, "slowed0000000000", "slow", {victim: 3.0})
        flagged = compare(store, "b", "slow")
        assert [r["job_key"] for r in flagged.rows if r["verdict"] != "same"] == [victim]
        assert row_by(flagged.rows, job_key=victim)["verdict"] == "regression"
        code, out = _cli("results", "compare", "b", "slow", *db)
        assert code == 1 and "1 regression(s)" in out
    finally:
        store.close()
