"""Submitting sweeps: what travels with a job, what is refused up front, progress from the database.

The path through a real Ray cluster is in tests/test_multinode.py; these need no cluster.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from orchestrator.spec import load_spec
from orchestrator.submit import SubmitError, entrypoint, stage_sweep
from tests.conftest import write_sweep
from tests.test_store_backends import begin, make_jobs, ok_run
from tvmbench.cli import app
from workers import model_zoo

runner = CliRunner()

SWEEP = """
name = "travel"
[[models]]
path = "../models/mlp.onnx"
[[models]]
path = "local/cnn.onnx"
[[models]]
onnx = "light_squeezenet"
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "sweeps" / "local").mkdir(parents=True)
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "models" / "mlp.onnx")
    onnx.save(model_zoo.tiny_cnn(), tmp_path / "sweeps" / "local" / "cnn.onnx")
    return write_sweep(tmp_path / "sweeps", SWEEP)


def test_stage_sweep_keeps_relative_model_paths(tmp_path: Path) -> None:
    sweep = _project(tmp_path)
    staged = tmp_path / "staged"
    staged.mkdir()
    inner = stage_sweep(sweep, staged)
    assert inner == "sweeps/sweep.toml"
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == [
        "models/mlp.onnx",
        "sweeps/local/cnn.onnx",
        "sweeps/sweep.toml",
    ]
    # The staged copy is the same sweep: same models, same id, wherever it is unpacked.
    assert load_spec(staged / inner).sweep_id == load_spec(sweep).sweep_id


def test_stage_sweep_refuses_absolute_model_paths(tmp_path: Path) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "mlp.onnx")
    sweep = write_sweep(tmp_path, f'[[models]]\npath = "{tmp_path / "mlp.onnx"}"\n')
    with pytest.raises(SubmitError, match=r"models\[0\]\.path .* is absolute"):
        stage_sweep(sweep, tmp_path / "staged")


def test_entrypoint_runs_sweep_run_on_the_cluster() -> None:
    cmd = shlex.split(entrypoint("a b/sweep.toml", tracker="lab:9190", label="x", farm_resource="lab", boards=1))
    assert cmd[:4] == ["tvmbench", "sweep", "run", "a b/sweep.toml"]
    assert cmd[cmd.index("--ray-address") + 1] == "auto"
    assert cmd[cmd.index("--tracker") + 1] == "lab:9190"
    assert cmd[cmd.index("--farm-resource") + 1] == "lab"
    assert "--db" not in cmd, "the database URL travels in the job's environment, not its command line"


def test_submit_refuses_a_database_only_this_machine_has(tmp_path: Path, home: Path) -> None:
    sweep = _project(tmp_path)
    result = runner.invoke(app, ["sweep", "submit", str(sweep), "--ray-address", "http://127.0.0.1:1"])
    assert result.exit_code == 1, result.output
    assert "needs a database the cluster and you both reach" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.postgres
def test_submit_unreachable_cluster_is_one_line(tmp_path: Path, home: Path, pg_url: str) -> None:
    sweep = _project(tmp_path)
    args = ["sweep", "submit", str(sweep), "--ray-address", "http://127.0.0.1:1", "--db", pg_url]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "cannot reach the Ray dashboard at http://127.0.0.1:1" in result.output


def test_submit_to_a_database_it_cannot_open_is_one_line_before_any_job(tmp_path: Path, home: Path) -> None:
    """The --db is opened (created or upgraded) before the job is sent: a wrong URL is bad input here."""
    sweep = _project(tmp_path)
    args = ["sweep", "submit", str(sweep), "--ray-address", "http://127.0.0.1:1", "--db", "postgresql+psycopg://x/y"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "cannot open results database: results database postgresql+psycopg://x/y: " in result.output
    assert "Ray dashboard" not in result.output  # nothing was submitted
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_status_shows_progress_from_the_database(tmp_path: Path, home: Path) -> None:
    import json

    from db.store import ResultStore

    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = ResultStore(url)
    jobs = make_jobs()
    begin(store, "statussweep1", jobs)
    store.record_run("statussweep1", ok_run(jobs[0]), final=True)
    store.finish_job("statussweep1", jobs[1].key, "build", "LLVM died")
    store.close()

    result = runner.invoke(app, ["sweep", "status", "statussw", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    assert (status["sweep_id"], status["jobs"], status["final"], status["ok"], status["failed"]) == (
        "statussweep1",
        4,
        2,
        1,
        1,
    ), status
    assert status["pending"] == 2

    missing = runner.invoke(app, ["sweep", "status", "nosuchsweep", "--db", url])
    assert missing.exit_code == 2  # not found, like every lookup
    assert "no sweep 'nosuchsweep' in the database" in missing.output


def test_farm_resource_must_exist(ray_local: None) -> None:
    from orchestrator.scheduler import check_farm_resource

    with pytest.raises(ValueError, match="no Ray node offers the resource 'lab_net'"):
        check_farm_resource("lab_net")
    check_farm_resource("CPU")  # every node offers CPU


def test_cluster_config_matches_rays_schema() -> None:
    import json

    import jsonschema
    import ray
    import yaml

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((Path(__file__).parents[1] / "infra" / "ray" / "cluster.yaml").read_text())
    jsonschema.validate(config, schema)
    assert config["file_mounts"], "the auth token must reach every node"
