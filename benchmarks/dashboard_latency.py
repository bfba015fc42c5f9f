"""Dashboard benchmark: how long the pages and the live poll take on a big results database.

    .venv/bin/python benchmarks/dashboard_latency.py --rows 200000          # fill a temporary database first
    .venv/bin/python benchmarks/dashboard_latency.py --no-fill --db /tmp/scale.db

Fills SQLite like benchmarks/scale_results.py (a long synthetic history), serves it read-only with the
real uvicorn server on a free loopback port, and prints the wall time of each request (first and best of
three): the Sweeps page and its JSON, what a live page polls every second (`/api/sweeps?watch=`), one
sweep's page and one of its plots, one job's page and the history of one configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.scale_results import fill  # noqa: E402
from db.store import ResultStore  # noqa: E402
from tvmbench.answers import query  # noqa: E402
from tvmbench.dashboard.server import listen, make_server, open_readonly  # noqa: E402


def _get(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as r:
        r.read()
        assert r.status == 200, (url, r.status)
    return time.perf_counter() - start


def bench(url: str) -> dict[str, dict[str, float]]:
    """Serve ``url`` read-only and time each page; {path: {first_s, best_s}}."""
    store = open_readonly(url)
    sweeps = query.sweeps(store)
    newest = sweeps[0].id
    job = query.results(store, newest)[0]["job_key"]
    sock = listen("127.0.0.1", 0)
    server = make_server(store, sock)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with urllib.request.urlopen(f"{base}/api/sweep/{newest}", timeout=600) as r:
        stem = json.load(r)["plots"][0]["stem"]
    paths = [
        "/api/sweeps",
        "/sweeps",
        f"/api/sweeps?watch={newest}",
        f"/sweep/{newest}",
        f"/sweep/{newest}/plot/{stem}.png",
        f"/job/{job}?sweep={newest}",
        f"/history/{job}",
    ]
    out = {}
    try:
        for path in paths:
            times = [_get(base + path) for _ in range(3)]
            out[path] = {"first_s": round(times[0], 3), "best_s": round(min(times), 3)}
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000, help="run rows to generate (default 200,000)")
    parser.add_argument("--db", type=Path, help="SQLite file to (re)create (default: a temporary one)")
    parser.add_argument("--no-fill", action="store_true", help="time an existing --db without refilling it")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    args = parser.parse_args(argv)
    tmp = None
    report: dict = {}
    if not args.no_fill:
        if args.db is None:
            tmp = tempfile.TemporaryDirectory(prefix="tvmbench-dashboard-")
            args.db = Path(tmp.name) / "scale.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{args.db}{suffix}").unlink(missing_ok=True)
        writer = ResultStore(f"sqlite:///{args.db}")
        start = time.perf_counter()
        report.update(fill(writer, args.rows))
        report["fill_s"] = round(time.perf_counter() - start, 1)
        writer.close()
    elif args.db is None or not args.db.exists():
        parser.error("--no-fill needs an existing --db file")
    report["timings"] = bench(f"sqlite:///{args.db}")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            if key != "timings":
                print(f"{key}: {value}")
        for path, t in report["timings"].items():
            print(f"{path:60s} first {t['first_s']:.3f} s, best of 3 {t['best_s']:.3f} s")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
