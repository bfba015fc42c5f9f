"""Scale benchmark: fill SQLite with N measurement rows (runs), then time `results best` and `results query`.

    .venv/bin/python benchmarks/scale_results.py                 # 1,000,000 runs in a temporary database
    .venv/bin/python benchmarks/scale_results.py --rows 20000 --db /tmp/small.db --json

Rows are synthetic but shaped like a long history: ~500 sweeps of 20 models x 4 boards x 3 executors x
4 opt_levels x 2 pipelines, with failures, retries (failed first attempts) and an emulated board. The
timed calls are the library functions the CLI commands call, on a fresh store (cold) and once more (warm),
then `tvmbench results best` as a whole process (start-up, imports, open, query, print), best of three.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from db import models as m  # noqa: E402
from db.store import ResultStore  # noqa: E402
from tvmbench.answers import query as q  # noqa: E402
from tvmbench.answers import ranking  # noqa: E402
from tvmbench.core.records import canonical_hash  # noqa: E402

MODELS = [f"model_{i:02d}" for i in range(20)]
BOARDS = [("host", False), ("rpi4", False), ("x86-avx512", False), ("arm64-emu", True)]
EXECUTORS = ["vm-bytecode", "vm-compiled", "onnxruntime"]
OPT_LEVELS = [0, 1, 2, 3]
PIPELINES = ["per-target", "default"]
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _configs() -> list[tuple[str, str, bool, str, int, str]]:
    return [
        (mod, board, emu, ex, opt, pipe)
        for mod in MODELS
        for board, emu in BOARDS
        for ex in EXECUTORS
        for opt in OPT_LEVELS
        for pipe in PIPELINES
    ]


def _insert_many(raw, table, rows: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """executemany of SQLAlchemy's own compiled INSERT (bound parameters), on the DB-API connection."""
    if not rows:
        return
    stmt = insert(table).compile(dialect=_DIALECT, column_keys=list(rows[0]))
    cols = list(rows[0])
    raw.executemany(str(stmt), [tuple(r[c] for c in cols) for r in rows])


_DIALECT = None


def fill(store: ResultStore, target_runs: int, seed: int = 1) -> dict[str, int]:
    """Write sweeps until ``target_runs`` run rows exist; returns the row counts."""
    global _DIALECT
    _DIALECT = store.engine.dialect
    rng = random.Random(seed)
    configs = _configs()
    base_ms = {c: rng.uniform(0.5, 50.0) for c in configs}
    json_dump = json.dumps
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        # Bulk load: durability does not matter for a scratch database, speed does.
        for pragma in ("synchronous=OFF", "foreign_keys=OFF", "cache_size=-200000"):
            cur.execute(f"PRAGMA {pragma}")
        now = T0.isoformat(sep=" ")
        _insert_many(
            cur,
            m.Model.__table__,
            [
                {"sha256": canonical_hash(x), "name": x, "source": f"{x}.onnx", "size_bytes": 1000, "inputs": "[]"}
                for x in MODELS
            ],
        )
        _insert_many(
            cur,
            m.Board.__table__,
            [
                {"id": f"{b}@127.0.0.1:{9000 + i}", "key": b, "arch": "x86_64", "emulated": e, "facts": "{}",
                 "state": "ok", "consecutive_failures": 0, "last_seen": now}
                for i, (b, e) in enumerate(BOARDS)
            ],
        )  # fmt: skip
        keys = {c: canonical_hash(list(c)) for c in configs}
        _insert_many(
            cur,
            m.Build.__table__,
            [
                {"build_key": keys[c], "model_sha256": canonical_hash(c[0]), "target": '{"kind": "llvm"}',
                 "executor": c[3], "opt_level": c[4], "pipeline": c[5], "status": "ok", "fingerprint": keys[c][:16],
                 "pass_trace": '["Normalize", "LegalizeOps"]', "pass_count": 2, "created_at": now}
                for c in configs
            ],
        )  # fmt: skip
        runs = jobs = sweeps = 0
        job_id = run_id = 0
        while runs < target_runs:
            created = T0 + timedelta(hours=6 * sweeps)
            sweep_id = canonical_hash(["scale", sweeps])[:32]
            job_rows, run_rows = [], []
            drift = 1 + 0.01 * rng.uniform(-1, 1)
            for c in configs:
                if runs + len(run_rows) >= target_runs:
                    break
                mod, board, emu, ex, opt, pipe = c
                job_id += 1
                u = rng.random()
                status = "ok" if u < 0.90 else "wrong-result" if u < 0.95 else "build" if u < 0.98 else "timeout"
                final = None
                finished = created + timedelta(minutes=len(job_rows) % 300)
                if status != "build":
                    attempts = 2 if rng.random() < 0.05 else 1
                    for attempt in range(1, attempts + 1):
                        run_id += 1
                        last = attempt == attempts
                        st = status if last else "infra"
                        center = base_ms[c] * drift
                        samples = [round(center * (1 + 0.02 * rng.gauss(0, 1)), 5) for _ in range(10)]
                        ss = sorted(samples)
                        run_rows.append(
                            {"id": run_id, "job_id": job_id, "attempt": attempt,
                             "board_id": f"{board}@127.0.0.1:{9000 + [b for b, _ in BOARDS].index(board)}",
                             "status": st, "unit": "ms", "samples": json_dump(samples) if st != "infra" else "[]",
                             "median": (ss[4] + ss[5]) / 2 if st != "infra" else None, "mean": center,
                             "std": center * 0.02, "min": ss[0], "max": ss[-1], "max_abs_err": 1e-6,
                             "emulated": emu, "started_at": finished.isoformat(sep=" "),
                             "finished_at": finished.isoformat(sep=" ")}
                        )  # fmt: skip
                        final = run_id if last else final
                job_rows.append(
                    {"id": job_id, "sweep_id": sweep_id, "job_key": keys[c], "model_sha256": canonical_hash(mod),
                     "model_name": mod, "target_name": board, "board_key": board, "executor": ex, "opt_level": opt,
                     "pipeline": pipe, "build_key": keys[c],
                     "config": json_dump({"executor": ex, "opt_level": opt, "pipeline": pipe, "board_key": board,
                                          "measure": {"number": 10, "repeat": 10}, "emulated": emu}),
                     "status": status, "error": None if status == "ok" else f"{status}: synthetic",
                     "final_run_id": final, "finished_at": finished.isoformat(sep=" ")}
                )  # fmt: skip
            _insert_many(
                cur,
                m.Sweep.__table__,
                [
                    {"id": sweep_id, "name": "scale", "label": f"s{sweeps}", "source_path": "scale.toml",
                     "source": "", "status": "complete", "job_count": len(job_rows), "host": "bench",
                     "tvm_version": "0.27.0" if sweeps % 100 < 50 else "0.28.0",
                     "created_at": created.isoformat(sep=" ")}
                ],
            )  # fmt: skip
            _insert_many(cur, m.Job.__table__, job_rows)
            _insert_many(cur, m.Run.__table__, run_rows)
            runs += len(run_rows)
            jobs += len(job_rows)
            sweeps += 1
        raw.commit()
        # Planner statistics, as `PRAGMA optimize` would gather on a long-lived database.
        cur.execute("ANALYZE")
        raw.commit()
    finally:
        raw.close()
    return {"runs": runs, "jobs": jobs, "sweeps": sweeps}


def _timed(fn) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _timed_cpu(fn) -> tuple[float, float, object]:  # type: ignore[no-untyped-def]
    """Wall and CPU seconds of this process: on a shared host the wall time includes waiting for a core."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


def bench(url: str) -> dict[str, dict[str, float]]:
    """Time each command's library call on a fresh store (cold) and again (warm).

    pandas and scipy are imported first: their import time (about a second) is start-up, not query time.
    """
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401

    cases = {
        "results best (newest sweep per model and board)": lambda s: ranking.best(s),
        "results best --board host": lambda s: ranking.best(s, q.Filters(board="host")),
        "results query --model model_07 --board host --executor vm-compiled --opt-level 2": lambda s: q.query(
            s, q.Filters(model="model_07", board="host", executor="vm-compiled", opt_level=2)
        ),
        "results query --sweep <newest> --status ok": lambda s: q.query(
            s, q.Filters(sweep=q.sweeps(s)[0].id, status="ok")
        ),
    }
    timings: dict[str, dict[str, float]] = {}
    for name, call in cases.items():
        store = ResultStore(url, migrate=False)
        cold, cold_cpu, out = _timed_cpu(lambda call=call, store=store: call(store))
        warm, warm_cpu, _ = _timed_cpu(lambda call=call, store=store: call(store))
        timings[name] = {
            "cold_s": round(cold, 3),
            "warm_s": round(warm, 3),
            "cold_cpu_s": round(cold_cpu, 3),
            "warm_cpu_s": round(warm_cpu, 3),
            "rows": len(out),  # type: ignore[arg-type]
        }
        store.close()
    return timings


def process_seconds(url: str, tries: int = 3) -> dict[str, float]:
    """Wall seconds of the whole `tvmbench results best --db url` process: the first try and the best one."""
    times = []
    for _ in range(tries):
        t = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "tvmbench", "results", "best", "--db", url], cwd=ROOT, capture_output=True
        )
        times.append(time.perf_counter() - t)
        if out.returncode != 0:
            raise RuntimeError(f"tvmbench results best failed: {out.stderr.decode()[-400:]}")
    return {"first_s": round(times[0], 3), "best_s": round(min(times), 3)}


def _print(args: argparse.Namespace, report: dict) -> None:
    if args.json:
        print(json.dumps(report, indent=2))
        return
    if "runs" in report:
        counts = f"{report['runs']:,} runs, {report['jobs']:,} jobs, {report['sweeps']} sweeps"
        print(f"{counts}, {report['fill_s']} s to fill")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; seconds wall (cpu):")
    for name, t in report["timings"].items():
        print(
            f"cold {t['cold_s']:6.3f} ({t['cold_cpu_s']:.3f})  warm {t['warm_s']:6.3f} ({t['warm_cpu_s']:.3f})"
            f"  {t['rows']:>5} rows  {name}"
        )
    p = report["process"]
    print(f"first {p['first_s']:6.3f}  best {p['best_s']:6.3f}  whole process: tvmbench results best")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="run rows to generate (default 1,000,000)")
    parser.add_argument("--db", type=Path, help="SQLite file to (re)create (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--no-fill", action="store_true", help="time an existing --db without refilling it")
    args = parser.parse_args(argv)
    if args.no_fill:
        if args.db is None or not args.db.exists():
            parser.error("--no-fill needs an existing --db file")
        url = f"sqlite:///{args.db}"
        _print(args, {"db": str(args.db), "timings": bench(url), "process": process_seconds(url)})
        return 0
    tmp = None
    if args.db is None:
        tmp = tempfile.TemporaryDirectory(prefix="tvmbench-scale-")
        args.db = Path(tmp.name) / "scale.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{args.db}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{args.db}"
    store = ResultStore(url)  # creates the schema (all migrations, indexes included)
    fill_s, counts = _timed(lambda: fill(store, args.rows))
    store.close()
    timings = bench(url)
    report = {"db": str(args.db), "fill_s": round(fill_s, 1), **counts, "timings": timings}
    _print(args, {**report, "process": process_seconds(url)})
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
