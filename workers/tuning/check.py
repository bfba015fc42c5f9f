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

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "measured_ms"}

    @property
    def met(self) -> bool:
        """Whether the measured program is at or below the until target."""
        return self.measured_ms is not None and self.measured_ms <= self.until_ms


def recalibrated(until_ms: float, estimate_ms: float, measured_ms: float) -> float:
    """The estimate's new target: ``until_ms`` scaled by the estimate / measured ratio this check found.

    The estimate must reach what, at that ratio, the program's ``until_ms`` is.
    """
    return until_ms * estimate_ms / measured_ms


def time_program(job: Job, env: Any, data: bytes, build_hold: Any = None) -> float:
    """The median ms of the exported program ``data`` on a board of the job's key (``env``: its TuningEnv).

    Timed as the measure stage times (``job.measure``'s number, min_repeat_ms and cooldown) on seeded inputs,
    ``CHECK_REPEATS`` repeats, under the host fence's timing hold; the build's own hold is let go of meanwhile.
    """
    import hashlib

    import tvm

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
            samples = time_evaluator_timer(vm, dev, job.measure, args)(CHECK_REPEATS)
        del vm, args, session
    return statistics.median(samples)


def check_program(job: Job, env: Any, export: Callable[[], bytes], build_hold: Any, **point: Any) -> Check:
    """Build (``export()``: the program's bytes) and time the program; a failure is a Check with its error.

    ``point``: the Check's trial, minutes, estimate_ms, target_ms and until_ms.
    """
    from tvmbench.core.errors import one_line

    started = time.perf_counter()
    try:
        measured: float | None = time_program(job, env, export(), build_hold)
        error = None
    except Exception as exc:  # a check that cannot run leaves the estimate's word: said, not raised
        measured, error = None, one_line(exc)
    return Check(measured_ms=measured, seconds=time.perf_counter() - started, error=error, **point)


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
) -> dict[str, Any]:
    """The search's until stop, checked on a board (see the module docstring): the stop's provenance with
    ``checks``, the search gone on from each check that the program missed.

    ``stop``: the search's ``auto``, ``stopped_by`` and ``stop``; ``search_once(env, stored_best)``: search
    again (a ``Searched``); ``measured``: trials per task, brought up to date after each search.
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
            trial=len(stats.trials_so_far()),
            minutes=(time.perf_counter() - stats.started) / 60.0,
            estimate_ms=float(values["estimate_ms"]),
            target_ms=float(values["until_ms"]),
            until_ms=until_ms,
        )
        checks.append(check)
        if check.met or check.measured_ms is None or len(checks) >= MAX_CHECKS:
            break
        target = recalibrated(until_ms, check.estimate_ms, check.measured_ms)
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
            "met": last.met,
            **({"check_error": last.error} if last.error else {}),
        }
    return {**stop, "checks": [c.as_dict() for c in checks]}
