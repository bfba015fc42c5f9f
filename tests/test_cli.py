"""The CLI through typer's runner: exit codes, one-line errors, JSON output, and the farm commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.farm import LocalFarm
from tests.conftest import write_sweep
from tvmbench.cli import app
from workers.tracker_client import registered_keys, tracker_summary

runner = CliRunner()

SWEEP = """
name = "cli"
[[models]]
path = "{models}/tiny_mlp.onnx"
[axes]
executor = ["vm-bytecode"]
opt_level = [0, 2]
[measure]
number = 2
repeat = 3
"""


def invoke(*args: str) -> object:
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_invalid_sweep_exits_2_with_one_line_and_writes_nothing(home: Path, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "[[models]]\npath = 'missing.onnx'\n")
    result = invoke("sweep", "run", str(path))
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "missing.onnx does not exist" in lines[0], result.output
    assert json.loads(invoke("results", "sweeps", "--json").output) == []


def test_plan_lists_jobs_without_running_anything(home: Path, tmp_path: Path, models_dir: Path) -> None:
    path = write_sweep(tmp_path, SWEEP.format(models=models_dir))
    result = invoke("sweep", "plan", str(path), "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert len(plan["jobs"]) == 2
    assert {j["status"] for j in plan["jobs"]} == {"new"} and not any(j["built"] for j in plan["jobs"])
    assert json.loads(invoke("results", "list", "--json").output) == []


def test_run_list_show_and_rerun(
    home: Path, tmp_path: Path, models_dir: Path, ray_local: None, local_farm: LocalFarm
) -> None:
    path = write_sweep(tmp_path, SWEEP.format(models=models_dir))
    result = invoke("sweep", "run", str(path), "--tracker", local_farm.tracker, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    assert data["outcome"]["statuses"] == {"ok": 2}
    sweep_id = data["sweep_id"]

    rows = json.loads(invoke("results", "list", "--sweep", sweep_id, "--json").output)
    assert len(rows) == 2
    required = {
        "job_key",
        "model",
        "target",
        "board",
        "executor",
        "opt_level",
        "status",
        "median_ms",
        "max_abs_err",
        "fingerprint",
        "compile_s",
    }
    assert all(required <= set(r) and r["status"] == "ok" and r["median_ms"] > 0 for r in rows)

    shown = invoke("results", "show", rows[0]["job_key"][:10])
    assert shown.exit_code == 0 and "pass trace (" in shown.output and "run 1 on host@127.0.0.1" in shown.output
    detail = json.loads(invoke("results", "show", rows[0]["job_key"], "--json").output)
    assert detail["build"]["pass_trace"] and len(detail["runs"][0]["samples"]) == 3

    again = invoke("sweep", "run", str(path), "--tracker", local_farm.tracker)
    assert again.exit_code == 0, again.output
    assert "compiled nothing" in again.output and "2 job(s) already had results" in again.output

    plan = json.loads(invoke("sweep", "plan", str(path), "--json").output)
    assert all(j["built"] and j["status"] == "ok" for j in plan["jobs"])
    sweeps = json.loads(invoke("results", "sweeps", "--json").output)
    assert [s["sweep_id"] for s in sweeps] == [sweep_id] and sweeps[0]["status"] == "complete"


def test_show_unknown_job(home: Path) -> None:
    result = invoke("results", "show", "deadbeef")
    assert result.exit_code == 2 and "no job with key starting 'deadbeef'" in result.output  # not found: 2


def test_farm_up_list_down(home: Path) -> None:
    up = invoke("farm", "up", "--boards", "2")
    assert up.exit_code == 0, up.output
    state = json.loads((home / "farm.json").read_text())
    try:
        assert state["tracker"].startswith("127.0.0.1:") and len(state["boards"]) == 2
        listed = json.loads(invoke("farm", "list", "--json").output)
        assert listed["tracker"] == state["tracker"]
        assert sorted(b["key"] for b in listed["boards"]) == ["host", "host"]
        assert invoke("farm", "up").exit_code == 1  # one farm at a time
    finally:
        down = invoke("farm", "down")
    assert down.exit_code == 0 and "stopped" in down.output
    assert not (home / "farm.json").exists()
    for pid in [state["tracker_pid"], *(b["pid"] for b in state["boards"])]:
        with pytest.raises(ProcessLookupError):
            __import__("os").kill(pid, 0)


def test_farm_connect_checks_the_tracker(home: Path, local_farm: LocalFarm) -> None:
    from orchestrator.farm import free_port

    bad = invoke("farm", "connect", f"127.0.0.1:{free_port()}")
    assert bad.exit_code == 1 and "no TVM RPC tracker answers" in bad.output
    good = invoke("farm", "connect", local_farm.tracker)
    assert good.exit_code == 0 and "host (1 free)" in good.output
    listed = json.loads(invoke("farm", "list", "--json").output)
    assert listed["tracker"] == local_farm.tracker and listed["boards"][0]["key"] == "host"
    assert invoke("farm", "down").exit_code == 0
    # Forgetting a connected farm does not stop it.
    assert registered_keys(tracker_summary(local_farm.tracker)) == {"host": 1}


def test_targets_list(home: Path) -> None:
    rows = json.loads(invoke("targets", "list", "--json").output)
    assert {"host", "rpi4", "arm64-emu"} <= {r["preset"] for r in rows}
