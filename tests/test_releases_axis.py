"""TVM releases as a sweep axis: real toolchains (0.26.0 and the installed one), real Ray, real boards, SQLite.

The 0.26.0 toolchain is the one tests/test_toolchains.py caches in ~/.cache/tvmbench-test (provisioned on
the first run only). One sweep of tiny_cnn over both releases is shared by the module: first with only
the farm's installed-release board up (the 0.26.0 job waits, pending-device naming its release), then
again once a board agent run by the 0.26.0 toolchain joins under that release's key (it finishes).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.store import ResultStore
from orchestrator.farm import LocalFarm, free_port, stop_pid, wait_until
from orchestrator.plan import plan_jobs
from orchestrator.scheduler import run_sweep
from orchestrator.scheduling.events import SweepOutcome
from orchestrator.spec import SpecError, parse_spec
from tests.conftest import linked_venv_copy, one_error_line, write_sweep
from tvmbench.cli import app
from tvmbench.core.records import Build
from workers.artifacts import ArtifactCache
from workers.toolchains import probe, provision, registry
from workers.toolchains.boards import installed_version, release_key
from workers.toolchains.toolchain import Toolchain, ToolchainError
from workers.tracker_client import registered_keys, tracker_summary

RELEASE = "0.26.0"
INSTALLED = installed_version()
runner = CliRunner()

# The key of the job (and its artifact, for 0.27.0.post1) that tiny_cnn at opt_level 3 on the host had
# before the tvm axis existed, computed on main at b005b82: a sweep without the axis keeps them.
# Computed with the code from before the axis (29387e5^). The target is written out: the `host` preset
# names this machine's CPU (`mcpu`), so its keys differ from one machine to the next.
PINNED_JOB_KEY = "8e08400e3a8b037e8b2465fec01f43f7dee5a0685df83a142dfe15562fbecf1a"
PINNED_BUILD_KEY = "bceb532d000f2542fa56423284f4f04ed1a47b84a683256b9f2f03c95fcc6fe8"
PINNED_MODEL = "4cabb6cb0ac761dd698eb9ef66c6376060a92b7001bb1b73a77a4ae02ed22c55"
PINNED_SWEEP_ID = "935b135392f9"

BASE = (
    "[[models]]\npath = 'tiny_cnn.onnx'\n"
    "[[targets]]\nname = 'plain'\ntarget = { kind = 'llvm' }\nboard_key = 'host'\narch = 'x86_64'\n"
    "[axes]\nexecutor = ['vm-bytecode']\nopt_level = [3]\n"
)
# A short wait for a board of a key that has none: the first run's 0.26.0 job ends pending-device soon.
MEASURE = "[measure]\nnumber = 2\nrepeat = 2\ndevice_wait_s = 10\n"


def sweep_text(tvm: str, extra: str = MEASURE) -> str:
    return f"{BASE}tvm = {tvm}\n{extra}"


def invoke(*args: str) -> object:
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def tvm026(cached_home: Path) -> Toolchain:
    """TVM 0.26.0, provisioned on the first run and found in the cache after."""
    return provision.add(RELEASE)


def start_release_board(toolchain: Toolchain, tracker: str, log: Path) -> tuple[int, str]:
    """A board agent run by ``toolchain``'s interpreter (its TVM's RPC server), under its release's key."""
    key = release_key("host", toolchain.tvm_version)
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [toolchain.python, "-m", "workers.board_agent", "--tracker", tracker, "--key", key, "--port", str(port)],
            env=probe.child_env(toolchain.pythonpath),
            cwd=probe.PROJECT_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # stop_pid stops its process group
        )
    wait_until(lambda: key in registered_keys(tracker_summary(tracker)), 120, f"the {key} board")
    return proc.pid, key


@dataclass
class Swept:
    store: ResultStore
    db: Path
    cache: ArtifactCache
    first: SweepOutcome
    second: SweepOutcome
    first_statuses: dict[str, str]
    first_errors: dict[str, str | None]
    sweep_id: str
    jobs: dict[str, str]  # toolchain text -> job key
    builds: dict[str, Build]  # toolchain text -> its stored Build


@pytest.fixture(scope="module")
def swept(
    tvm026: Toolchain,
    models_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    local_farm: LocalFarm,
    ray_local: None,
) -> Iterator[Swept]:
    """The two-release sweep: run with only the installed release's board, then again with a 0.26.0 board."""
    tmp = tmp_path_factory.mktemp("releases")
    spec = parse_spec(sweep_text(f'["{RELEASE}", "{INSTALLED}"]'), base=models_dir)
    store = ResultStore(f"sqlite:///{tmp / 'results.db'}")
    cache = ArtifactCache(tmp / "artifacts")
    first = run_sweep(spec, store, local_farm.tracker, cache)
    rows = {r["job_key"]: r for r in store_rows(store, spec.sweep_id)}
    first_statuses = {k: r["status"] for k, r in rows.items()}
    first_errors = {k: r["error"] for k, r in rows.items()}
    pid, _ = start_release_board(tvm026, local_farm.tracker, tmp / "board-026.log")
    try:
        second = run_sweep(spec, store, local_farm.tracker, cache)
        jobs = {job.toolchain or "": job.key for job in plan_jobs(spec)}
        builds = {}
        for text in jobs:
            found = next(j for j in plan_jobs(spec) if j.toolchain == text)
            version = RELEASE if text == RELEASE else INSTALLED
            build = store.get_build(found.build_key(version))
            assert build is not None, f"no build row for {text}"
            builds[text] = build
        yield Swept(
            store, tmp / "results.db", cache, first, second, first_statuses, first_errors, spec.sweep_id, jobs, builds
        )
    finally:
        stop_pid(pid)
        store.close()


def store_rows(store: ResultStore, sweep_id: str) -> list[dict]:
    from tvmbench.answers import query

    return query.results(store, sweep_id)


def test_a_sweep_without_the_axis_keeps_its_job_and_build_keys(models_dir: Path, tmp_path: Path) -> None:
    spec = parse_spec(BASE, base=models_dir)
    (job,) = plan_jobs(spec)
    assert job.model.sha256 == PINNED_MODEL  # the model itself is what it was when the keys were pinned
    assert (job.toolchain, job.key, job.build_key("0.27.0.post1")) == (None, PINNED_JOB_KEY, PINNED_BUILD_KEY)
    assert spec.sweep_id == PINNED_SWEEP_ID and spec.toolchains == ()
    assert "toolchain" not in job.build_config()
    plan = invoke(
        "sweep",
        "plan",
        str(write_sweep(models_dir, BASE, "no-axis.toml")),
        "--json",
        "--db",
        f"sqlite:///{tmp_path / 'p.db'}",
    )
    assert plan.exit_code == 0, plan.output
    shown = json.loads(plan.stdout)
    assert "toolchains" not in shown and "toolchain" not in shown["jobs"][0]  # the plan reads as it did
    assert shown["jobs"][0]["job_key"] == PINNED_JOB_KEY
    axis = plan_jobs(parse_spec(f"{BASE}tvm = ['0.27.0.post1', '{RELEASE}']\n", base=models_dir))
    assert [j.toolchain for j in axis] == ["0.27.0.post1", RELEASE]
    assert len({j.key for j in axis} | {PINNED_JOB_KEY}) == 3  # a job of a release is a job of its own
    assert axis[0].build_config()["toolchain"] == "0.27.0.post1"


def test_the_baseline_is_planned_once_on_the_installed_release(models_dir: Path) -> None:
    """ONNX Runtime builds nothing of TVM's: one job per model and target, not one per opt_level x pipeline x
    release. Before, a job per release went to that release's boards, which have no ONNX Runtime, and its
    `build` error read as a fix in `results releases`."""
    text = BASE.replace("['vm-bytecode']", "['vm-bytecode', 'onnxruntime']").replace("[3]", "[3, 0]")
    axes = f"pipeline = ['per-target', 'generic']\ntvm = ['{INSTALLED}', '{RELEASE}']\n"
    spec = parse_spec(text + axes, base=models_dir)
    jobs = plan_jobs(spec)
    (ort,) = [j for j in jobs if j.executor == "onnxruntime"]
    assert (ort.toolchain, ort.opt_level, ort.pipeline, ort.tuning, ort.layout) == (None, 3, "per-target", 0, None)
    assert len(jobs) == 1 + 2 * 2 * 2, [(j.executor, j.opt_level, j.pipeline, j.toolchain) for j in jobs]
    # Its key is the one it had without the axis at the first opt_level and pipeline (a re-run reuses it).
    alone = parse_spec(text.replace("[3, 0]", "[3]"), base=models_dir)
    assert ort.key == next(j.key for j in plan_jobs(alone) if j.executor == "onnxruntime")
    # An ephemeral farm starts boards of the installed release for it even when the axis does not name it.
    from orchestrator.toolchains import board_runtimes

    other = Toolchain(name=RELEASE, kind="release", spec=RELEASE, python="py", tvm_version=RELEASE, ffi_version="0")
    assert [t.tvm_version for t in board_runtimes({RELEASE: other})] == [RELEASE]
    assert [t.tvm_version for t in board_runtimes({RELEASE: other}, installed_too=True)] == [INSTALLED, RELEASE]
    assert board_runtimes({}, installed_too=True) is None, "no axis: the installed release's boards anyway"


def test_axis_entries_are_parsed_at_load_and_malformed_ones_are_one_line(models_dir: Path) -> None:
    spec = parse_spec(
        f'{BASE}tvm = ["{RELEASE}", "wheels/apache_tvm-0.26.0-py3-none-any.whl", {{ python = "env/bin/python" }}, '
        f'"{RELEASE}"]\n',
        base=models_dir,
    )
    wheel = str(models_dir / "wheels/apache_tvm-0.26.0-py3-none-any.whl")
    interpreter = str(models_dir / "env/bin/python")
    assert spec.toolchains == (RELEASE, wheel, f"python:{interpreter}")  # relative to the sweep file, once each
    assert spec.sweep_id != parse_spec(BASE, base=models_dir).sweep_id
    bad = {
        "[3]": "axes.tvm: toolchain 3: give a release",
        '[{ python = "" }]': "axes.tvm: toolchain {'python': ''}: an interpreter is written",
        '["not a release"]': "axes.tvm: toolchain 'not a release' is neither a TVM release",
        "[]": "axes.tvm is empty",
    }
    for value, message in bad.items():
        with pytest.raises(SpecError) as caught:
            parse_spec(f"{BASE}tvm = {value}\n", base=models_dir)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value), str(caught.value)


def test_tuning_in_another_release_needs_a_cost_model_its_toolchain_has(models_dir: Path) -> None:
    # The default cost model needs xgboost, which a provisioned toolchain does not have: one line at load.
    with pytest.raises(SpecError, match=rf'tuning in toolchain {RELEASE} with \[tuning\] cost_model = "xgb"') as caught:
        parse_spec(f"{BASE}tuning = [0, 8]\ntvm = ['{RELEASE}']\n", base=models_dir)
    assert "\n" not in str(caught.value) and 'cost_model = "random"' in str(caught.value)
    tuned = parse_spec(f"{BASE}tuning = [0, 8]\ntvm = ['{INSTALLED}']\n", base=models_dir)  # the installed one may
    assert tuned.toolchains == (INSTALLED,)
    random = f"{BASE}tuning = [0, 8]\ntvm = ['{RELEASE}']\n[tuning]\ncost_model = 'random'\n"
    assert parse_spec(random, base=models_dir).toolchains == (RELEASE,)  # tuned in that release's toolchain


def test_plan_lists_the_toolchains_needed_and_which_are_missing(
    tvm026: Toolchain, models_dir: Path, tmp_path: Path
) -> None:
    # 0.25.0.post1 is pinned but never added in this home: missing (the cache may hold it: another home).
    path = write_sweep(models_dir, sweep_text(f'["{RELEASE}", "0.25.0.post1", "{INSTALLED}"]'), "plan-axis.toml")
    db = f"sqlite:///{tmp_path / 'plan.db'}"
    result = invoke("sweep", "plan", str(path), "--db", db, "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    by_text = {t["toolchain"]: t for t in plan["toolchains"]}
    assert by_text[RELEASE]["missing"] is False and by_text[RELEASE]["name"] == RELEASE
    assert by_text[INSTALLED]["installed"] is True and by_text[INSTALLED]["missing"] is False
    missing = by_text["0.25.0.post1"]
    if registry.find("0.25.0.post1") is None:
        assert missing["missing"] is True and missing["add"] == "tvmbench toolchains add 0.25.0.post1"
    rows = {r["toolchain"]: r for r in plan["jobs"]}
    assert rows[RELEASE]["board_key"] == f"host-tvm{RELEASE}" and rows[INSTALLED]["board_key"] == "host"
    assert len({r["job_key"] for r in plan["jobs"]}) == 3
    text = invoke("sweep", "plan", str(path), "--db", db)
    assert text.exit_code == 0, text.output
    assert f"toolchain {RELEASE} (TVM {RELEASE}): 1 job(s), 1 to build; added ({tvm026.python})" in text.output


def recorded_in(db: Path, text: str, base: Path) -> bool:
    """Whether the sweep of ``text`` (its models in ``base``) is in the database at ``db``."""
    if not db.exists():
        return False
    store = ResultStore(f"sqlite:///{db}")
    try:
        return store.get_sweep(parse_spec(text, base=base).sweep_id) is not None
    finally:
        store.close()


def test_no_provision_with_a_missing_toolchain_is_one_line_exit_2(models_dir: Path, home: Path) -> None:
    text = sweep_text('["0.25.0.post1"]')
    path = write_sweep(models_dir, text, "missing.toml")
    db = home / "results.db"
    done = invoke("sweep", "run", str(path), "--db", f"sqlite:///{db}", "--no-provision")
    line = one_error_line(done)
    assert "starting" not in done.output, done.output  # no progress line of a sweep that never started
    assert "toolchain 0.25.0.post1 (TVM 0.25.0.post1) is not added here" in line
    assert "`tvmbench toolchains add 0.25.0.post1`" in line
    assert not (home / "toolchains").exists()  # nothing provisioned
    assert not recorded_in(db, text, models_dir)


def test_hostile_entries_are_one_line_exit_2_at_plan_and_run(models_dir: Path, home: Path, tmp_path: Path) -> None:
    python = Path("/usr/bin/python3")
    no_tvm = subprocess.run([str(python), "-c", "import tvm"], capture_output=True).returncode != 0
    fake = tmp_path / "apache_tvm-0.26.0-cp39-abi3-linux_x86_64.whl"
    fake.write_text("not a zip")
    other = tmp_path / "six-1.0-py3-none-any.whl"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("six-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: six\nVersion: 1.0\n")
    cases = {
        '["0.1.0"]': "TVM release 0.1.0 is not on the package index",
        '["wheels/apache_tvm-0.26.0-cp39-abi3-linux_x86_64.whl"]': "wheels/apache_tvm-0.26.0-cp39-abi3-linux_x86_64.whl"
        " does not exist",
        f'["{fake}"]': f"{fake} is not a wheel",
        f'["{other}"]': f"wheel {other} is six, not apache-tvm",
    }
    if no_tvm:
        cases[f'[{{ python = "{python}" }}]'] = f"interpreter {python} cannot import TVM"
    db = home / "results.db"
    for i, (value, message) in enumerate(cases.items()):
        text = sweep_text(value)
        path = write_sweep(models_dir, text, f"hostile{i}.toml")
        for command in ("plan", "run"):
            line = one_error_line(invoke("sweep", command, str(path), "--db", f"sqlite:///{db}"))
            assert message in line, (command, line)
        assert not recorded_in(db, text, models_dir)
    assert not (home / "toolchains").exists() or not any((home / "toolchains").iterdir())


def test_each_release_built_its_own_job_with_its_own_versions(swept: Swept) -> None:
    old, new = swept.builds[RELEASE], swept.builds[INSTALLED]
    assert old.ok and new.ok, (old.error, new.error)
    assert (old.tvm_version, old.ffi_version) == (RELEASE, "0.1.14.post1")
    assert new.tvm_version == INSTALLED
    assert old.build_key != new.build_key
    assert old.fingerprint != new.fingerprint  # the fingerprint carries the release: no reuse across them
    # Each trace is its release's own: 0.27 renamed the TIR simplifier (workers/toolchains/compat.py).
    assert "s_tir.StmtSimplify" not in old.pass_trace and "s_tir.StmtSimplify" in new.pass_trace
    assert old.kernel_count == new.kernel_count == 7
    with sqlite3.connect(swept.db) as db:  # each job row points at its own release's build
        job_builds = dict(db.execute("SELECT job_key, build_key FROM jobs WHERE sweep_id = ?", (swept.sweep_id,)))
    assert job_builds == {swept.jobs[RELEASE]: old.build_key, swept.jobs[INSTALLED]: new.build_key}


def test_a_job_of_another_release_waits_for_a_board_of_its_release(swept: Swept) -> None:
    old, new = swept.jobs[RELEASE], swept.jobs[INSTALLED]
    assert swept.first_statuses[new] == "ok"
    assert swept.first_statuses[old] == "pending-device"  # never sent to the installed release's board
    error = swept.first_errors[old] or ""
    assert error.startswith(f"no board running TVM {RELEASE} is registered under key 'host-tvm{RELEASE}'"), error
    # The advice starts a board of that release, never one of the installed release under its key.
    assert f"`tvmbench farm add --key host --tvm {RELEASE}`" in error and "farm add --key host-tvm" not in error
    assert swept.first.statuses["pending-device"] == 1 and not swept.first.complete


def test_a_board_of_the_release_finishes_it(swept: Swept) -> None:
    rows = {r["job_key"]: r for r in store_rows(swept.store, swept.sweep_id)}
    run = rows[swept.jobs[RELEASE]]
    assert run["status"] == "ok", run["error"]
    assert run["median_ms"] and run["median_ms"] > 0
    assert swept.second.complete and swept.second.statuses == {"ok": 2}
    assert (swept.second.already_final, swept.second.cached, swept.second.measured) == (1, 1, 1)  # not rebuilt
    assert run["board"].startswith(f"host-tvm{RELEASE}@")  # a 0.26.0 runtime ran the 0.26.0 artifact
    assert rows[swept.jobs[INSTALLED]]["board"].startswith("host@")
    assert run["max_abs_err"] is not None and run["max_abs_err"] < 1e-4  # checked against ONNX Runtime


@pytest.fixture
def broken_copy(tvm026: Toolchain, home: Path, tmp_path: Path) -> Iterator[Toolchain]:
    """An interpreter toolchain on a hard-linked copy of the 0.26.0 venv, added in a fresh TVMBENCH_HOME."""
    python = linked_venv_copy(tvm026.python, tmp_path / "venv-0.26.0")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TVMBENCH_HOME", str(home))
        patch.delenv("PYTHONPATH", raising=False)
        yield provision.add({"python": str(python)})


def test_a_toolchain_broken_after_add_ends_its_jobs_as_build_rows_and_the_rest_goes_on(
    broken_copy: Toolchain, swept: Swept, models_dir: Path, local_farm: LocalFarm, tmp_path: Path
) -> None:
    runtime = next(Path(lib) for lib in broken_copy.libraries if Path(lib).name == "libtvm_runtime.so")
    runtime.unlink()  # only the copy's link: the cached venv keeps its file
    spec = parse_spec(sweep_text(f'[{{ python = "{broken_copy.python}" }}, "{INSTALLED}"]'), base=models_dir)
    outcome = run_sweep(spec, swept.store, local_farm.tracker, swept.cache)  # the installed build is cached
    rows = {r["job_key"]: r for r in store_rows(swept.store, spec.sweep_id)}
    by_text = {job.toolchain: rows[job.key] for job in plan_jobs(spec)}
    broken = by_text[f"python:{broken_copy.python}"]
    assert broken["status"] == "build"
    assert broken["error"].startswith(f"toolchain {broken_copy.label}: "), broken["error"]
    assert "0.26.0" in broken["error"] and "libtvm_runtime.so" in broken["error"]
    assert by_text[INSTALLED]["status"] == "ok", by_text[INSTALLED]["error"]
    assert outcome.statuses == {"build": 1, "ok": 1}
    assert Path(broken_copy.python).exists()  # the interpreter is still there: only its TVM broke


def test_run_provisions_a_missing_toolchain_with_progress_lines(tvm026: Toolchain, home: Path, tmp_path: Path) -> None:
    """What `sweep run` does before the farm starts (an interpreter toolchain: recorded, not built, so cheap)."""
    from orchestrator import toolchains

    python = linked_venv_copy(tvm026.python, tmp_path / "venv-0.26.0")
    text = f"python:{python}"
    (wanted,) = toolchains.needs((text,))
    assert wanted.missing and wanted.tvm_version == RELEASE
    with pytest.raises(ToolchainError, match=r"is not added here: `tvmbench toolchains add --python "):
        toolchains.ensure((text,), provision_missing=False)
    lines: list[str] = []
    found = toolchains.ensure((text, INSTALLED), progress=lines.append)
    assert found[text].tvm_version == RELEASE and found[INSTALLED].kind == "installed"
    assert lines[0].startswith(f"toolchain python = {python}: not added here, provisioning it")
    assert any("import check" in line for line in lines), lines
    assert registry.find({"python": str(python)}) == found[text]  # added: the next run finds it
    assert toolchains.ensure((text,), provision_missing=False) == {text: found[text]}


def test_sweep_run_on_the_embedded_farm_starts_a_board_of_each_release(
    tvm026: Toolchain, models_dir: Path, tmp_path: Path, ray_local: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user's path: no farm configured, `sweep run` starts a host board per release, each job on its own."""
    home = tmp_path / "home"
    (home / "toolchains").mkdir(parents=True)
    (home / "toolchains" / RELEASE).symlink_to(registry.directory(RELEASE))  # added once, in the cache
    monkeypatch.setenv("TVMBENCH_HOME", str(home))
    text = sweep_text(f'["{RELEASE}", "{INSTALLED}"]', "[measure]\nnumber = 2\nrepeat = 2\n")
    path = write_sweep(models_dir, text.replace("opt_level = [3]", "opt_level = [0, 3]"), "embedded.toml")
    plan = invoke("sweep", "plan", str(path))
    assert plan.exit_code == 0, plan.output
    assert "4 program(s) to build" in plan.output  # one per release and opt_level, not one per opt_level
    header = next(line for line in plan.output.splitlines() if line.startswith("job "))
    assert " tvm " in header, plan.output
    run = invoke("sweep", "run", str(path))
    assert run.exit_code == 0, run.output
    assert "starting a local tracker" in run.output
    rows = json.loads(invoke("results", "list", "--json").stdout)
    boards = {(r["tvm_version"], r["board"].split("@")[0]) for r in rows}
    assert boards == {(RELEASE, f"host-tvm{RELEASE}"), (INSTALLED, "host")}, rows
    assert all(r["status"] == "ok" for r in rows), [(r["status"], r["error"]) for r in rows]
    listed = invoke("results", "list")
    header = next(line for line in listed.stdout.splitlines() if line.startswith("job "))
    assert " tvm " in header, listed.stdout  # the table says which release each row is
