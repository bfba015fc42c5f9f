"""`tvmbench serve` under a team's load: a real server process, 20 requests at a time, every page kind.

The database holds several finished sweeps written through ResultStore (synthetic figures: the read path
is what is under test). The server process is the real CLI on a free loopback port; 20 client threads
fire 400 requests with urllib at the list pages, the JSON API, sweep and job pages and the plot images.
Before the read-only SQLite engine stopped sharing one connection across the server's threads, this
killed the server (SIGSEGV) or answered 500 ("Cannot operate on a closed database").
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from db.store import ResultStore
from tests.synthetic import T0, Result, add_sweep, noisy

TVMBENCH = [sys.executable, "-c", "from tvmbench.cli import app; app()"]
SWEEPS = [f"load{i:04d}beef" for i in range(4)]
PARALLEL = 20
REQUESTS = 400


def _results(i: int) -> list[Result]:
    """Eight jobs per sweep over two models, boards and executors (so every plot kind is drawn)."""
    out = []
    for n, (model, board, executor, opt) in enumerate(
        (m, b, e, o) for m in ("tiny_cnn", "tiny_mlp") for b in ("host", "arm64-emu") for e, o in
        (("vm-compiled", 2), ("vm-bytecode", 0))
    ):  # fmt: skip
        out.append(Result(model=model, board_key=board, executor=executor, opt_level=opt,
                          samples=noisy(2.0 + n + i, n=20, seed=10 * i + n)))  # fmt: skip
    return out


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str], list[str]]]:
    """A real `tvmbench serve` process over a database of several sweeps; yields (base URL, process, job keys)."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = ResultStore(url)
    for i, sweep_id in enumerate(SWEEPS):
        add_sweep(store, sweep_id, _results(i), label=f"run{i}", created_at=T0 + timedelta(days=i))
    store.close()
    keys = sorted({r.job_key for r in _results(0)})
    env = {**os.environ, "TVMBENCH_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [*TVMBENCH, "serve", "--db", url, "--port", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen, found = [], None
        for line in proc.stderr:  # the server prints its address once it listens (ends if it exits)
            seen.append(line)
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if found:
                break
        assert found, f"serve did not start: {''.join(seen)[-2000:]}"
        # Keep reading what it logs (tracebacks of failed requests), so a full pipe never stalls it.
        threading.Thread(target=lambda: seen.extend(proc.stderr or ()), daemon=True).start()
        yield f"http://127.0.0.1:{found.group(1)}", proc, keys
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


def _status(url: str) -> tuple[int, str]:
    """(HTTP status, first 300 characters of the body) of a GET; 0 when the server did not answer."""
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            r.read()
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")[:300]
    except OSError as e:  # connection refused or reset: the server died
        return 0, str(e)


def test_serve_answers_400_requests_20_at_a_time(served: tuple[str, subprocess.Popen[str], list[str]]) -> None:
    base, proc, keys = served
    paths = ["/sweeps", "/api/sweeps", "/farm"]
    for sweep_id in SWEEPS:
        paths += [f"/sweep/{sweep_id}", f"/api/sweep/{sweep_id}"]
        if sweep_id != SWEEPS[0]:  # one sweep on both sides is a bad request (400), as in `results compare`
            paths.append(f"/compare?a={SWEEPS[0]}&b={sweep_id}")
    for key in keys:
        paths += [f"/job/{key}", f"/api/job/{key}?sweep={SWEEPS[1]}", f"/job/{key}/samples.png", f"/history/{key}"]
        paths.append(f"/history/{key}/plot.png")
    with urllib.request.urlopen(f"{base}/sweep/{SWEEPS[2]}") as r:
        plots = re.findall(r'src="(/sweep/[^"]+\.png)"', r.read().decode())
    assert plots, "the sweep page shows plots"
    paths += plots
    urls = [base + paths[i % len(paths)] for i in range(REQUESTS)]
    with ThreadPoolExecutor(PARALLEL) as pool:
        answers = list(pool.map(_status, urls))
    bad = Counter((url.removeprefix(base), status, body) for url, (status, body) in zip(urls, answers, strict=True)
                  if status != 200)  # fmt: skip
    assert not bad, f"{sum(bad.values())} of {REQUESTS} requests failed, e.g. {bad.most_common(3)}"
    assert proc.poll() is None, f"the server died (exit {proc.returncode})"
    assert _status(f"{base}/api/sweeps")[0] == 200, "and it still answers"
