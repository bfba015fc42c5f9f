"""A warm start against a cold one: trials to reach 1.1x of the cold search's final latency (not a test).

Two small conv nets of one shape class (workers/model_zoo.small_convnet at two sizes: the same
operators, other shapes, so no workload of one is a workload of the other). Three real sweeps through
``tvmbench sweep run`` (Ray builds, the local farm, SQLite), each of one tuned job at the same budget:

1. **cold**: the target net in a fresh database, ``[tuning] warm_start = false``;
2. **source**: the source net in another fresh database (its records are what the warm start learns from);
3. **warm**: the target net in the source's database, ``warm_start = true``: the cost model is trained on
   the source's records and the target's tasks, which have none of their own, are seeded from them.

Latency here is the tuning curve's estimate (the build's ``tuning.curve``: best-so-far sum over tasks of
calls x best kernel time measured by MetaSchedule), so both searches are judged by the same measurements;
the measured medians of the two programs are printed beside it. One run of each: a stochastic search on
a shared machine, so read the figures as one draw, and say how loaded the machine was.

    PYTHONPATH=. python benchmarks/warm_start.py --budget 64

``--model light_squeezenet`` (or light_shufflenet) measures one of the onnx package's CNNs instead: the
target is the model as shipped (224x224), the source the same model at ``--source-size`` (160 by default),
whose convolutions are of the same shape class and none of the same workload.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/warm_start.py`, as the README says
    sys.path.insert(0, str(ROOT))

from benchmarks.tuning import default_cost_model, run_sweep  # noqa: E402

SWEEP = """name = "warm-start-{run}"
[[models]]
path = "{model}"
[[targets]]
preset = "host"
[axes]
executor = ["vm-compiled"]
opt_level = [2]
pipeline = ["per-target"]
tuning = [{budget}]
[tuning]
cost_model = "{cost_model}"
num_trials_per_iter = {per_iter}
seed = {seed}
warm_start = {warm}
[measure]
number = 10
repeat = 5
session_timeout_s = 600
device_wait_s = 1800
"""


def tuned(db: str, sweep_id: str) -> dict[str, Any]:
    """The one tuned job of a sweep: its median, tuning provenance and status."""
    from db.store import ResultStore
    from tvmbench.answers import query

    store = ResultStore(db)
    try:
        (row,) = query.results(store, sweep_id)
        build = (query.job_detail(store, row["job_key"], sweep_id) or {}).get("build") or {}
        return {
            "median_ms": row["median_ms"],
            "status": row["status"],
            "error": row["error"],
            **(build.get("tuning") or {}),
        }
    finally:
        store.close()


def to_reach(curve: list[list[float]], goal_ms: float) -> tuple[int, float] | tuple[None, None]:
    """(trial, tuning seconds) of the first point whose best-so-far estimate is within ``goal_ms``."""
    return next(((int(trial), float(s)) for trial, s, ms in curve if ms <= goal_ms), (None, None))


def run(work: Path, name: str, model: Path, db: str, warm: bool, args: argparse.Namespace) -> dict[str, Any]:
    """One tuned sweep of ``model`` in ``db``; its job's figures."""
    path = work / f"{name}.toml"
    path.write_text(
        SWEEP.format(
            run=name,
            model=model,
            budget=args.budget,
            cost_model=args.cost_model,
            per_iter=args.trials_per_iter,
            seed=args.seed,
            warm="true" if warm else "false",
        )
    )
    sweep_id, wall, code = run_sweep(path, db, work / "home")
    out = tuned(db, sweep_id)
    print(f"{name}: sweep {sweep_id}, {wall:.0f} s wall, exit {code}, status {out['status']}", flush=True)
    return out


def resized(model: Any, size: int) -> Any:
    """One of the onnx package's light CNNs for a ``size`` x ``size`` input instead of 224 x 224.

    Squeezenet ends in a global pool and takes any size once its input says so; shufflenet's channel
    shuffles reshape to fixed spatial sizes (56, 28, 14, 7: the input / 4 ... / 32) and its last pool is
    7 x 7, so those follow the input too. ``size`` must be a multiple of 32.
    """
    import onnx
    from onnx import numpy_helper

    if size % 32:
        raise SystemExit(f"--source-size {size}: must be a multiple of 32 (the nets downsample 32x)")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    spatial = {224 // f: size // f for f in (4, 8, 16, 32)}
    weights = {t.name: i for i, t in enumerate(model.graph.initializer)}
    for value in model.graph.input:
        if value.name not in weights:
            dims = value.type.tensor_type.shape.dim
            dims[2].dim_value, dims[3].dim_value = size, size
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.input[1] in weights:
            shape = numpy_helper.to_array(model.graph.initializer[weights[node.input[1]]]).copy()
            if len(shape) >= 4:
                shape[-2:] = [spatial.get(int(d), int(d)) for d in shape[-2:]]
                model.graph.initializer[weights[node.input[1]]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
        if node.op_type == "AveragePool":
            for attr in node.attribute:
                if attr.name == "kernel_shape" and list(attr.ints) == [7, 7]:
                    attr.ints[:] = [size // 32] * 2
    del model.graph.value_info[:]
    onnx.checker.check_model(onnx.shape_inference.infer_shapes(model, strict_mode=True))
    return model


def _f(value: Any, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def report(cold: dict[str, Any], warm: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """Print the comparison; return it as a dict (``--json``)."""
    final = cold["curve"][-1][2] if cold.get("curve") else None
    goal = None if final is None else 1.1 * final
    rows = []
    for label, t in (("cold", cold), ("warm", warm)):
        curve = t.get("curve") or []
        trials, seconds = (None, None) if goal is None else to_reach(curve, goal)
        rows.append(
            {
                "run": label,
                "trials_to_goal": trials,
                "s_to_goal": seconds,
                "first_ms": curve[0][2] if curve else None,
                "final_ms": curve[-1][2] if curve else None,
                "median_ms": t.get("median_ms"),
                "trials_run": t.get("trials_run"),
                "tuning_s": t.get("tuning_s"),
                "tasks": {x["name"]: x["best_us"] for x in t.get("tasks") or []},
            }
        )
    print(f"\ngoal: 1.1 x the cold search's final estimate = {_f(goal)} ms (cold final {_f(final)} ms)")
    print(
        f"{'run':5} {'trials to goal':>14} {'s to goal':>9} {'first est ms':>12} {'final est ms':>12} "
        f"{'median ms':>10} {'trials':>6} {'tune s':>7}"
    )
    for r in rows:
        print(
            f"{r['run']:5} {_f(r['trials_to_goal'], 'd'):>14} {_f(r['s_to_goal'], '.0f'):>9} {_f(r['first_ms']):>12} "
            f"{_f(r['final_ms']):>12} "
            f"{_f(r['median_ms']):>10} {_f(r['trials_run'], 'd'):>6} {_f(r['tuning_s'], '.0f'):>7}"
        )
    for r in rows:
        print(f"  {r['run']} per task best µs: " + ", ".join(f"{k} {_f(v, '.1f')}" for k, v in r["tasks"].items()))
    ws = warm.get("warm_start") or {}
    source_final = (source.get("curve") or [[0, 0, None]])[-1][2]
    print(
        f"warm start: cost model trained on {ws.get('trained_on')} records of {ws.get('workloads')} workloads "
        f"in {_f(ws.get('train_s'), '.1f')} s; source net final estimate {_f(source_final)} ms"
    )
    for s in ws.get("seeded") or []:
        print(
            f"  seeded {s['task']}: {s['offered']} records offered, {s['accepted']} replays, {s['measured']} "
            f"measured in the first batch, best seed {_f(s['best_seed_us'], '.1f')} µs vs the search's own "
            f"{_f(s['best_other_us'], '.1f')} µs"
        )
    cold_n, warm_n = rows[0]["trials_to_goal"], rows[1]["trials_to_goal"]
    if cold_n and warm_n:
        print(f"warm / cold trials to the goal: {warm_n} / {cold_n} = {warm_n / cold_n:.2f} (aim: at most 0.5)")
    return {"goal_ms": goal, "rows": rows, "warm_start": ws}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=64, help="trials per tuned job")
    parser.add_argument("--source", default="64x16", help="the source net: SIZExCHANNELS")
    parser.add_argument("--target", default="56x24", help="the target net: SIZExCHANNELS (same shape class)")
    parser.add_argument("--model", default="small_convnet", help="small_convnet, light_squeezenet or light_shufflenet")
    parser.add_argument("--source-size", type=int, default=160, help="a light model's source input size")
    parser.add_argument("--cost-model", default=None, help="xgb (default when installed), random or mlp")
    parser.add_argument("--trials-per-iter", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON too")
    args = parser.parse_args()
    args.cost_model = args.cost_model or default_cost_model()

    import onnx

    from workers import model_zoo
    from workers.onnx_model import bundled_path

    work = Path(tempfile.mkdtemp(prefix="tvmbench-warm-bench-"))
    models = {}
    if args.model.startswith("light_"):
        shipped = onnx.load(bundled_path(args.model))
        models["target"] = work / f"{args.model}_224.onnx"
        models["source"] = work / f"{args.model}_{args.source_size}.onnx"
        onnx.save(shipped, models["target"])
        onnx.save(resized(shipped, args.source_size), models["source"])
    else:
        for role, shape in (("source", args.source), ("target", args.target)):
            size, channels = (int(x) for x in shape.lower().split("x"))
            models[role] = work / f"convnet_{size}x{channels}.onnx"
            onnx.save(model_zoo.small_convnet(size=size, channels=channels), models[role])
    print(f"{work}: budget {args.budget}, cost model {args.cost_model}, {os.cpu_count()} cores, load {os.getloadavg()}")
    cold = run(work, "cold", models["target"], f"sqlite:///{work / 'cold.db'}", False, args)
    warm_db = f"sqlite:///{work / 'warm.db'}"
    source = run(work, "source", models["source"], warm_db, False, args)
    warm = run(work, "warm", models["target"], warm_db, True, args)
    print(f"load after: {os.getloadavg()}")
    result = report(cold, warm, source)
    if args.json:
        print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
