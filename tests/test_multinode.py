"""A real two-node Ray cluster on this machine: a sweep submitted with `tvmbench sweep submit`, builds
observed on both nodes, every job's final row in PostgreSQL.

Each node is a `ray start --block` process in a session of its own, with its own --temp-dir, so the
test stops exactly what it started (never `ray stop`, which stops every Ray on the machine). The nodes
run from this test's virtualenv: tvmbench must be importable on every node of a cluster.

Two things this machine needs that a real cluster does not:
- Loopback only. A Ray node's address is 127.0.0.1 only with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (else
  Ray swaps 127.0.0.1 for the machine's network address and listens on every interface), but with that
  setting `ray start --address` refuses to add a second node ("Multi-node Ray clusters are not supported
  on Windows and OSX"). The second node is therefore `ray start` run through a launcher that lifts only
  that CLI guard; Ray itself still sees the variable and binds 127.0.0.1 (checked with `ss -ltnp`).
- Token auth (Ray 2.60's default) with a token of the test's own (RAY_AUTH_TOKEN_PATH), so the test
  neither needs nor touches ~/.ray/auth_token. The CLI runs as subprocesses because Ray reads the auth
  settings once per process, at import.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
from sqlalchemy import select

from db import models as m
from db.store import ResultStore
from orchestrator.farm import LocalFarm, free_ports, wait_until
from orchestrator.scheduler import measure_on_node
from tests.conftest import write_sweep
from tvmbench.answers import query as reads
from workers import model_zoo

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

VENV_BIN = Path(sys.executable).parent
# `ray start` with the multi-node guard lifted for the CLI only (see the module docstring).
WORKER_LAUNCHER = (
    "import sys, types, ray._private.ray_constants as c, ray.scripts.scripts as s; "
    "p = types.ModuleType('ray_constants'); p.__dict__.update(vars(c)); p.ENABLE_RAY_CLUSTER = True; "
    "s.ray_constants = p; sys.argv[0] = 'ray'; s.main()"
)


@dataclass
class RayCluster:
    dashboard: str  # http://127.0.0.1:PORT
    gcs: str  # 127.0.0.1:PORT
    env: dict[str, str]  # what a client of this cluster needs (auth token)
    token: str
    procs: list[subprocess.Popen]

    def nodes(self) -> list[dict]:
        """Alive nodes from the dashboard's state API: node_id and resources_total."""
        req = urllib.request.Request(
            f"{self.dashboard}/api/v0/nodes?detail=1&limit=100", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            data = json.load(resp)
        return [n for n in data["data"]["result"]["result"] if n["state"] == "ALIVE"]

    def accepts_jobs(self) -> bool:
        """True once the job server takes a job (it answers 500 until the head's agent registers)."""
        req = urllib.request.Request(
            f"{self.dashboard}/api/jobs/",
            data=json.dumps({"entrypoint": "true"}).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        # Generous: on a busy machine the server answers only once the job's supervisor actor started.
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status == 200

    def finished_tasks(self, name: str) -> list[dict]:
        """Finished Ray tasks named ``name`` (the state API keeps them after the job ends)."""
        query = f"limit=10000&filter_keys=name&filter_predicates=%3D&filter_values={name}"
        req = urllib.request.Request(
            f"{self.dashboard}/api/v0/tasks?{query}", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            data = json.load(resp)
        return [t for t in data["data"]["result"]["result"] if t["state"] == "FINISHED"]


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop one node: SIGTERM to its process group (raylet, GCS, workers), SIGKILL what is left."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue
    # The leader may be gone while children of its group linger: clear the group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    # Short paths: Ray's unix sockets live under --temp-dir and must stay under 108 characters.
    root = Path(tempfile.mkdtemp(prefix="tvmb-ray-"))
    logs = tmp_path_factory.mktemp("ray-logs")
    token = uuid.uuid4().hex
    (root / "token").write_text(token)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(root / "token")}
    env = {
        # Nothing Ray-related from this process (a local Ray of other tests sets some RAY_ variables).
        **{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TVMBENCH_"))},
        **auth,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # the job runs `tvmbench`
        "TVMBENCH_HOME": str(root / "home"),  # the head's artifact cache
    }
    # Every port the two nodes are given, different from each other: two free_port() calls in a row once
    # returned the same port, and Ray refused to start ("... a port number that is used by other components").
    ports = iter(free_ports(11))
    port, dash = next(ports), next(ports)
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--block", "--disable-usage-stats"]

    def own_ports() -> list[str]:
        # Ray's fixed defaults (agent 52365, client server 10001...) collide with any other Ray on the
        # machine, another engineer's or this session's local one, and with the other node: pick free ones.
        return [
            *("--dashboard-agent-listen-port", str(next(ports)), "--dashboard-agent-grpc-port", str(next(ports))),
            *("--metrics-export-port", str(next(ports)), "--runtime-env-agent-port", str(next(ports))),
        ]

    procs: list[subprocess.Popen] = []

    def start(cmd: list[str], log: str) -> None:
        with open(logs / log, "wb") as out:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    cluster = RayCluster(f"http://127.0.0.1:{dash}", f"127.0.0.1:{port}", auth, token, procs)
    try:
        start(
            [
                *(str(VENV_BIN / "ray"), "start", "--head", "--port", str(port), *common, *own_ports()),
                *("--ray-client-server-port", str(next(ports))),
                *("--resources", '{"node_a": 1}', "--include-dashboard", "true", "--dashboard-host", "127.0.0.1"),
                *("--dashboard-port", str(dash), "--temp-dir", str(root / "head")),
            ],
            "head.log",
        )
        wait_until(lambda: len(cluster.nodes()) == 1, 120, "the Ray head node")
        start(
            [
                *(str(VENV_BIN / "python"), "-c", WORKER_LAUNCHER, "start", "--address", cluster.gcs, *common),
                *own_ports(),
                *("--resources", '{"node_b": 1}', "--temp-dir", str(root / "worker")),
            ],
            "worker.log",
        )
        wait_until(lambda: len(cluster.nodes()) == 2, 120, f"the second Ray node (logs: {logs})")
        wait_until(cluster.accepts_jobs, 180, "the Ray job server to accept jobs", interval_s=1.0)
        yield cluster
    finally:
        for proc in reversed(procs):
            _stop_group(proc)
        # Keep Ray's own logs with the test's (pytest's tmp dirs), for a failure to be read afterwards.
        for node in ("head", "worker"):
            with contextlib.suppress(OSError):
                shutil.copytree(root / node / "session_latest" / "logs", logs / f"{node}-session-logs", symlinks=False)
        shutil.rmtree(root, ignore_errors=True)


def _cli(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VENV_BIN / "tvmbench"), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_submitted_sweep_builds_on_both_nodes(
    ray_cluster: RayCluster, local_farm: LocalFarm, pg_url: str, tmp_path: Path
) -> None:
    # The sweep's model sits beside it in its own folder, as a user's would: it must travel with the job.
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    onnx.save(model_zoo.tiny_mlp(), project / "models" / "mlp.onnx")
    sweep = write_sweep(
        project,
        """
name = "cluster"
[[models]]
path = "models/mlp.onnx"
[[targets]]
preset = "host"
[axes]
executor = ["vm-bytecode", "vm-compiled"]
opt_level = [0, 2]
[measure]
number = 1
repeat = 2
""",
    )
    client_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TVMBENCH_"))},
        **ray_cluster.env,
        "TVMBENCH_HOME": str(tmp_path / "client-home"),
    }
    ray_opts = ["--ray-address", ray_cluster.dashboard, "--db", pg_url]

    started = time.monotonic()
    submitted = _cli(
        [
            *("sweep", "submit", str(sweep), *ray_opts),
            *("--tracker", local_farm.tracker, "--farm-resource", "node_a", "--json"),
        ],
        client_env,
    )
    submit_s = time.monotonic() - started
    print(f"sweep submit returned in {submit_s:.2f}s")  # shown with -s: the figure
    assert submitted.returncode == 0, submitted.stderr
    sweep_id = json.loads(submitted.stdout)["sweep_id"]
    # How fast submit returns is a figure (printed above), not a test: on a busy CI machine a process start
    # with Ray imported takes what it takes.

    status = _cli(["sweep", "status", sweep_id, *ray_opts, "--json"], client_env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["submission_id"] == f"tvmbench-{sweep_id}"

    store = ResultStore(pg_url)
    try:

        def finished() -> bool:
            sweep_row = store.get_sweep(sweep_id)
            return sweep_row is not None and sweep_row.status in ("complete", "incomplete")

        try:
            wait_until(finished, 420, f"sweep {sweep_id} to finish on the cluster", interval_s=1.0)
        except Exception:
            logs = _cli(["sweep", "logs", sweep_id, "--ray-address", ray_cluster.dashboard], client_env)
            pytest.fail(f"sweep did not finish; job log:\n{logs.stdout[-4000:]}\n{logs.stderr[-2000:]}")

        rows = reads.results(store, sweep_id)
        assert len(rows) == 4
        assert {r["status"] for r in rows} == {"ok"}, json.dumps(rows, indent=1, default=str)
        with store.engine.connect() as conn:
            hosts = conn.execute(select(m.Build.host)).scalars().all()
    finally:
        store.close()

    nodes = {n["node_id"]: n for n in ray_cluster.nodes()}
    build_nodes = {h.rsplit("/", 1)[-1] for h in hosts}
    assert build_nodes <= set(nodes), f"builds on unknown nodes: {hosts}"

    def node_name(node_id: str) -> str:
        return next(r for r in ("node_a", "node_b") if r in nodes[node_id]["resources_total"])

    names = {node_name(n) for n in build_nodes}
    assert names == {"node_a", "node_b"}, f"builds ran on {names} only: {hosts}"
    # --farm-resource node_a: every measurement ran on node_a (task records from Ray's state API).
    measured_on = {node_name(t["node_id"]) for t in ray_cluster.finished_tasks(measure_on_node.__name__)}
    assert measured_on == {"node_a"}, f"measurements ran on {measured_on}"

    final = _cli(["sweep", "status", sweep_id, *ray_opts, "--json"], client_env)
    progress = json.loads(final.stdout)
    assert (progress["final"], progress["ok"], progress["jobs"]) == (4, 4, 4), progress
    wait_until(
        lambda: (
            json.loads(_cli(["sweep", "status", sweep_id, *ray_opts, "--json"], client_env).stdout)["ray_status"]
            == "SUCCEEDED"
        ),
        60,
        "the Ray job to report SUCCEEDED",
        interval_s=1.0,
    )
    logs = _cli(["sweep", "logs", sweep_id, "--ray-address", ray_cluster.dashboard], client_env)
    assert logs.returncode == 0 and sweep_id in logs.stdout, logs.stdout[-2000:]
    # --follow streams until the job ends; this one has ended, so it prints the log and returns.
    followed = _cli(["sweep", "logs", sweep_id, "--follow", "--ray-address", ray_cluster.dashboard], client_env)
    assert followed.returncode == 0 and sweep_id in followed.stdout, followed.stderr[-2000:]


def test_cancel_and_resubmit(ray_cluster: RayCluster, local_farm: LocalFarm, pg_url: str, tmp_path: Path) -> None:
    onnx.save(model_zoo.tiny_cnn(), tmp_path / "cnn.onnx")
    sweep = write_sweep(
        tmp_path,
        '[[models]]\npath = "cnn.onnx"\n[axes]\nexecutor = ["vm-bytecode", "vm-compiled"]\nopt_level = [0, 1, 2]\n',
    )
    client_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TVMBENCH_"))},
        **ray_cluster.env,
        "TVMBENCH_HOME": str(tmp_path / "client-home"),
    }
    ray_opts = ["--ray-address", ray_cluster.dashboard, "--db", pg_url]
    submit = ["sweep", "submit", str(sweep), *ray_opts, "--tracker", local_farm.tracker, "--json"]
    first = _cli(submit, client_env)
    assert first.returncode == 0, first.stderr
    sweep_id = json.loads(first.stdout)["sweep_id"]
    again = json.loads(_cli(submit, client_env).stdout)
    assert again["already_running"] or again["submission_id"] != f"tvmbench-{sweep_id}", again

    store = ResultStore(pg_url)
    try:
        wait_until(lambda: store.get_sweep(sweep_id), 120, "the submitted sweep to begin in the database")
        cancelled = _cli(["sweep", "cancel", sweep_id, *ray_opts, "--json"], client_env)
        assert cancelled.returncode == 0, cancelled.stderr
        assert json.loads(cancelled.stdout)["stopped"] is True
        wait_until(
            lambda: (
                json.loads(_cli(["sweep", "status", sweep_id, *ray_opts, "--json"], client_env).stdout)["ray_status"]
                == "STOPPED"
            ),
            60,
            "the Ray job to stop",
            interval_s=1.0,
        )
        assert store.get_sweep(sweep_id).status == "cancelled"
        assert any(s == "pending" for s in store.job_statuses(sweep_id).values()), "cancelled before any job ended"
    finally:
        store.close()

    # Submitting the same sweep after it ended starts a second Ray job for it, which finishes the rest.
    second = _cli(submit, client_env)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["submission_id"] == f"tvmbench-{sweep_id}-2"
    stop = _cli(["sweep", "cancel", sweep_id, *ray_opts, "--json"], client_env)
    assert json.loads(stop.stdout)["submission_id"] == f"tvmbench-{sweep_id}-2"


# A driver of the cluster that builds one tuned job, its tasks searched by two Ray workers (the build's tuning
# provenance on its last line). The boards are handed as not this machine's: a cluster's driver does that for
# boards elsewhere, where the search is worth spreading (workers/tuning/parallel.py).
PARALLEL_SEARCH_DRIVER = """
import json, sys
import ray
from orchestrator.plan import plan_jobs
from orchestrator.spec import load_spec
from workers.executors.registry import build_job
from workers.executors.requests import BuildRequest
from workers.tuning.stage import TuningEnv

gcs, sweep, model, tracker, url = sys.argv[1:]
ray.init(address=gcs, _node_ip_address="127.0.0.1", log_to_driver=False, logging_level="WARNING")
(job,) = plan_jobs(load_spec(sweep))
env = TuningEnv(tracker=tracker, database={"kind": "sql", "url": url}, boards=2)
build, _ = build_job(BuildRequest(job, open(model, "rb").read(), tuning_env=env))
print(json.dumps({"error": build.error, "tuning": build.tuning}))
"""


def test_one_models_tasks_are_searched_on_both_nodes(
    ray_cluster: RayCluster, local_farm: LocalFarm, pg_url: str, tmp_path: Path
) -> None:
    onnx.save(model_zoo.tiny_mlp(), tmp_path / "mlp.onnx")
    sweep = write_sweep(
        tmp_path,
        '[[models]]\npath = "mlp.onnx"\n[axes]\nexecutor = ["vm-compiled"]\ntuning = [12]\n'
        '[tuning]\ncost_model = "random"\nnum_trials_per_iter = 2\nsearch_workers = 2\n',
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TVMBENCH_"))},
        **ray_cluster.env,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "TVMBENCH_HOME": str(tmp_path / "home"),
    }
    args = [ray_cluster.gcs, str(sweep), str(tmp_path / "mlp.onnx"), local_farm.tracker, pg_url]
    driver = subprocess.run(
        [sys.executable, "-c", PARALLEL_SEARCH_DRIVER, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert driver.returncode == 0, driver.stderr[-3000:]
    built = json.loads(driver.stdout.strip().splitlines()[-1])
    assert built["error"] is None, built["error"]
    search = built["tuning"]["search"]
    nodes = {n["node_id"]: n for n in ray_cluster.nodes()}

    def node_name(node_id: str) -> str:
        return next(r for r in ("node_a", "node_b") if r in nodes[node_id]["resources_total"])

    # One node CPU each: the two groups' searches ran at once, one on each node.
    assert (search["workers"], search["nodes"]) == (2, 2), search
    assert {node_name(g["node"]) for g in search["groups"]} == {"node_a", "node_b"}, search
    tasks = built["tuning"]["tasks"]
    assert all(t["records_found"] for t in tasks) and built["tuning"]["trials_run"] == 12, tasks
