"""Which TVM release is fastest here: the same models and build configurations under each release.

Measured on this machine (2 cores, shared with other sessions; x86_64 host board; the light models bundled
with onnx 1.23.2) on 2026-12-02 with ``--o3-only light_resnet50 --per-release --again`` (the second pass
run as ``--again-only``): number 3, repeat 10 (ResNet: number 1, repeat 10), one sweep per release in the
order 0.27.0.post1, 0.26.0, 0.25.0.post1, then the light models again in the reverse order into a second
database. Toolchains were provisioned by ``toolchains add`` in 13 s
(0.26.0) and 12 s (0.25.0.post1), fast because pip had their wheels cached from earlier provisioning on
this machine (the installed 0.27.0.post1 needs none); pass 1 took 819 s of wall time, pass 2 501 s.
Medians in ms with their 95 % bootstrap CIs; x0.27: ratio to 0.27.0.post1; load: median 1-minute load
average when that release's runs started.

    model / config            0.25.0.post1            0.26.0                   0.27.0.post1          pass 2 (reversed)
                              ms [95% CI]       x0.27 ms [95% CI]        x0.27 ms [95% CI]          x0.27: .25 / .26
    squeezenet bytecode O0    model (no Dropout)      283.0 [275.4, 335.5] 1.09  259.3 [258.5, 261.4]    - / 2.01
    squeezenet bytecode O3    model (no Dropout)      274.0 [254.9, 281.5] 1.04  263.1 [259.9, 272.4]    - / 2.53
    squeezenet compiled O0    model (no Dropout)      294.8 [288.4, 299.7] 1.13  261.6 [258.5, 267.3]    - / 2.53
    squeezenet compiled O3    model (no Dropout)      297.9 [289.1, 309.8] 1.18  253.5 [251.2, 254.7]    - / 2.81
    shufflenet bytecode O0    62.11 [57.0, 67.7] 1.15 57.67 [54.0, 59.9]  1.07  54.12 [53.3, 58.1]   1.12 / 3.04
    shufflenet bytecode O3    66.45 [60.8, 71.5] 1.17 57.85 [55.1, 68.6]  1.02  56.73 [54.3, 62.6]   1.01 / 2.64
    shufflenet compiled O0    55.81 [53.3, 61.0] 1.11 54.22 [52.8, 61.0]  1.08  50.09 [49.3, 52.3]   1.24 / 1.34
    shufflenet compiled O3    61.31 [57.4, 78.0] 1.15 57.41 [53.5, 65.9]  1.08  53.09 [51.9, 58.7]   1.21 / 1.58
    resnet50 bytecode O3      4472 [4347, 4613]  1.05 4419 [4080, 5345]   1.04  4263 [4043, 4626]       (not run)
    resnet50 compiled O3      4520 [4443, 4617]  1.00 5154 [4299, 6127]   1.14  4539 [4366, 4928]       (not run)
    load, pass 1 / pass 2     7.8 / 6.2               5.0 / 18.9                2.9 / 10.4

Kernel counts are equal across releases in every configuration (squeezenet 76 at O0 / 30 at O3,
shufflenet 75 / 43, resnet50 49 at O3) and so is the pass trace: 3155 (O0) / 3159 (O3) / 3336 (resnet
O3) pass runs in the same order, the only difference being 106 of the 159 ``StmtSimplify`` runs named
``s_tir.StmtSimplify`` in 0.27 instead of ``tirx.StmtSimplify``. The fingerprints differ (the TIR each
release emits is not byte-equal). Compile seconds (all four builds of a model, pass 1): resnet50 66.8 /
50.4 / 32.7, shufflenet 59.0 / 66.0 / 34.7, squeezenet - / 37.8 / 23.5 for 0.25 / 0.26 / 0.27.

What this says:
- TVM 0.25.0.post1 cannot import light_squeezenet: every build ends ``model`` with "ONNX import failed:
  OpNotImplemented: The following operators are not supported for frontend ONNX: Dropout" (0.25's
  relax/frontend/onnx has no Dropout converter; 0.26.0 added one). `results releases` reports 0.26.0 as
  "fixed" for those four configurations.
- `results releases` calls 0.26.0 -> 0.27.0.post1 a significant improvement on squeezenet (3 of 4
  configurations, 0.85x-0.92x, p < 0.001) and on shufflenet vm-compiled O0 (0.92x), and nothing a
  regression; no step is over 15 % with a significant verdict. But these steps are the machine's load,
  not the release: the pass trace and the kernel count are identical, 0.26.0 was measured at load 5.0
  against 0.27's 2.9, and in the reverse-order pass (0.26.0 at load 18.9) its "slow-down" grew to
  1.3-3x. Measured back to back at the same load with per-kernel profiles (squeezenet vm-bytecode O3),
  0.26.0 and 0.27.0.post1 are equal: 336.4 vs 331.5 ms median, kernel sums 347.3 vs 342.8 ms over the
  same 35 kernel names, kernel by kernel within about 13 % either way (the largest, a conv2d+add+relu
  at ~100 ms a run, 97.4 vs 101.8 ms) except one small kernel (9.5 vs 4.8 ms). The verdict's test
  compares samples within one run; it cannot see load that differs between sweeps.
- What holds in both orders: 0.27.0.post1 is never slower than an older release here, and 0.25.0.post1 is
  1.01x-1.24x slower on shufflenet in both passes (pass 2 at a lower load than 0.27's): a few percent
  up to about 15 % is plausible, not proven, on this shared machine. ResNet-50 is the same within its
  wide CIs (4.3-5.2 s per inference untuned). 0.27 compiled about 1.5-2x faster than 0.26 and 0.25
  (also at a lower load, so by how much is not settled).
- These figures were taken with one sweep per release (now ``--per-release``) and a reverse-order
  pass (now ``--again``), because at the time the farm fenced each board key on its own: one sweep
  over the three releases timed their three host boards at once on the same two cores (the runs of a
  --quick run started within a millisecond of each other). Since main's aff9968 every key on this
  machine's cores shares one measurement slot and the keys take turns, so the default is now one sweep
  over every release: a --quick run of it timed host, host-tvm0.26.0, host-tvm0.25.0.post1, host, ...
  in turn, 0 of 12 runs overlapping, each release at the same median load (4.00). That removes the
  load drift that made the verdicts above; the full matrix has not been measured that way yet (about
  14 minutes here).

ResNet-50 ran at opt_level 3 only to keep the run short; an estimate sweep (number 1, repeat 3, load ~5)
timed it at 8.5 s per inference at O0 vm-bytecode, so its O0 jobs would add roughly 8-10 minutes.

It runs everything real, through the CLI a user would type: ``tvmbench toolchains add`` for each release
that ``TVMBENCH_HOME`` lacks (timed: that is the provisioning a first run pays), then ``tvmbench sweep run``
of one sweep over every release (Ray builds in a child process under each release's toolchain, the
embedded local farm with a host board per release taking turns on the cores, a fresh SQLite database;
the ``--o3-only`` models in a second sweep), then ``tvmbench results releases`` (table
printed, JSON written to the workdir) and a short list of where a release is much slower or faster than
the release before it. ``--per-release`` runs one sweep per release instead, and ``--again`` then builds
and measures the ``--opt-levels`` sweeps again in the reverse release order and prints both passes.

    PYTHONPATH=. nice -n 5 python benchmarks/releases.py [--quick] [--workdir DIR] [--home DIR]

``--quick`` builds two tiny models from examples/models at one opt_level, to smoke-test the path in a few
minutes. ``--o3-only`` names models measured at opt_level 3 only (they go into a second sweep file, as an
axis is a product over every model). ``--arm64`` adds the emulated aarch64 board as a second target
(off by default: emulated timings prove the path, not the speed, and cost minutes per job).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TVMBENCH = str(Path(sys.executable).with_name("tvmbench"))
RELEASES = ("0.27.0.post1", "0.26.0", "0.25.0.post1")
MODELS = ("light_squeezenet", "light_shufflenet", "light_resnet50")
QUICK_MODELS = ("tiny_cnn", "conv_gemm_32")
MUCH = 0.15  # a step this large with a significant verdict is listed in the summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/tvmbench-releases-bench"))
    p.add_argument("--home", type=Path, help="an existing TVMBENCH_HOME to reuse (default: WORKDIR/home)")
    p.add_argument("--models", help=f"comma-separated (default: {','.join(MODELS)})")
    p.add_argument("--releases", default=",".join(RELEASES), help="comma-separated TVM releases")
    p.add_argument("--opt-levels", default="0,3", help="comma-separated opt_levels (default: 0,3)")
    p.add_argument("--o3-only", default="", help="models measured at opt_level 3 only (comma-separated)")
    p.add_argument("--number", type=int, default=3)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--o3-number", type=int, default=1, help="number of the --o3-only models (default 1)")
    p.add_argument("--o3-repeat", type=int, default=10, help="repeat of the --o3-only models (default 10)")
    p.add_argument(
        "--per-release", dest="together", action="store_false", help="one sweep per release, one after another"
    )
    p.add_argument("--again", action="store_true", help="then measure again in the reverse release order")
    p.add_argument("--again-only", action="store_true", help="only the reverse-order pass (after a full run)")
    p.add_argument("--arm64", action="store_true", help="also the emulated aarch64 board (arm64-emu)")
    p.add_argument("--quick", action="store_true", help="tiny models from examples/models, opt_level 3 only")
    args = p.parse_args(argv)
    if args.quick:
        args.models = args.models or ",".join(QUICK_MODELS)
        args.opt_levels = "3"
    args.models = [m for m in (args.models or ",".join(MODELS)).split(",") if m]
    args.releases = [r for r in args.releases.split(",") if r]
    args.o3_only = [m for m in args.o3_only.split(",") if m]
    try:
        args.opt_levels = [int(x) for x in args.opt_levels.split(",") if x]
    except ValueError:
        p.error(f"--opt-levels {args.opt_levels!r}: give comma-separated integers, as 0,3")
    unknown = [m for m in args.o3_only if m not in args.models]
    if unknown:
        p.error(f"--o3-only {','.join(unknown)}: not among --models {','.join(args.models)}")
    if (args.again or args.again_only) and args.together:
        p.error("--again measures per-release sweeps again in the reverse order: give --per-release too")
    if not args.releases or not args.models:
        p.error("give at least one model and one release")
    return args


def model_line(name: str) -> str:
    """A model of examples/models by its path (absolute: the sweep file lives in the workdir), else one
    bundled with the onnx package by name."""
    local = REPO / "examples" / "models" / f"{name}.onnx"
    return f'path = "{local}"' if local.is_file() else f'onnx = "{name}"'


def sweep_toml(
    name: str, models: list[str], releases: list[str], opt_levels: list[int], number: int, repeat: int, arm64: bool
) -> str:
    """One sweep: ``models`` x ``releases`` x ``opt_levels`` x both VM executors, on host (and arm64-emu)."""
    lines = [f'name = "{name}"', ""]
    for model in models:
        lines += ["[[models]]", model_line(model), ""]
    lines += ["[[targets]]", 'preset = "host"', ""]
    if arm64:
        lines += ["[[targets]]", 'preset = "arm64-emu"', ""]
    lines += [
        "[axes]",
        f"tvm = [{', '.join(json.dumps(r) for r in releases)}]",
        'executor = ["vm-bytecode", "vm-compiled"]',
        f"opt_level = [{', '.join(str(o) for o in opt_levels)}]",
        "",
        "[measure]",
        f"number = {number}",
        f"repeat = {repeat}",
        "session_timeout_s = 900",
        "device_wait_s = 2400",
    ]
    return "\n".join(lines) + "\n"


def write_sweeps(args: argparse.Namespace) -> list[Path]:
    """The sweep files under the workdir: every model at ``--opt-levels``, the ``--o3-only`` ones at 3 (with
    their own ``--o3-number``/``--o3-repeat``). One file for every release: the farm's host boards of
    the releases share one measurement slot and take turns, so load drift falls on every release alike;
    with ``--per-release`` one file per release (run one after another: no overlap, but drift between)."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    full = [m for m in args.models if m not in args.o3_only]
    groups = [
        ("releases-benchmark", full, args.opt_levels, args.number, args.repeat),
        ("releases-benchmark-o3", args.o3_only, [3], args.o3_number, args.o3_repeat),
    ]
    batches = [args.releases] if args.together else [[r] for r in args.releases]
    out = []
    for name, models, levels, number, repeat in groups:
        if not models:
            continue
        for releases in batches:
            stem = name if args.together else f"{name}-{releases[0]}"
            path = args.workdir / f"{stem}.toml"
            path.write_text(sweep_toml(stem, models, releases, levels, number, repeat, args.arm64))
            out.append(path)
    return out


def tvmbench(args: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([TVMBENCH, *args], env=env, capture_output=True, text=True)
    if check and proc.returncode not in (0, 1):  # 1: some job failed or a release regressed: still figures
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"tvmbench {' '.join(args)} failed (exit {proc.returncode}); its output is above")
    return proc


def provision(releases: list[str], env: dict[str, str]) -> dict[str, float | None]:
    """``toolchains add`` for each release the home lacks; seconds each (None: there already)."""
    listed = json.loads(tvmbench(["toolchains", "list", "--json"], env).stdout)
    have = {t["tvm_version"] for t in listed} | {t["spec"] for t in listed}
    took: dict[str, float | None] = {}
    for release in releases:
        if release in have:
            took[release] = None
            continue
        start = time.perf_counter()
        proc = tvmbench(["toolchains", "add", release], env, check=False)
        took[release] = time.perf_counter() - start
        if proc.returncode:
            sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
            raise SystemExit(f"tvmbench toolchains add {release} failed (exit {proc.returncode})")
        print(f"provisioned TVM {release} in {took[release]:.0f} s", flush=True)
    return took


def run_sweep(path: Path, db: str, env: dict[str, str]) -> tuple[str, float, int, dict[str, Any]]:
    """``tvmbench sweep run --json``: the sweep id, wall seconds, exit status and the JSON it printed."""
    start = time.perf_counter()
    cmd = [TVMBENCH, "sweep", "run", str(path), "--db", db, "--json"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    try:
        out = json.loads(proc.stdout)
        sweep_id = out["sweep_id"]
    except (json.JSONDecodeError, KeyError):
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"sweep run {path} failed (exit {proc.returncode}); its output is above") from None
    return sweep_id, wall, proc.returncode, out


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.0f}%"


def much_different(rows: list[dict[str, Any]], alpha: float = 0.05) -> list[dict[str, Any]]:
    """Rows whose step against the release before is over ``MUCH`` and significant (p < alpha, CI off 1)."""
    out = []
    for r in rows:
        ratio, p, lo, hi = r.get("ratio"), r.get("p_value"), r.get("ratio_lo"), r.get("ratio_hi")
        if ratio is None or p is None or (isinstance(p, float) and math.isnan(p)):
            continue
        outside = lo is not None and hi is not None and (lo > 1 or hi < 1)
        if abs(ratio - 1) > MUCH and p < alpha and outside:
            out.append(r)
    return out


def print_summary(doc: dict[str, Any]) -> None:
    rows = doc["rows"]
    failed = [r for r in rows if r["status"] != "ok"]
    steps = much_different(rows)
    print(f"\nmuch slower or faster (> {MUCH * 100:.0f}% and significant) against the release before:")
    for r in steps:
        word = "slower" if r["ratio"] > 1 else "faster"
        print(
            f"  {r['model']} {r['config']}: TVM {r['release']} {_pct(r['ratio'])} ({word}) than {r['previous']} "
            f"[{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}] p {r['p_value']:.2g}; kernels {r['kernels_change']}; "
            f"passes {r['passes']}"
        )
    if not steps:
        print("  none")
    for r in failed:
        print(f"  NOT OK: {r['model']} {r['config']} TVM {r['release']}: {r['status']} ({r['job_key']})")
    print(
        "\nper configuration, release medians (ms) and ratio to the newest:\n"
        + "\n".join(
            f"  {r['model']:18} {r['config']:28} {r['release']:13} "
            + ("-" if r["median"] is None else f"{r['median']:9.3f} [{r['median_lo']:.3f}, {r['median_hi']:.3f}]")
            + f"  x{'-' if r['ratio_to_newest'] is None else format(r['ratio_to_newest'], '.3f')}"
            for r in rows
        )
    )


def print_build_seconds(results: list[dict[str, Any]]) -> None:
    """Compile seconds per release and model (each build ran once, in its release's child process)."""
    by: dict[tuple[str, str], float] = {}
    for r in results:
        if r.get("compile_s") is not None:
            key = (r["model"], r.get("tvm_version") or "?")
            by[key] = by.get(key, 0.0) + float(r["compile_s"])
    print("\ncompile seconds per model and release (every executor and opt_level together):")
    for (model, release), seconds in sorted(by.items()):
        print(f"  {model:18} {release:13} {seconds:7.1f} s")


def print_run_load(db_path: Path) -> None:
    """The 1-minute load average each board saw when its measurements started (the runs record it), and
    how many runs overlapped a run of another board (0 when each release had its own sweep)."""
    import sqlite3

    with sqlite3.connect(db_path) as con:
        runs = con.execute("SELECT board_id, load_avg_1m, started_at, finished_at FROM runs").fetchall()
    by: dict[str, list[float]] = {}
    for board, load, _, _ in runs:
        if load is not None:
            by.setdefault((board or "?").split("@")[0], []).append(load)
    overlapping = sum(
        1
        for b, _, s, f in runs
        if s and f and any(b2 != b and s2 and f2 and s2 < f and s < f2 for b2, _, s2, f2 in runs)
    )
    print("\nload average (1 min) at the start of each run, per board key: median [min, max]")
    for board, loads in sorted(by.items()):
        loads.sort()
        print(f"  {board:24} {loads[len(loads) // 2]:5.2f} [{loads[0]:.2f}, {loads[-1]:.2f}] over {len(loads)} runs")
    print(f"  runs overlapping a run on another board: {overlapping} of {len(runs)}")


def run_sweeps(paths: list[Path], db: str, env: dict[str, str]) -> list[dict[str, Any]]:
    """Each sweep file through ``tvmbench sweep run``, in order; every result row they printed."""
    results: list[dict[str, Any]] = []
    for path in paths:
        sweep_id, wall, rc, out = run_sweep(path, db, env)
        counts = out.get("outcome") or {}
        print(
            f"sweep {path.name} ({sweep_id}): {wall:.0f} s, exit {rc}; {counts.get('jobs')} jobs, "
            f"{counts.get('built')} built, statuses {counts.get('statuses')}",
            flush=True,
        )
        results += out.get("results") or []
    return results


def again(args: argparse.Namespace, paths: list[Path], env: dict[str, str]) -> None:
    """Build and measure the ``--opt-levels`` sweeps once more, releases in the reverse order, into a second
    database (which has no builds to reuse: they are built again), and print both passes' medians side by
    side. The machine's load drifts while releases are measured one after another: a release that is
    faster in both orders is faster, one that only wins the quieter slot is not. (Not the ``--o3-only``
    models: seconds per inference.)"""
    o3 = {p for p in paths if p.name.startswith("releases-benchmark-o3")}
    db_path = args.workdir / "results-again.db"
    db_path.unlink(missing_ok=True)
    print("\nagain, releases in the reverse order, into a second database:", flush=True)
    run_sweeps([p for p in reversed(paths) if p not in o3], f"sqlite:///{db_path}", env)
    first, second = (
        json.loads(tvmbench(["results", "list", "--db", f"sqlite:///{path}", "--json"], env).stdout)
        for path in (args.workdir / "results.db", db_path)
    )
    print_passes(first, second)
    print_run_load(db_path)


def _by_config(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], float]:
    return {
        (r["model"], r["executor"], r["opt_level"], r.get("tvm_version") or "?"): r["median_ms"]
        for r in rows
        if r.get("status") == "ok" and r.get("median_ms") is not None
    }


def print_passes(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    """Median ms per configuration and release in both passes, each as a ratio to the newest release too."""
    a, b = _by_config(first), _by_config(second)
    head = ["model".ljust(18), "executor".ljust(12), "O", "release".ljust(13)]
    print("\n  " + " ".join([*head, "pass 1 ms".rjust(10), "x newest", "pass 2 ms".rjust(10), "x newest"]))
    configs = sorted({k[:3] for k in b})
    for config in configs:
        releases = sorted({k[3] for k in b if k[:3] == config} | {k[3] for k in a if k[:3] == config}, key=_vkey)
        newest = releases[-1]
        for release in releases:
            key = (*config, release)
            cells = []
            for d in (a, b):
                base = d.get((*config, newest))
                cells.append(_f(d.get(key), "10.3f"))
                cells.append(_f(d[key] / base if key in d and base else None, "8.3f"))
            print(f"  {config[0]:18} {config[1]:12} {config[2]:>1} {release:13} " + " ".join(cells))


def _vkey(version: str) -> tuple[Any, ...]:
    from tvmbench.answers.releases import version_key

    return version_key(version)


def _f(value: float | None, spec: str) -> str:
    """``value`` in ``spec`` ("10.3f"), or "-" right-aligned to the same width."""
    return "-".rjust(int(spec.split(".")[0])) if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    home = args.home or args.workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    db_path = args.workdir / "results.db"
    if not args.again_only:
        db_path.unlink(missing_ok=True)  # a fresh database: every figure below is measured by this run
    db = f"sqlite:///{db_path}"
    env = {**os.environ, "TVMBENCH_HOME": str(home)}
    env.pop("TVMBENCH_DB", None)
    env.pop("TVMBENCH_TRACKER", None)  # the embedded farm: a host board per release, started by sweep run
    load = os.getloadavg()
    print(f"TVMBENCH_HOME {home}; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    start = time.perf_counter()
    took = provision(args.releases, env)
    provision_s = time.perf_counter() - start
    print(
        "provisioning: "
        + ", ".join(f"{r} {'present' if s is None else f'{s:.0f} s'}" for r, s in took.items())
        + f" ({provision_s:.0f} s in all)",
        flush=True,
    )
    paths = write_sweeps(args)
    if args.again_only:  # the first pass is in WORKDIR/results.db already (an earlier run of the same options)
        again(args, paths, env)
        return
    results = run_sweeps(paths, db, env)
    table = tvmbench(["results", "releases", "--db", db, "--wide"], env)
    print("\n" + table.stdout.rstrip())
    doc = json.loads(tvmbench(["results", "releases", "--db", db, "--json"], env).stdout)
    (args.workdir / "releases.json").write_text(json.dumps(doc, indent=2) + "\n")
    print_summary(doc)
    print_build_seconds(results)
    print_run_load(db_path)
    if args.again:
        again(args, paths, env)
    load = os.getloadavg()
    print(
        f"\nsettings: number {args.number}, repeat {args.repeat} (--o3-only models: number {args.o3_number}, "
        f"repeat {args.o3_repeat}); wall {time.perf_counter() - start:.0f} s; "
        f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; JSON: {args.workdir / 'releases.json'}"
    )


if __name__ == "__main__":
    main()
