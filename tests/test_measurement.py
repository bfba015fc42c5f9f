"""Numbers you can defend, on real boards on loopback: adaptive sampling, phases, memory, board state.

A real tracker, a real board agent and a stock `tvm.exec.rpc_server`, real TVM builds and Ray; the
figures asserted are read back from the results database the sweep wrote.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from orchestrator.farm import LocalFarm
from orchestrator.scheduler import run_sweep
from orchestrator.spec import load_spec
from tests.conftest import write_sweep
from tvmbench.answers import query as reads
from workers import model_zoo
from workers.artifacts import ArtifactCache
from workers.sampling import STOP_CI, STOP_MAX_REPEAT, STOP_MAX_S

pytestmark = pytest.mark.slow

# The board's peak for the model with large intermediates, less the session's resident set before the
# load, is within this factor of the static estimate (params + planned storage + the largest kernel's
# scratch): the loaded library and the VM's own allocations (~3 MB here) come on top.
STATIC_FACTOR = 1.5
OUTER_N = 2048  # outer_product: one 2048 x 2048 float32 intermediate, 16 MB


def _sweep(tmp: Path, models: list[Path], measure: str, targets: str = '[[targets]]\npreset = "host"\n') -> Path:
    text = 'name = "measure"\n'
    text += "".join(f'[[models]]\npath = "{m}"\n' for m in models)
    text += targets + "[measure]\n" + measure
    return write_sweep(tmp, text, name=f"sweep-{abs(hash(measure)) % 10**8}.toml")


def _runs(store, spec) -> dict[tuple[str, str], dict]:
    out = {}
    for row in reads.results(store, spec.sweep_id):
        detail = reads.job_detail(store, row["job_key"], spec.sweep_id)
        out[(row["model"], row["target"])] = {**detail["runs"][-1], "row": row, "build": detail["build"]}
    return out


@pytest.fixture(scope="module")
def outer_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("outer") / "outer_product.onnx"
    onnx.save(model_zoo.outer_product(OUTER_N), path)
    return path


def test_adaptive_sampling_reaches_the_ci_and_memory_follows_the_intermediate(
    home: Path, models_dir: Path, outer_model: Path, ray_local: None, local_farm: LocalFarm, store, tmp_path: Path
) -> None:
    measure = "number = 5\nwarmup = 3\ntarget_rel_ci = 0.05\nmin_repeat = 5\nmax_s = 20\n"
    spec = load_spec(_sweep(tmp_path, [models_dir / "tiny_mlp.onnx", outer_model], measure))
    outcome = run_sweep(spec, store, local_farm.tracker, ArtifactCache(home / "artifacts"))
    assert dict(outcome.statuses) == {"ok": 2}, reads.results(store, spec.sweep_id)
    runs = _runs(store, spec)
    tiny, outer = runs[("tiny_mlp", "host")], runs[("outer_product", "host")]

    # Sampling: a stable tiny model stops as soon as the median's CI is within 5 %.
    assert tiny["stop_reason"] == STOP_CI, tiny["sampling"]
    assert tiny["ci_rel"] <= 0.05 and tiny["sampling"]["rel_ci"] == tiny["ci_rel"]
    assert len(tiny["samples"]) == tiny["sampling"]["samples"] >= 5
    assert tiny["warmup_runs"] == 3 and len(tiny["sampling"]["warmup_ms"]) == 3
    assert tiny["sampling"]["timer_calls"] < len(tiny["samples"])  # batches, not one RPC call per sample

    # Phases, stored apart: upload (the artifact's bytes), load, first inference timed on the board.
    for run in (tiny, outer):
        assert run["upload_bytes"] == run["build"]["artifact_size"] and run["upload_s"] > 0
        assert run["load_s"] > 0 and run["first_ms"] > 0
        assert run["phases"]["first_inference"]["source"] == "board"

    # Memory: the 16 MB intermediate shows on the board, and the static plan saw it coming.
    for run in (tiny, outer):
        assert run["memory"]["available"] is True
        for when in ("before_load", "after_load", "after_runs"):
            assert run["memory"][when]["vmhwm_kb"] >= run["memory"][when]["vmrss_kb"] > 0
    assert outer["peak_mem_mb"] > tiny["peak_mem_mb"] + 8, (outer["memory"], tiny["memory"])
    assert outer["memory"]["model_mb"] > tiny["memory"]["model_mb"] + 8
    plan = outer["build"]["memory"]
    assert plan["kind"] == "relax-static-plan" and plan["planned_bytes"] >= OUTER_N * OUTER_N * 4
    # The fused matmul+relu keeps the matmul result as its own 16 MB buffer: counted as kernel scratch.
    assert plan["kernel_scratch_bytes"] == OUTER_N * OUTER_N * 4
    assert outer["build"]["ram_bytes"] == plan["params_bytes"] + plan["planned_bytes"] + plan["kernel_scratch_bytes"]
    static_mb = outer["build"]["ram_bytes"] / 2**20
    ratio = outer["memory"]["model_mb"] / static_mb
    assert 1 / STATIC_FACTOR <= ratio <= STATIC_FACTOR, (outer["memory"]["model_mb"], static_mb)
    assert tiny["build"]["params_bytes"] == 16 * 32 * 4 + 32 * 4 + 32 * 10 * 4 + 10 * 4  # tiny_mlp's weights

    # Board state before and after the samples: the fields are there; this VM has no cpufreq, which is
    # "unavailable" with a reason, and no false warning.
    for run in (tiny, outer):
        for when in ("before", "after"):
            state = run["board_state"][when]
            assert set(state) >= {"cpufreq", "thermal", "load_avg", "time"}
            assert len(state["load_avg"]) == 3
            if not state["cpufreq"]["available"]:
                assert state["cpufreq"]["reason"] and "cores" not in state["cpufreq"]
            else:
                assert all("governor" in c and "cur_khz" in c for c in state["cpufreq"]["cores"])
        if not run["board_state"]["before"]["cpufreq"]["available"]:
            assert not any("governor" in w or "clock" in w for w in run["warnings"])

    # The answers show the new figures: list/best carry peak MB, query filters by it.
    from tvmbench.answers import ranking

    rows = {r["model"]: r for r in reads.results(store, spec.sweep_id)}
    assert rows["outer_product"]["peak_mem_mb"] == pytest.approx(outer["peak_mem_mb"])
    fits = reads.query(store, reads.Filters(sweep=spec.sweep_id, max_memory_mb=(tiny["peak_mem_mb"] + 4)))
    assert list(fits["model"]) == ["tiny_mlp"]
    first = ranking.best(store, reads.Filters(sweep=spec.sweep_id), metric="first")
    assert {r["model"]: r["best_value"] for r in first} == {
        "tiny_mlp": pytest.approx(tiny["first_ms"]),
        "outer_product": pytest.approx(outer["first_ms"]),
    }


def test_unreachable_target_stops_by_max_s(
    home: Path, models_dir: Path, ray_local: None, local_farm: LocalFarm, store, tmp_path: Path
) -> None:
    # tiny_cnn at number = 20 takes milliseconds a sample: the cap, not max_repeat, ends the run.
    measure = "number = 20\ntarget_rel_ci = 0.0001\nmax_repeat = 100000\nmax_s = 1.5\n"
    spec = load_spec(_sweep(tmp_path, [models_dir / "tiny_cnn.onnx"], measure))
    outcome = run_sweep(spec, store, local_farm.tracker, ArtifactCache(home / "artifacts"))
    assert dict(outcome.statuses) == {"ok": 1}
    run = _runs(store, spec)[("tiny_cnn", "host")]
    assert run["stop_reason"] == STOP_MAX_S, run["sampling"]
    assert run["ci_rel"] > 0.0001
    # It sampled up to its cap (how near the cap it stops, batches cut to the time left, is a rule of the
    # sampler tested with a fake clock in test_sampling.py: on a busy machine a real batch may run long).
    assert run["sampling"]["elapsed_s"] >= 1.0, run["sampling"]
    assert len(run["samples"]) > 5


def test_fixed_repeat_with_warmup_on_agent_and_stock_boards(
    home: Path, models_dir: Path, ray_local: None, local_farm: LocalFarm, stock_board: str, store, tmp_path: Path
) -> None:
    targets = '[[targets]]\npreset = "host"\n[[targets]]\npreset = "host"\nname = "host-stock"\nboard_key = "stock"\n'
    spec = load_spec(_sweep(tmp_path, [models_dir / "tiny_cnn.onnx"], "number = 2\nrepeat = 4\nwarmup = 5\n", targets))
    outcome = run_sweep(spec, store, local_farm.tracker, ArtifactCache(home / "artifacts"))
    assert dict(outcome.statuses) == {"ok": 2}, reads.results(store, spec.sweep_id)
    runs = _runs(store, spec)
    for target in ("host", "host-stock"):
        run = runs[("tiny_cnn", target)]
        # The fixed count still rules: 4 samples, the 5 warmup runs kept apart, one stop reason.
        assert len(run["samples"]) == 4 and run["warmup_runs"] == 5, run["sampling"]
        assert len(run["sampling"]["warmup_ms"]) == 5 and run["stop_reason"] == STOP_MAX_REPEAT
        assert run["first_ms"] > 0 and run["load_s"] > 0 and run["upload_bytes"] > 0

    agent, stock = runs[("tiny_cnn", "host")], runs[("tiny_cnn", "host-stock")]
    assert agent["memory"]["available"] is True and agent["peak_mem_mb"] > 0
    # A stock server measures, and what it cannot report is unavailable with the reason, never zero.
    assert stock["peak_mem_mb"] is None
    assert stock["memory"] == {
        "available": False,
        "reason": "the board runs a stock TVM RPC server; session memory needs workers/board_agent.py on the board",
    }
    for when in ("before", "after"):
        assert stock["board_state"][when]["available"] is False
        assert "stock TVM RPC server" in stock["board_state"][when]["reason"]
    assert stock["warnings"] == []
    assert stock["phases"]["first_inference"]["source"] == "client"
    assert stock["row"]["peak_mem_mb"] is None
