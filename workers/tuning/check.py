"""The until rule's check build: the program the records make now, built and timed on a board of the key.

MetaSchedule's estimate (the tuning curve's) is the sum of each kernel's best time, every kernel timed
alone with its inputs hot in cache. The program runs them one after another through the VM, with copies
and the operators no task covers: when the until rule stopped light_squeezenet on the estimate, the
measured program was 17 % slower, light_shufflenet 38 %, and "at or below ONNX Runtime" held for the
estimate only. So when the estimate reaches the target, the stage builds the program as the records make
it and times it on a board (``time_program``); only a measured median at or below the target stops the
search. Otherwise the estimate's target is scaled by what this check found (``recalibrated``) and the
search goes on from the records it stored, at most ``MAX_CHECKS`` times in a build (the time and trial
rules still bound it).

The baseline's median was measured when the sweep began, often many minutes before a check; a shared
machine drifts more than that in an hour (ONNX Runtime's median on one board went 4.0 -> 6.1 ms). So when
the until rule names the baseline and the board's agent runs ONNX Runtime, the check times the baseline
again in turn with the program, repeat by repeat on the same board, and compares the two medians it
took (``Timing``): the drift is in both. The baseline's stored median stays the rule's provenance.

Pairing cancels a board that is slower for both. It does not cancel what slows ONNX Runtime alone, and
two things did (round 9): another process competing for the cores (with the test suite running beside a
benchmark, a check measured the program at 9.1 ms against ONNX Runtime's 14.0 beside it, both 4.3-7.8 ms
on the quiet board) and ONNX Runtime's slow mode (on these machines a session runs the same model at
about 4 or about 6 ms, drawn per session: a check measured 5.3 ms against its 5.6, the program was 1.1x
ONNX Runtime timed in turn afterwards). Each stopped a search minutes early. So the bar is the fastest
median of ONNX Runtime the build has seen on the board: the sweep's and each check's so far
(``Check.bar_ms``). A slow baseline can no longer stop a search; a fast one holds every later check to it.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tvmbench.core.records import Job

MAX_CHECKS = 4  # check builds per tuned build: each costs a build of the whole program and a timing
CHECK_REPEATS = 7  # timed repeats of the whole program (each of ``job.measure``'s number and min_repeat_ms)


@dataclass(frozen=True)
class Check:
    """One check build: when it ran, what the estimate said against its target, what the board measured."""

    trial: int  # trials of this build measured when it ran
    minutes: float  # tuning minutes when it ran
    estimate_ms: float
    target_ms: float  # the estimate's target it met: the until target, or recalibrated by an earlier check
    until_ms: float  # the program's target (the baseline's median or the number asked)
    measured_ms: float | None  # the program's median on the board; None when the check failed
    seconds: float  # building and timing it
    error: str | None = None
    # The baseline's median timed in turn with the program on the same board; None: not timed (a number
    # of ms asked, or a board without ONNX Runtime), and the program is held to ``until_ms``.
    baseline_ms: float | None = None
    # What the program had to be at or below: the fastest of ``until_ms`` and the baseline's medians timed
    # beside this build's checks so far, this one's included (``fastest_bar``); None: ``until_ms``.
    bar_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "measured_ms"}

    @property
    def met(self) -> bool:
        """Whether the measured program is at or below its bar."""
        bar = self.bar_ms if self.bar_ms is not None else self.until_ms
        return self.measured_ms is not None and self.measured_ms <= bar


@dataclass(frozen=True)
class Timing:
    """A check's medians: the program, and the baseline timed in turn with it (None: not timed)."""

    program_ms: float
    baseline_ms: float | None = None


def fastest_bar(until_ms: float, checks: list[Check]) -> float:
    """The bar of the newest of ``checks``: ``until_ms`` or the fastest baseline timed beside one of them."""
    return min([until_ms, *(c.baseline_ms for c in checks if c.baseline_ms is not None)])


def recalibrated(bar_ms: float, estimate_ms: float, measured_ms: float) -> float:
    """The estimate's new target: ``bar_ms`` (the check's ``Check.bar_ms``) scaled by the estimate / measured
    ratio this check found: the estimate must reach what, at that ratio, the program's bar is.
    """
    return bar_ms * estimate_ms / measured_ms


def time_program(
    job: Job, env: Any, data: bytes, build_hold: Any = None, baseline_model: bytes | None = None
) -> Timing:
    """The median ms of the exported program ``data`` on a board of the job's key (``env``: its TuningEnv).

    Timed as the measure stage times (``job.measure``'s number, min_repeat_ms and cooldown) on seeded inputs,
    ``CHECK_REPEATS`` repeats, under the host fence's timing hold; the build's own hold is let go of meanwhile.
    With ``baseline_model`` (the ONNX bytes) and an until rule naming ONNX Runtime, each repeat of the
    program is followed by one of the model under the board's ONNX Runtime (``Timing.baseline_ms``).
    """
    import hashlib

    import tvm

    from workers.executors.registry import baseline_names
    from workers.fence import Fence
    from workers.onnx_model import seeded_inputs
    from workers.sampling import time_evaluator_timer
    from workers.tracker_client import request_session
    from workers.vm_program import device, load_vm

    settings = job.tuning_settings
    if env.fence_dir:
        from workers.toolchains.tuning import FileFence

        fence: Any = FileFence(env.fence_dir)
    else:
        fence = Fence(env.fence_host)
    ranges = {n: (lo, hi) for n, lo, hi in job.model.value_ranges}
    inputs = seeded_inputs(job.model.inputs, job.measure.seed, ranges)
    paused = build_hold.paused() if build_hold is not None else contextlib.nullcontext()
    # The until rule names a baseline executor (not a number of ms): time it beside the program.
    paired = baseline_model if job.tuning_auto is not None and job.tuning_auto.until in baseline_names() else None
    with paused:
        session = request_session(
            env.tracker,
            env.board_key or job.target.board_key,
            settings.device_wait_s,
            max(120.0, settings.runner_timeout_s * 2),
            avoid=env.avoid,
        )
        with fence.timing(ttl_s=max(150.0, settings.runner_timeout_s * 2 + 30)):
            dev = device(session.remote, job)
            vm = load_vm(session.remote, data, hashlib.sha256(data).hexdigest(), dev)
            args = [tvm.runtime.tensor(inputs[n], dev) for n, _, _ in job.model.inputs]
            program = time_evaluator_timer(vm, dev, job.measure, args)
            baseline = baseline_timer(session.remote, job, paired, inputs) if paired else None
            program_ms: list[float] = []
            baseline_ms: list[float] = []
            for _ in range(CHECK_REPEATS):  # in turn, so that a drift of the board is in both
                program_ms += program(1)
                if baseline is not None:
                    baseline_ms += baseline()
        del vm, args, session, program, baseline
    return Timing(statistics.median(program_ms), statistics.median(baseline_ms) if baseline_ms else None)


def baseline_timer(remote: Any, job: Job, model: bytes, inputs: dict[str, Any]) -> Callable[[], list[float]] | None:
    """One sample of ``model`` under the board's ONNX Runtime per call (None: the board's agent has none).

    Each call opens a fresh session on the board (untimed, with its warm-up run), as the baseline job does.
    """
    import hashlib

    import tvm

    from workers.executors.onnxruntime import board_function, model_file_name, run_on_board

    run = board_function(remote)
    if run is None:  # a stock TVM RPC server: the program is held to the stored median
        return None
    name = model_file_name(hashlib.sha256(model).hexdigest())
    remote.upload(bytearray(model), name)  # bytes would be read as a path
    names = [n for n, _, _ in job.model.inputs]
    cpu = remote.cpu(0)  # ONNX Runtime reads its inputs on the board's host, whatever the program's device
    args = [tvm.runtime.tensor(inputs[n], cpu) for n in names]
    if not run_on_board(run, name, job.measure.number, 1, names, args).get("available"):
        return None

    def timer() -> list[float]:
        return [float(x) for x in run_on_board(run, name, job.measure.number, 1, names, args)["samples_ms"]]

    return timer


def check_program(
    job: Job, env: Any, export: Callable[[], bytes], build_hold: Any, baseline_model: bytes | None, **point: Any
) -> Check:
    """Build (``export()``: the program's bytes) and time the program; a failure is a Check with its error.

    ``baseline_model``: the ONNX bytes, to time the baseline beside it (see ``time_program``); ``point``: the
    Check's trial, minutes, estimate_ms, target_ms and until_ms.
    """
    from tvmbench.core.errors import one_line

    started = time.perf_counter()
    try:
        timing: Timing | None = time_program(job, env, export(), build_hold, baseline_model)
        error = None
    except Exception as exc:  # a check that cannot run leaves the estimate's word: said, not raised
        timing, error = None, one_line(exc)
    return Check(
        measured_ms=timing.program_ms if timing else None,
        baseline_ms=timing.baseline_ms if timing else None,
        seconds=time.perf_counter() - started,
        error=error,
        **point,
    )


def program_bytes(job: Job, fused: Any, db: Any, target: Any, back: Any) -> bytes:
    """The exported program that ``db``'s records make of ``fused`` now (``back``: the pipeline after tuning).

    Built in a PassContext of the job's own options without the build's instruments: the check's passes
    are not the build's, and its pass trace says only what made the program it ships.
    """
    import tvm
    from tvm import relax

    from workers.vm_program import codegen_export

    outer = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(
        opt_level=outer.opt_level,
        required_pass=list(outer.required_pass),
        disabled_pass=list(outer.disabled_pass),
        config=dict(outer.config),
    ):
        with target, db:  # the pass reads both from the context
            applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
        with target:
            lowered = back(applied)
        return codegen_export(job, lowered, target)


def until_checked(
    job: Job,
    env: Any,
    stop: dict[str, Any],
    stats: Any,
    stored_best: dict[str, float | None],
    search_once: Callable[[Any, dict[str, float | None]], Any],
    measured: dict[str, int],
    build_hold: Any,
    *,
    export: Callable[[], bytes],
    baseline_model: bytes | None = None,
) -> dict[str, Any]:
    """The search's until stop, checked on a board (see the module docstring): the stop's provenance with
    ``checks``, the search gone on from each check that the program missed.

    ``stop``: the search's ``auto``, ``stopped_by`` and ``stop``; ``search_once(env, stored_best)``: search
    again (a ``Searched``); ``measured``: trials per task, brought up to date after each search;
    ``baseline_model``: the ONNX bytes, for the baseline timed beside each check.
    """
    from dataclasses import replace

    from workers.tuning import stopping
    from workers.tuning.stats import best_times

    until_ms, _ = stopping.until_target(job.tuning_auto, env.baseline)
    if until_ms is None:
        return stop
    checks: list[Check] = []
    while True:
        values = stop["stop"]
        check = check_program(
            job,
            env,
            export,
            build_hold,
            baseline_model,
            trial=len(stats.trials_so_far()),
            minutes=(time.perf_counter() - stats.started) / 60.0,
            estimate_ms=float(values["estimate_ms"]),
            target_ms=float(values["until_ms"]),
            until_ms=until_ms,
        )
        bar = fastest_bar(until_ms, [*checks, check])
        check = replace(check, bar_ms=bar)
        checks.append(check)
        if check.met or check.measured_ms is None or len(checks) >= MAX_CHECKS:
            break
        target = recalibrated(bar, check.estimate_ms, check.measured_ms)
        searched = search_once(replace(env, estimate_target_ms=target), best_times(stats.trials_so_far(), stored_best))
        # Every search's trials are in ``stats`` (a parallel search's groups' too): counted there, once.
        counted = Counter(task for _, task, _ in stats.trials_so_far())
        for name in {*measured, *searched.measured}:
            measured[name] = counted.get(name, 0)
        # The rules as asked stay the provenance's (the baseline's target, not the recalibrated one).
        stop = {**searched.stop, "auto": stop["auto"]}
        if stop["stopped_by"] != stopping.UNTIL:
            break
    if stop["stopped_by"] == stopping.UNTIL:
        last = checks[-1]
        stop["stop"] = {
            "estimate_ms": last.estimate_ms,
            "estimate_target_ms": last.target_ms,
            "until_ms": until_ms,
            "measured_ms": last.measured_ms,
            **({"baseline_ms": last.baseline_ms, "bar_ms": last.bar_ms} if last.baseline_ms is not None else {}),
            "met": last.met,
            **({"check_error": last.error} if last.error else {}),
        }
    return {**stop, "checks": [c.as_dict() for c in checks]}
