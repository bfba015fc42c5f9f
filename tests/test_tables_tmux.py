"""Every table command in real terminals (tmux panes at 80, 100 and 120 columns) after one real sweep.

The sweep itself runs through `tvmbench sweep run` in a tmux pane (its progress line and final table
are checked there); the read commands then run in fresh panes. On screen: no `…`, no line wider than
the pane, every job and sweep id shown is accepted by `results show` / `sweep status`, and every
median equals the `--json` value at 4 significant digits. In a pipe: no box drawing, no escape sequence.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.farm import LocalFarm
from tests.conftest import write_sweep

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (scripts/setup.sh --system)")

TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))
WIDTHS = (80, 100, 120)
BOX = re.compile(r"[\u2500-\u257f]")
ESCAPE = re.compile(r"\x1b")
HEX = re.compile(r"\b[0-9a-f]{8,64}\b")
SWEEP = """
name = "widths"
[[models]]
path = "{models}/tiny_mlp.onnx"
[axes]
executor = ["vm-bytecode", "onnxruntime"]
opt_level = [0, 2]
[measure]
number = 1
repeat = 3
"""


class Tmux:
    """A private tmux server: each command runs in a new detached pane of a given width."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        conf = directory / "tmux.conf"
        # exit-empty off: the server stays up between panes. By default it exits when the last session is
        # killed, and a new-session that reaches the socket while it exits fails ("server exited
        # unexpectedly"), which CI saw on a busy machine.
        conf.write_text("set -s exit-empty off\nset -g remain-on-exit on\nset -g history-limit 20000\n")
        # The socket in the test's folder: nothing left in /tmp/tmux-UID, no clash with anyone's tmux.
        self.base = ["tmux", "-S", str(directory / "tmux.sock"), "-f", str(conf)]
        self.env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES", "TMUX")}
        self.count = 0

    def _tmux(self, *args: str) -> str:
        done = subprocess.run([*self.base, *args], env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def run(self, width: int, args: list[str], timeout_s: float = 120, extra_env: dict[str, str] | None = None,
            escapes: bool = False) -> str:  # fmt: skip
        """What the pane shows (scrollback included, wrapped lines joined) once ``tvmbench ARGS`` exited."""
        self.count += 1
        name = f"w{self.count}"
        prefix = [f"{k}={v}" for k, v in (extra_env or {}).items()]
        command = " ".join(map(_quote, ["env", *prefix, TVMBENCH, *args]))
        self._tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", "50", command)
        deadline = time.monotonic() + timeout_s
        while self._tmux("display-message", "-p", "-t", name, "#{pane_dead}").strip() != "1":
            assert time.monotonic() < deadline, f"tvmbench {' '.join(args)} did not finish in {timeout_s} s"
            time.sleep(0.2)  # polling the pane's state, bounded by the deadline above
        shown = self._tmux("capture-pane", "-p", "-J", *(["-e"] if escapes else []), "-S", "-", "-t", name)
        self._tmux("kill-session", "-t", name)
        return shown.rstrip("\n")

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], env=self.env, capture_output=True, timeout=30, check=False)


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


@pytest.fixture(scope="module")
def swept(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, ray_local: None, local_farm: LocalFarm
) -> dict[str, Any]:
    """One real sweep, run by `tvmbench sweep run` in a 100-column tmux pane; its screen and its ids."""
    import ray

    root = tmp_path_factory.mktemp("tables")
    home = root / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TVMBENCH_DB", "TVMBENCH_TRACKER", "NO_COLOR")}
    env["TVMBENCH_HOME"] = str(home)
    path = write_sweep(root, SWEEP.format(models=models_dir))
    tmux = Tmux(root, env)
    gcs = ray.get_runtime_context().gcs_address
    run_args = ["sweep", "run", str(path), "--tracker", local_farm.tracker, "--ray-address", gcs]
    screen = tmux.run(100, run_args, timeout_s=600)
    again = tmux.run(80, run_args, timeout_s=600)  # every job final: the same table, at 80 columns
    results = cli_json(env, "results", "list")
    # vm-bytecode at O0 and O2, ONNX Runtime once (it has no opt_level)
    assert len(results) == 3 and {r["status"] for r in results} == {"ok"}, screen
    # `results compare` needs two sweeps (a sweep against itself is refused): a copy of the database with
    # the same file run again under a label (its programs come from the artifact cache), so that the other
    # commands still read one sweep.
    compared = root / "compare.db"
    with sqlite3.connect(home / "results.db") as src, sqlite3.connect(compared) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    second = cli(env, *run_args, "--label", "b", "--db", str(compared))
    assert second.returncode == 0, second.stdout + second.stderr
    data = {
        "env": env,
        "tmux": tmux,
        "path": path,
        "tracker": local_farm.tracker,
        "run_screens": {100: screen, 80: again},
        "compare_db": str(compared),
        "results": results,
        "sweep_id": results[0]["sweep_id"],
        "accepted": {},
    }
    yield data
    tmux.close()


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``tvmbench ARGS`` with stdout a pipe."""
    return subprocess.run([TVMBENCH, *args], env=env, capture_output=True, text=True, timeout=300, check=False)


def cli_json(env: dict[str, str], *args: str) -> Any:
    done = cli(env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def commands(d: dict[str, Any]) -> dict[str, list[str]]:
    job = d["results"][0]["job_key"][:12]
    sweep = d["sweep_id"]
    return {
        "results list": ["results", "list"],
        "results sweeps": ["results", "sweeps"],
        "results best": ["results", "best"],
        "results query": ["results", "query"],
        "results compare": ["results", "compare", sweep, "b", "--all", "--db", d["compare_db"]],
        "results regressions": ["results", "regressions", "--all"],
        "results history": ["results", "history", job],
        "results show": ["results", "show", job],
        "sweep plan": ["sweep", "plan", str(d["path"])],
        "sweep status": ["sweep", "status", sweep],
        "farm list": ["farm", "list", "--tracker", d["tracker"]],
        "targets list": ["targets", "list"],
        "tuning list": ["tuning", "list"],
    }


COMMANDS = [
    "results list", "results sweeps", "results best", "results query", "results compare", "results regressions",
    "results history", "results show", "sweep plan", "sweep status", "farm list", "targets list", "tuning list",
]  # fmt: skip


def assert_fits(screen: str, width: int, what: str) -> None:
    assert "…" not in screen, f"{what} at {width} columns cut a cell:\n{screen}"
    wide = [line for line in screen.splitlines() if len(line) > width]
    assert not wide, f"{what} at {width} columns: lines wider than the pane:\n" + "\n".join(wide)


def assert_ids_accepted(d: dict[str, Any], screen: str) -> None:
    """Every hex id on screen that starts a job key or the sweep id names exactly that one to the commands."""
    keys = {r["job_key"] for r in d["results"]}
    for token in set(HEX.findall(screen)):
        jobs = {k for k in keys if k.startswith(token)}
        if d["sweep_id"].startswith(token):
            if token not in d["accepted"]:
                d["accepted"][token] = cli_json(d["env"], "sweep", "status", token)["sweep_id"]
            assert d["accepted"][token] == d["sweep_id"], token
        if jobs:
            assert len(jobs) == 1, f"id {token} on screen is ambiguous: {jobs}"
            if token not in d["accepted"]:
                d["accepted"][token] = cli_json(d["env"], "results", "show", token)["job_key"]
            assert d["accepted"][token] in jobs, token


def cell_under(screen: str, header: str, row_start: str) -> str:
    """The right-justified cell under ``header`` (its right edge) in the line starting with ``row_start``."""
    lines = screen.splitlines()
    head = next(line for line in lines if re.search(rf"(^|\s){re.escape(header)}(\s|$)", line))
    end = re.search(rf"(^|\s){re.escape(header)}(\s|$)", head).end(0)
    end -= 1 if head[end - 1 : end].isspace() else 0
    row = next(line for line in lines if line.startswith(row_start))
    return row[:end].split()[-1]


def assert_medians(d: dict[str, Any], screen: str, header: str) -> None:
    """Each job's median on screen (under ``header``) is its --json median at 4 significant digits."""
    for r in d["results"]:
        shown = [line for line in screen.splitlines() if line.startswith(r["job_key"][:8])]
        assert shown, f"job {r['job_key'][:8]} not on screen:\n{screen}"
        assert cell_under(screen, header, r["job_key"][:8]) == f"{r['median_ms']:.4g}", screen


@pytest.mark.parametrize("width", [100, 80])
def test_sweep_run_progress_and_final_table_fit_a_terminal(swept: dict[str, Any], width: int) -> None:
    screen = swept["run_screens"][width]
    assert_fits(screen, width, "sweep run")
    progress = [line for line in screen.splitlines() if line.startswith(f"sweep {swept['sweep_id'][:8]} ")]
    assert progress, screen  # the progress line, its sweep id shortened
    measured = "ok 3" if width == 100 else "ok 0"  # the second run finds every job final
    assert f"{measured} · failed 0" in progress[-1], screen
    assert_ids_accepted(swept, screen)
    assert_medians(swept, screen, "median ms")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", COMMANDS)
def test_every_table_fits_the_terminal(swept: dict[str, Any], name: str, width: int) -> None:
    args = commands(swept)[name]
    screen = swept["tmux"].run(width, args)
    assert_fits(screen, width, name)
    assert "Traceback" not in screen and "error:" not in screen, screen
    assert_ids_accepted(swept, screen)
    if name == "results list":
        assert_medians(swept, screen, "median ms")
        assert "left out for width:" in screen if width < 120 else True
    if name == "results query":
        assert_medians(swept, screen, "median")
    if name == "results best":
        best = cli_json(swept["env"], "results", "best")[0]
        assert cell_under(screen, "median", "tiny_mlp") == f"{best['best_median']:.4g}", screen
        lo, hi = (f"{best[k]:.4g}" for k in ("best_lo", "best_hi"))
        assert f"[{lo}, {hi}]" in screen, screen  # the interval, whole, on one line


@pytest.mark.parametrize("name", COMMANDS)
def test_in_a_pipe_tables_are_plain_text(swept: dict[str, Any], name: str) -> None:
    done = cli(swept["env"], *commands(swept)[name])
    assert done.returncode == 0, done.stdout + done.stderr
    assert not BOX.search(done.stdout) and not ESCAPE.search(done.stdout), done.stdout
    assert "…" not in done.stdout and "left out for width" not in done.stdout  # content width: every column


def test_no_color_means_no_colour_in_a_terminal(swept: dict[str, Any]) -> None:
    colour = re.compile(r"\x1b\[(?:[0-9;]*;)?(3[0-7]|9[0-7]|38;[0-9;]+)m")  # a foreground colour (39: default)
    coloured = swept["tmux"].run(120, ["results", "list"], escapes=True)
    assert colour.search(coloured), "the status cells should be coloured without NO_COLOR"
    plain = swept["tmux"].run(120, ["results", "list"], escapes=True, extra_env={"NO_COLOR": "1"})
    assert not colour.search(plain), plain


def test_wide_columns_and_tsv(swept: dict[str, Any]) -> None:
    wide = swept["tmux"].run(80, ["results", "list", "--wide"])
    assert "compile s" in wide and "left out for width" not in wide and "…" not in wide
    picked = swept["tmux"].run(80, ["results", "list", "--columns", "median,job"])
    header = next(line for line in picked.splitlines() if "median ms" in line)
    assert header.split() == ["median", "ms", "job"], picked
    bad = cli(swept["env"], "results", "list", "--columns", "median,colour")
    assert bad.returncode == 2 and "--columns: no column 'colour'" in bad.stderr and "Traceback" not in bad.stderr
    tsv = cli(swept["env"], "results", "list", "--tsv").stdout.splitlines()
    assert tsv[0].split("\t")[:2] == ["job", "model"] and len(tsv) == 4  # nothing but the TSV on stdout
    assert {line.split("\t")[0] for line in tsv[1:]} == {r["job_key"] for r in swept["results"]}
    medians = {line.split("\t")[0]: float(line.split("\t")[8]) for line in tsv[1:]}
    assert medians == {r["job_key"]: r["median_ms"] for r in swept["results"]}  # unrounded
