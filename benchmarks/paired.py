"""A finished sweep's programs and ONNX Runtime timed in turn, in this process: ratios a drift cannot skew.

A sweep times its ONNX Runtime baseline when it starts and a tuned program when its tuning ends, up to 15
minutes later, and on a shared machine ONNX Runtime's median moved 4.0 -> 6.1 ms within an hour
(docs/tuning-log.md, round 7). Here every round times ONNX Runtime once and then each program once, in a
rotating order, with the board's thread count: a drift lands in all of them, and each program's ratio is
taken of medians measured side by side. ONNX Runtime runs through the board agent's own function (a fresh
session per round, its warm-up untimed) and the programs through the VM's time evaluator, as on the board.

`benchmarks/tuning.py` runs it after its sweep (`--paired 15`); on its own it re-times a finished
benchmark sweep from the paths that one printed:

    python benchmarks/paired.py --db sqlite:////tmp/tvmbench-tuning-bench-XXXX/results.db --sweep SWEEP_ID
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


def paired_rows(
    rows: list[dict[str, Any]],
    db: str,
    sweep_id: str,
    artifacts: Path,
    model_paths: dict[str, Path],
    number: int,
    rounds: int,
) -> list[dict[str, Any]]:
    """For each model with an ok ONNX Runtime row, its tuned ok programs against it in turn (``time_in_turn``).

    ``rows``: the benchmark's figures (with ``job_key``); ``artifacts``: the sweep's artifact cache folder.
    One row per program and one per baseline: model, config, median ms, 95% CI, ratio to the baseline's
    median of the same rounds, and the sweep's own median beside it.
    """
    from db.store import ResultStore
    from tvmbench.answers import query
    from tvmbench.answers.stats import median_ci
    from workers.artifacts import ArtifactCache

    cache = ArtifactCache(artifacts)
    store = ResultStore(db)
    out: list[dict[str, Any]] = []
    try:
        for model, path in model_paths.items():
            mine = [r for r in rows if r["model"] == model and r["status"] == "ok"]
            if not any(r["executor"] == BASELINE for r in mine):
                continue
            programs: dict[str, Path] = {}
            sweep_ms: dict[str, float] = {BASELINE: next(r["median_ms"] for r in mine if r["executor"] == BASELINE)}
            for r in mine:
                if r["executor"] == BASELINE or not r["budget"]:
                    continue  # untuned programs are 10-100x off: not what the ratio is asked of
                build = (query.job_detail(store, r["job_key"], sweep_id) or {}).get("build") or {}
                sha = build.get("artifact_sha256")
                if sha and cache.has(sha):
                    label = f"{r['executor']} tuned {r['budget']}" + (f" {r['layout']}" if r.get("layout") else "")
                    programs[label], sweep_ms[label] = cache.path(sha), r["median_ms"]
            if not programs:
                continue
            samples = time_in_turn(path, programs, number, rounds)
            base = statistics.median(samples[BASELINE])
            for label, values in samples.items():
                ci = median_ci(values)
                med = statistics.median(values)
                out.append(
                    {
                        "model": model,
                        "config": label,
                        "median_ms": med,
                        "ci": (ci.lo, ci.hi),
                        "x_ort": med / base,
                        "sweep_median_ms": sweep_ms[label],
                        "rounds": rounds,
                    }
                )
    finally:
        store.close()
    return out


def print_paired(rows: list[dict[str, Any]]) -> None:
    """The paired table: each program beside ONNX Runtime timed in the same rounds."""
    if not rows:
        return
    head = f"{'model':18} {'config':34} {'median ms':>10} {'95% CI':>20} {'/ORT':>7} {'sweep ms':>9}"
    print(f"\nTimed in turn with ONNX Runtime, {rows[0]['rounds']} rounds in this process:")
    print(head)
    print("-" * len(head))
    for r in rows:
        ci = f"[{r['ci'][0]:.4g}, {r['ci'][1]:.4g}]"
        print(
            f"{r['model']:18} {r['config']:34} {r['median_ms']:>10.4g} {ci:>20} {r['x_ort']:>7.3g} "
            f"{r['sweep_median_ms']:>9.4g}"
        )
    print(
        "/ORT here: median over ONNX Runtime's median of the same rounds (each round times every row once, the "
        "order rotated); sweep ms: the row's median in the sweep, its baseline timed at the sweep's start."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the benchmark sweep's results database URL")
    parser.add_argument("--sweep", required=True, help="its sweep id")
    parser.add_argument(
        "--home", default=None, help="its TVMBENCH_HOME, for the artifacts (default: 'home' beside a SQLite --db)"
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=10, help="runs per sample, as the sweep's [measure] number")
    args = parser.parse_args()
    if args.home is None and not args.db.startswith("sqlite:///"):
        parser.error("--home: give the sweep's TVMBENCH_HOME (its artifacts are there)")
    home = Path(args.home) if args.home else Path(args.db.removeprefix("sqlite:///")).parent / "home"

    import onnx

    from benchmarks.tuning import bundled, figures
    from workers import model_zoo
    from workers.onnx_model import bundled_path

    rows = figures(args.db, args.sweep)
    work = Path(tempfile.mkdtemp(prefix="tvmbench-paired-"))
    paths: dict[str, Path] = {}
    for name in sorted({r["model"] for r in rows}):
        if bundled(name):
            paths[name] = bundled_path(name)
        elif hasattr(model_zoo, name):  # the benchmark's own models, made again from their seed
            onnx.save(getattr(model_zoo, name)(), work / f"{name}.onnx")
            paths[name] = work / f"{name}.onnx"
    print_paired(paired_rows(rows, args.db, args.sweep, home / "artifacts", paths, args.number, args.rounds))


if __name__ == "__main__":
    main()
