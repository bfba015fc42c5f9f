"""How far MetaSchedule tuning gets, and at what cost: prints figures (not a test).

For the small conv net (workers/model_zoo.small_convnet, random weights) and one bundled light model on
the ``host`` target: untuned, tuned at a few budgets, and ONNX Runtime, each median with its 95%
bootstrap CI; tuned/ORT ratio; tuning wall seconds; trials per second; and the share of tuning time
spent building candidates, waiting for boards and measuring.

It runs one real sweep through ``tvmbench sweep run`` (Ray builds, the local farm, the results database),
so these are the figures a user gets, not a private loop's. Records go to a fresh SQLite database by
default, so every budget's tuning is paid for; pass ``--db`` to reuse a database's records instead.

    PYTHONPATH=. python benchmarks/tuning.py --budgets 32,64 --models small_convnet,light_shufflenet
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/tuning.py`, as the README says: benchmarks.paired
    sys.path.insert(0, str(ROOT))


def bundled(name: str) -> bool:
    """Whether ``name`` is one of the onnx package's light models (light_squeezenet, light_resnet50, ...)."""
    return name.startswith("light_")


def sweep_toml(models: list[str], model_dir: Path, budgets: list[int | str], args: argparse.Namespace) -> str:
    """The sweep: the models on host, vm-compiled and the onnxruntime baseline, tuning = [0, budgets...].

    With ``--kernels``, vm-bytecode too, profiled per kernel (the VM's per-kernel view is vm-bytecode's);
    its tuned builds take the vm-compiled ones' records, so they cost no trials of their own.
    """
    lines = ['name = "tuning-benchmark"', ""]
    for name in models:
        lines += ["[[models]]", f'onnx = "{name}"' if bundled(name) else f'path = "{model_dir / name}.onnx"', ""]
    lines += ["[[targets]]", 'preset = "host"', ""]
    executors = ["vm-compiled", "onnxruntime", *(["vm-bytecode"] if args.kernels else [])]
    lines += [
        "[axes]",
        f"executor = {json.dumps(executors)}",
        "opt_level = [2]",
        f"pipeline = {json.dumps(args.pipeline.split(','))}",
        *([f"layout = {json.dumps(args.layouts.split(','))}"] if args.layouts else []),
        f"tuning = {json.dumps([0, *budgets])}",
        "",
        "[tuning]",
        f'cost_model = "{args.cost_model}"',
        f"num_trials_per_iter = {args.trials_per_iter}",
        *([f"population = {args.population}"] if args.population else []),
        f"seed = {args.seed}",
        *(  # the auto budget's rules (benchmark --max-minutes, --until, --plateau)
            [f"max_minutes = {args.max_minutes:g}", *([f'until = "{args.until}"'] if args.until else [])]
            + ([f"plateau = {{ trials = {args.plateau[0]}, gain = {args.plateau[1]:g} }}"] if args.plateau else [])
            if "auto" in budgets
            else []
        ),
        "",
        "[measure]",
        f"number = {args.number}",
        # Adaptive by default: 5 samples of a 4 ms program are 0.2 s of timing, and on this machine two such
        # draws of one program were 19-23 % apart; sampling to a 2 % interval makes each row one figure.
        *(
            [f"target_rel_ci = {args.target_rel_ci:g}", "warmup = 2"]
            if args.target_rel_ci
            else [f"repeat = {args.repeat}"]
        ),
        "session_timeout_s = 600",
        *(["profile = true"] if args.kernels else []),
        "device_wait_s = 1800",  # a board may be busy timing candidates of another job for a while
    ]
    return "\n".join(lines) + "\n"


def default_cost_model() -> str:
    """xgb when the xgboost module is installed (MetaSchedule's default), else random."""
    import importlib.util

    return "xgb" if importlib.util.find_spec("xgboost") else "random"


def run_sweep(path: Path, db: str, home: Path) -> tuple[str, float, int]:
    """``tvmbench sweep run --json``; returns the sweep id, wall seconds and exit status."""
    exe = Path(sys.executable).with_name("tvmbench")
    cmd = [str(exe), "sweep", "run", str(path), "--db", db, "--json"]
    env = {**os.environ, "TVMBENCH_HOME": str(home)}
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    try:
        sweep_id = json.loads(proc.stdout)["sweep_id"]
    except (json.JSONDecodeError, KeyError):
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"sweep run failed (exit {proc.returncode}); its output is above") from None
    return sweep_id, wall, proc.returncode


def figures(db: str, sweep_id: str) -> list[dict[str, Any]]:
    """One row per job of the sweep: median and CI, ratio to ORT, and the tuning figures."""
    from db.store import ResultStore
    from tvmbench.answers import query
    from tvmbench.answers.stats import median_ci

    store = ResultStore(db)
    rows = query.results(store, sweep_id)
    ort = {r["model"]: r["median_ms"] for r in rows if r["executor"] == "onnxruntime" and r["status"] == "ok"}
    out = []
    for r in rows:
        detail = query.job_detail(store, r["job_key"], sweep_id) or {}
        build = detail.get("build") or {}
        tuning = build.get("tuning") or {}
        # The job's budget from its configuration: a job still pending has no build to say it.
        budget = ((detail.get("config") or {}).get("tuning") or {}).get("budget") or 0
        ci = median_ci(r["samples"]) if r["samples"] else None
        tuning_s = tuning.get("tuning_s")
        trials = tuning.get("trials_run")
        shares = {
            key: (tuning.get(key) or 0.0) / tuning_s if tuning_s else None
            for key in ("build_s", "board_wait_s", "run_s")
        }
        out.append(
            {
                "model": r["model"],
                "job_key": r["job_key"],
                "executor": r["executor"],
                "budget": budget,
                "status": r["status"],
                "median_ms": r["median_ms"],
                "ci": None if ci is None else (ci.lo, ci.hi),
                "x_ort": (r["median_ms"] / ort[r["model"]]) if r["median_ms"] and ort.get(r["model"]) else None,
                "tuning_s": tuning_s,
                "trials_run": trials,
                "stopped_by": tuning.get("stopped_by"),
                # The until rule's check builds: [trial, minutes, estimate ms, measured ms, ONNX Runtime ms timed
                # beside the program (None: not timed)] each.
                "checks": [
                    [c.get("trial"), c.get("minutes"), c.get("estimate_ms"), c.get("measured_ms"), c.get("baseline_ms")]
                    for c in tuning.get("checks") or []
                ],
                "trials_from_records": tuning.get("trials_from_records"),
                "trials_per_s": trials / tuning_s if trials and tuning_s else None,
                "failed": tuning.get("failed_trials"),
                "share_build": shares["build_s"],
                "share_wait": shares["board_wait_s"],
                "share_run": shares["run_s"],
                # Per candidate built (each on one CPU): its compile, and its wait for the host fence.
                "candidates_built": tuning.get("candidates_built"),
                "compile_s_each": _each(tuning, "candidate_compile_s"),
                "fence_s_each": _each(tuning, "candidate_fence_s"),
                # The rest of the tuning thread's time: MetaSchedule's search, the cost model and the records.
                # On fenced boards nothing of the build overlaps (workers/tuning/runner.py), so it adds up.
                "share_search": (
                    max(0.0, 1.0 - sum(shares.values()))
                    if tuning_s and all(v is not None for v in shares.values())
                    else None
                ),
                "layout": r.get("layout"),
                "compile_s": r["compile_s"],
                "error": (r["error"] or "").splitlines()[0][:160] if r["error"] else None,
            }
        )
    store.close()
    order = {"onnxruntime": 0}
    return sorted(
        out, key=lambda x: (x["model"], order.get(x["executor"], 1), x["executor"], _budget_order(x["budget"]))
    )


def _each(tuning: dict[str, Any], key: str) -> float | None:
    """A per-candidate mean of a summed candidate figure (None before builds recorded it)."""
    built = tuning.get("candidates_built")
    return (tuning.get(key) or 0.0) / built if built else None


def _budget_order(budget: int | str) -> int:
    """Budgets ascending, the auto budget last."""
    return budget if isinstance(budget, int) else 1 << 30


def kernel_tables(db: str, sweep_id: str) -> dict[str, list[dict[str, Any]]]:
    """Per model (and layout, with ``--layouts``): each kernel's ms per run untuned and in the most-tuned
    vm-bytecode build (``--kernels``), and what its task's best record says it takes alone (weight x best)."""
    from db.store import ResultStore
    from tvmbench.answers import query

    store = ResultStore(db)
    profiles: dict[str, dict[int, dict[str, float]]] = {}
    alone: dict[str, dict[int, dict[str, float]]] = {}
    for r in query.results(store, sweep_id):
        if r["executor"] != "vm-bytecode" or r["status"] != "ok":
            continue
        detail = query.job_detail(store, r["job_key"], sweep_id) or {}
        budget = ((detail.get("config") or {}).get("tuning") or {}).get("budget") or 0
        final = [run for run in detail.get("runs") or [] if run.get("status") == "ok"]
        profile = (final[-1].get("kernel_profile") or {}) if final else {}
        if profile.get("available"):
            kernels = {k["name"]: k["total_ms"] for k in profile["kernels"] if k.get("kind") == "kernel"}
            # With --layouts each layout is a program of its own: its profile beside its own untuned one.
            name = f"{r['model']} {r['layout']}" if r.get("layout") else r["model"]
            profiles.setdefault(name, {})[_budget_order(budget)] = kernels
            # MetaSchedule timed each task's kernel alone, its inputs hot in cache: the estimate's terms.
            tasks = ((detail.get("build") or {}).get("tuning") or {}).get("tasks") or []
            alone.setdefault(name, {})[_budget_order(budget)] = {
                t["name"]: t["best_us"] * t["weight"] / 1e3 for t in tasks if t.get("best_us")
            }
    store.close()
    tables = {}
    for model, by_budget in profiles.items():
        untuned, tuned = by_budget.get(0, {}), by_budget[max(by_budget)] if len(by_budget) > 1 else {}
        by_itself = alone[model].get(max(by_budget), {}) if len(by_budget) > 1 else {}
        total = sum(tuned.values()) or 1.0
        names = sorted(set(untuned) | set(tuned), key=lambda n: -tuned.get(n, untuned.get(n, 0.0)))
        tables[model] = [
            {
                "kernel": n,
                "untuned_ms": untuned.get(n),
                "tuned_ms": tuned.get(n),
                "share_of_tuned": (tuned[n] / total) if n in tuned else None,
                "speedup": (untuned[n] / tuned[n]) if tuned.get(n) and untuned.get(n) else None,
                "alone_ms": by_itself.get(n),
            }
            for n in names
        ]
    return tables


def print_kernels(tables: dict[str, list[dict[str, Any]]], top: int = 12) -> None:
    """Where the tuned program's time goes, kernel by kernel, beside the untuned build's."""
    for model, rows in tables.items():
        print(f"\n{model}: per-kernel ms per run (vm-bytecode, board-timed), heaviest tuned kernels first")
        print(f"  {'kernel':44} {'untuned':>9} {'tuned':>9} {'x':>7} {'share':>6} {'alone':>9} {'in/alone':>8}")
        for r in rows[:top]:
            share = "-" if r["share_of_tuned"] is None else f"{r['share_of_tuned'] * 100:.0f}%"
            ratio = r["tuned_ms"] / r["alone_ms"] if r["tuned_ms"] and r["alone_ms"] else None
            print(
                f"  {r['kernel'][:44]:44} {_f(r['untuned_ms'], '.4g'):>9} {_f(r['tuned_ms'], '.4g'):>9} "
                f"{_f(r['speedup'], '.3g'):>7} {share:>6} {_f(r['alone_ms'], '.4g'):>9} {_f(ratio, '.3g'):>8}"
            )
        if len(rows) > top:
            rest = sum(r["tuned_ms"] or 0.0 for r in rows[top:])
            rest_alone = sum(r["alone_ms"] or 0.0 for r in rows[top:])
            print(f"  ... {len(rows) - top} more kernels: {rest:.4g} ms tuned, {rest_alone:.4g} ms alone")
        tuned = sum(r["tuned_ms"] or 0.0 for r in rows)
        timed = sum(r["alone_ms"] or 0.0 for r in rows)
        print(
            f"  all kernels: {tuned:.4g} ms in the program, {timed:.4g} ms alone (the tuning estimate's terms); "
            "alone: the task's best record x its calls, timed by MetaSchedule with its inputs hot in cache"
        )


def _f(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'model':18} {'config':27} {'median ms':>10} {'95% CI':>20} {'/ORT':>7} {'tune s':>8} {'trials':>7} "
        f"{'stored':>6} {'trial/s':>7} {'build':>6} {'wait':>6} {'run':>6} {'search':>6}  failed"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        config = "onnxruntime" if r["executor"] == "onnxruntime" else (
            f"{r['executor']} tuned {r['budget']}" if r["budget"] else f"{r['executor']} untuned"
        ) + (f" {r['layout']}" if r.get("layout") else "")  # fmt: skip
        ci = "-" if r["ci"] is None else f"[{r['ci'][0]:.4g}, {r['ci'][1]:.4g}]"
        pct = lambda v: "-" if v is None else f"{v * 100:.0f}%"  # noqa: E731
        status = "" if r["status"] == "ok" else f"  {r['status']}: {r['error']}"
        status += f"  stopped by {r['stopped_by']}" if r.get("stopped_by") else ""
        if r.get("candidates_built"):
            status += f"  candidates: compile {r['compile_s_each']:.2f} s, fence {r['fence_s_each']:.2f} s each"
        status += "".join(
            f"; check at trial {t} ({m:.1f} min): estimate {e:.4g}, measured {_f(ms, '.4g')} ms"
            + (f" against ORT {b:.4g} beside it" if b is not None else "")
            for t, m, e, ms, b in r.get("checks") or []
        )
        print(
            f"{r['model']:18} {config:27} {_f(r['median_ms'], '.4g'):>10} {ci:>20} {_f(r['x_ort'], '.3g'):>7} "
            f"{_f(r['tuning_s'], '.0f'):>8} {_f(r['trials_run'], 'd'):>7} {_f(r['trials_from_records'], 'd'):>6} "
            f"{_f(r['trials_per_s'], '.2f'):>7} {pct(r['share_build']):>6} {pct(r['share_wait']):>6} "
            f"{pct(r['share_run']):>6} {pct(r['share_search']):>6}  {r['failed'] or ''}{status}"
        )
    print(
        "\n/ORT: median over ONNX Runtime's on the same board (1 = as fast; < 1 faster). tune s: tuning wall "
        "seconds of that build; trials: measured in it; stored: covered by records already in the database; "
        "build/wait/run/search: share of tuning time building candidates, waiting for a board, measuring, and the "
        "rest (MetaSchedule's search, the cost model, the records). candidates: a candidate's own compile "
        "(lowering, LLVM, link) and its wait for the host fence, each on one CPU: 'build' minus these is Ray's "
        "and the batch's overhead."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budgets", default="32,64", help='comma-separated trial budgets and/or "auto" (0 = untuned is always run)'
    )
    parser.add_argument("--max-minutes", type=float, default=15.0, help="the auto budget's time limit")
    parser.add_argument("--until", default=None, help='the auto budget\'s until: "onnxruntime" or milliseconds')
    parser.add_argument(
        "--plateau", default=None, type=lambda v: (int(v.split(",")[0]), float(v.split(",")[1])), help="TRIALS,GAIN"
    )
    parser.add_argument(
        "--models",
        default="small_convnet,light_shufflenet",
        help="model_zoo names, onnx's light_*",
    )
    parser.add_argument(
        "--kernels", action="store_true", help="also vm-bytecode, profiled per kernel: where the tuned time goes"
    )
    parser.add_argument(
        "--pipeline", default="per-target", help='comma-separated pipelines ("per-target-fold-bn": batch norms folded)'
    )
    parser.add_argument(
        "--layouts", default=None, help='comma-separated data layouts, the layout axis ("NCHW,NHWC"; default: none)'
    )
    parser.add_argument("--cost-model", default=None, help="xgb (default when installed), random or mlp")
    parser.add_argument("--trials-per-iter", type=int, default=16)
    parser.add_argument("--population", type=int, default=None, help="[tuning] population (default: 512)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5, help="samples per row when --target-rel-ci is 0")
    parser.add_argument(
        "--target-rel-ci",
        type=float,
        default=0.02,
        help="sample each row until its median's 95%% CI half-width is within this fraction (0: --repeat samples)",
    )
    parser.add_argument("--db", default=None, help="results database URL (default: a fresh SQLite file)")
    parser.add_argument(
        "--paired",
        type=int,
        default=15,
        help="after the sweep, time each tuned program and ONNX Runtime in turn for this many rounds (0: not)",
    )
    parser.add_argument(
        "--paired-processes",
        type=int,
        default=5,
        help="the --paired rounds run in this many fresh processes, one after another (the machine's speed moves)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()
    args.cost_model = args.cost_model or default_cost_model()
    given = [b.strip() for b in args.budgets.split(",") if b.strip()]
    budgets: list[int | str] = [
        *sorted({int(b) for b in given if b != "auto" and int(b) > 0}),
        *(["auto"] if "auto" in given else []),
    ]
    models = [m.strip() for m in args.models.split(",") if m.strip()]

    import onnx

    from workers import model_zoo

    work = Path(tempfile.mkdtemp(prefix="tvmbench-tuning-bench-"))
    for name in models:
        if not bundled(name):
            onnx.save(getattr(model_zoo, name)(), work / f"{name}.onnx")
    db = args.db or f"sqlite:///{work / 'results.db'}"
    sweep = work / "tuning.toml"
    sweep.write_text(sweep_toml(models, work, budgets, args))
    print(f"sweep {sweep} (cost model {args.cost_model}, budgets {budgets}, {os.cpu_count()} cores), db {db}")
    sweep_id, wall, code = run_sweep(sweep, db, work / "home")
    print(f"sweep {sweep_id}: {wall:.0f} s wall, exit {code}\n")
    rows = figures(db, sweep_id)
    print_table(rows)
    kernels = kernel_tables(db, sweep_id) if args.kernels else {}
    print_kernels(kernels)
    paired: list[dict[str, Any]] = []
    if args.paired > 0:
        from benchmarks.paired import paired_rows, print_paired, sweep_programs
        from workers.onnx_model import bundled_path

        for name in models:
            path = bundled_path(name) if bundled(name) else work / f"{name}.onnx"
            programs, sweep_ms = sweep_programs(rows, db, sweep_id, work / "home" / "artifacts", name)
            paired += paired_rows(name, path, programs, sweep_ms, args.number, args.paired, args.paired_processes)
        print_paired(paired)
    if args.json:
        print(json.dumps({"rows": rows, "kernels": kernels, "paired": paired}, indent=2, default=str))


if __name__ == "__main__":
    main()
