"""Finished sweeps' programs and ONNX Runtime timed in turn, in fresh processes: ratios a drift cannot skew.

A sweep times its ONNX Runtime baseline when it starts and a tuned program when its tuning ends, up to 15
minutes later, and on a shared machine ONNX Runtime's median moved 4.0 -> 6.1 ms within an hour
(docs/tuning-log.md, round 7). Here every round times ONNX Runtime once and then each program once, in a
rotating order, with the board's thread count: a drift lands in all of them, and each program's ratio is
taken of medians measured side by side. ONNX Runtime runs through the board agent's own function (a fresh
session per round, its warm-up untimed) and the programs through the VM's time evaluator, as on the board.

The machine's speed moves too, in windows of seconds: on round 10's machine (a cloud VM) a process of 15
rounds timed ONNX Runtime at about 4 or about 6 ms, and two programs' ratios to it came out the same in
one process and 0.2 apart in the next (what a slow window slows most is a program that copies feature
maps). So the rounds run in several fresh processes, one after another (``--processes``), and a program's
figure is the median of its per-process ratios, with their range.

`benchmarks/tuning.py` runs it after its sweep (`--paired 15 --paired-processes 5`); on its own it re-times
finished benchmark sweeps from the paths they printed, several at once to compare their programs (each
program's label then starts with its sweep's id):

    python benchmarks/paired.py --db sqlite:////tmp/tvmbench-tuning-bench-XXXX/results.db --sweep SWEEP_ID \
        [--db sqlite:////tmp/tvmbench-tuning-bench-YYYY/results.db --sweep SWEEP_ID2] [--processes 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/paired.py`, as the docstring says
    sys.path.insert(0, str(ROOT))

BASELINE = "onnxruntime"


def time_in_turn(
    onnx_path: Path, programs: dict[str, Path], number: int, rounds: int, seed: int = 0
) -> dict[str, list[float]]:
    """Per-round ms samples of ONNX Runtime (key ``BASELINE``) and of each exported program (``programs``:
    label -> its .so), timed one after another in each round, the order rotated by one every round.
    """
    from workers.board_state import use_every_core

    use_every_core()  # before TVM's thread pool starts, as the board agent does
    import tvm
    from tvm import relax

    from workers.board_agent import onnxruntime_run
    from workers.onnx_model import load_model, seeded_inputs
    from workers.sampling import time_evaluator_timer

    model = load_model(onnx_path)
    inputs = seeded_inputs(model.inputs, seed)  # type: ignore[arg-type]  # the bundled models' shapes are static
    dev = tvm.cpu(0)
    settings = SimpleNamespace(number=number, min_repeat_ms=0, cooldown_ms=0)
    timers: dict[str, Any] = {
        BASELINE: lambda: onnxruntime_run(str(onnx_path), number, 1, inputs)["samples_ms"],
    }
    for label, path in programs.items():
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), dev)
        args = [tvm.runtime.tensor(inputs[name], dev) for name, _, _ in model.inputs]
        timer = time_evaluator_timer(vm, dev, settings, args)
        timer(1)  # the first call of a fresh VM allocates its memory: untimed, as the board's warm-up
        timers[label] = lambda timer=timer: timer(1)
    samples: dict[str, list[float]] = {label: [] for label in timers}
    labels = list(timers)
    for r in range(rounds):
        for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
            samples[label] += [float(x) for x in timers[label]()]
    return samples


def time_in_processes(
    onnx_path: Path, programs: dict[str, Path], number: int, rounds: int, processes: int
) -> list[dict[str, float]]:
    """``time_in_turn`` in ``processes`` fresh interpreters, one after another: per process, each label's
    median (ms)."""
    import multiprocessing

    medians = []
    for seed in range(processes):
        # spawn: a fresh interpreter each time, nothing of this process's memory or thread pools in it
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            samples = pool.apply(time_in_turn, (onnx_path, programs, number, rounds, seed))
        medians.append({label: statistics.median(values) for label, values in samples.items()})
    return medians


def sweep_programs(
    rows: list[dict[str, Any]], db: str, sweep_id: str, artifacts: Path, model: str, prefix: str = ""
) -> tuple[dict[str, Path], dict[str, float]]:
    """(label -> exported program, label -> the sweep's own median) of a sweep's tuned ok programs of ``model``,
    and its ONNX Runtime's median under ``BASELINE``; nothing when the sweep has no ok ONNX Runtime row.

    ``rows``: the benchmark's figures of the sweep (with ``job_key``); ``artifacts``: its artifact cache.
    """
    from db.store import ResultStore
    from tvmbench.answers import query
    from workers.artifacts import ArtifactCache

    mine = [r for r in rows if r["model"] == model and r["status"] == "ok"]
    if not any(r["executor"] == BASELINE for r in mine):
        return {}, {}
    cache = ArtifactCache(artifacts)
    store = ResultStore(db)
    programs: dict[str, Path] = {}
    sweep_ms: dict[str, float] = {BASELINE: next(r["median_ms"] for r in mine if r["executor"] == BASELINE)}
    try:
        for r in mine:
            if r["executor"] == BASELINE or not r["budget"]:
                continue  # untuned programs are 10-100x off: not what the ratio is asked of
            build = (query.job_detail(store, r["job_key"], sweep_id) or {}).get("build") or {}
            sha = build.get("artifact_sha256")
            if sha and cache.has(sha):
                label = f"{prefix}{r['executor']} tuned {r['budget']}" + (f" {r['layout']}" if r.get("layout") else "")
                programs[label], sweep_ms[label] = cache.path(sha), r["median_ms"]
    finally:
        store.close()
    return programs, sweep_ms


def paired_rows(
    model: str,
    onnx_path: Path,
    programs: dict[str, Path],
    sweep_ms: dict[str, float],
    number: int,
    rounds: int,
    processes: int = 1,
) -> list[dict[str, Any]]:
    """``programs`` of ``model`` and ONNX Runtime timed in turn (``time_in_turn``), in ``processes`` fresh
    processes when more than one: a row per program and one for the baseline.

    Each row: model, config, median ms and its 95% CI (one process: over its rounds; several: the median and
    range of the per-process medians), ratio to the baseline (several: the median of the per-process ratios,
    and their range), and the sweep's own median beside it.
    """
    from tvmbench.answers.stats import median_ci

    if not programs:
        return []
    figures: dict[str, dict[str, Any]] = {}
    if processes <= 1:
        samples = time_in_turn(onnx_path, programs, number, rounds)
        base = statistics.median(samples[BASELINE])
        for label, values in samples.items():
            ci, med = median_ci(values), statistics.median(values)
            figures[label] = {"median_ms": med, "ci": (ci.lo, ci.hi), "x_ort": med / base, "x_ort_range": None}
    else:
        medians = time_in_processes(onnx_path, programs, number, rounds, processes)
        for label in medians[0]:
            values = [m[label] for m in medians]
            ratios = [m[label] / m[BASELINE] for m in medians]
            figures[label] = {
                "median_ms": statistics.median(values),
                "ci": (min(values), max(values)),
                "x_ort": statistics.median(ratios),
                "x_ort_range": (min(ratios), max(ratios)),
            }
    common = {"model": model, "rounds": rounds, "processes": processes}
    return [{**common, "config": label, **f, "sweep_median_ms": sweep_ms[label]} for label, f in figures.items()]


def print_paired(rows: list[dict[str, Any]]) -> None:
    """The paired table: each program beside ONNX Runtime timed in the same rounds (and processes)."""
    if not rows:
        return
    processes = rows[0].get("processes", 1)
    spread = "95% CI" if processes <= 1 else "processes' range"
    head = f"{'model':18} {'config':40} {'median ms':>10} {spread:>20} {'/ORT':>7} {'/ORT range':>15} {'sweep ms':>9}"
    where = "in this process" if processes <= 1 else f"in each of {processes} fresh processes"
    print(f"\nTimed in turn with ONNX Runtime, {rows[0]['rounds']} rounds {where}:")
    print(head)
    print("-" * len(head))
    for r in rows:
        ci = f"[{r['ci'][0]:.4g}, {r['ci'][1]:.4g}]"
        ratios = f"[{r['x_ort_range'][0]:.3g}, {r['x_ort_range'][1]:.3g}]" if r.get("x_ort_range") else "-"
        print(
            f"{r['model']:18} {r['config']:40} {r['median_ms']:>10.4g} {ci:>20} {r['x_ort']:>7.3g} {ratios:>15} "
            f"{r['sweep_median_ms']:>9.4g}"
        )
    print(
        "/ORT here: median over ONNX Runtime's median of the same rounds (each round times every row once, the "
        "order rotated); over several processes, the median of each process's ratio and their range. sweep ms: "
        "the row's median in the sweep, its baseline timed at the sweep's start."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", action="append", required=True, help="a benchmark sweep's results database URL")
    parser.add_argument("--sweep", action="append", required=True, help="its sweep id (one per --db, in order)")
    parser.add_argument(
        "--home",
        action="append",
        default=None,
        help="its TVMBENCH_HOME, for the artifacts (one per --db; default: 'home' beside a SQLite --db)",
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--processes", type=int, default=5, help="fresh processes the rounds run in, one after another")
    parser.add_argument("--number", type=int, default=10, help="runs per sample, as the sweep's [measure] number")
    args = parser.parse_args()
    if len(args.sweep) != len(args.db) or (args.home and len(args.home) != len(args.db)):
        parser.error("give one --sweep (and --home, if any) per --db")
    homes = args.home or [None] * len(args.db)
    if any(h is None and not db.startswith("sqlite:///") for db, h in zip(args.db, homes, strict=True)):
        parser.error("--home: give each non-SQLite sweep's TVMBENCH_HOME (its artifacts are there)")

    import onnx

    from benchmarks.tuning import bundled, figures
    from workers import model_zoo
    from workers.onnx_model import bundled_path

    swept = [(db, sweep, figures(db, sweep)) for db, sweep in zip(args.db, args.sweep, strict=True)]
    work = Path(tempfile.mkdtemp(prefix="tvmbench-paired-"))
    out: list[dict[str, Any]] = []
    for name in sorted({r["model"] for _, _, rows in swept for r in rows}):
        if bundled(name):
            path = bundled_path(name)
        elif hasattr(model_zoo, name):  # the benchmark's own models, made again from their seed
            path = work / f"{name}.onnx"
            onnx.save(getattr(model_zoo, name)(), path)
        else:
            continue
        programs: dict[str, Path] = {}
        sweep_ms: dict[str, float] = {}
        for (db, sweep, rows), home in zip(swept, homes, strict=True):
            artifacts = Path(home or Path(db.removeprefix("sqlite:///")).parent / "home") / "artifacts"
            prefix = f"{sweep[:6]} " if len(swept) > 1 else ""
            found, medians = sweep_programs(rows, db, sweep, artifacts, name, prefix)
            programs.update(found)
            sweep_ms = {**medians, **sweep_ms}  # the first sweep's ONNX Runtime median stays
        out += paired_rows(name, path, programs, sweep_ms, args.number, args.rounds, args.processes)
    print_paired(out)


if __name__ == "__main__":
    main()
