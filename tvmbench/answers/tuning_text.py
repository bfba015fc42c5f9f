"""A build's tuning provenance in words: the `results show` lines, the auto budget's rules and what stopped
it (its check builds included), the warm start and a parallel search.

Reads only the provenance dicts (workers/tuning/stage.py says what they hold); the tuned-against-untuned
answers and the curve are in tvmbench/answers/tuning.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def tuning_lines(tuning: dict[str, Any]) -> list[str]:
    """A build's tuning provenance in a few lines of text (`results show`)."""
    failed = tuning.get("failed_trials") or {}
    failed_text = ", ".join(f"{k} {v}" for k, v in sorted(failed.items())) if failed else "none"
    split = [
        (label, tuning.get(key))
        for label, key in (("building", "build_s"), ("waiting for boards", "board_wait_s"), ("measuring", "run_s"))
    ]
    split_text = ", ".join(f"{label} {_s(v)}" for label, v in split if v is not None)
    auto = tuning.get("auto")
    budget = f"auto ({auto_rules_text(auto)})" if isinstance(auto, dict) else f"{tuning.get('budget')} trials"
    lines = [
        f"  tuning: budget {budget}, {tuning.get('trials_run')} run, "
        f"{tuning.get('trials_from_records')} covered by stored records; failed trials: {failed_text}",
        f"    tuning time {_s(tuning.get('tuning_s'))}"
        + (f" ({split_text})" if split_text else "")
        + f"; cost model {tuning.get('cost_model')}, seed {tuning.get('seed')}, records in {tuning.get('database')}",
    ]
    stop = stop_text(tuning)
    if stop:
        lines.append(f"    stopped by {stop}")
    for line in (
        candidates_line(tuning),
        checks_line(tuning.get("checks")),
        warm_start_line(tuning.get("warm_start")),
        search_line(tuning.get("search")),
    ):
        if line:
            lines.append(line)
    for message in (tuning.get("errors") or [])[:5]:
        lines.append(f"    failed trial: {message}")
    return lines


def candidates_line(tuning: dict[str, Any]) -> str | None:
    """What building the candidates cost, apart from the batch waits: compile and fence seconds each.

    None for builds stored before these were recorded (or with no candidate built)."""
    built = tuning.get("candidates_built")
    if not built:
        return None
    compile_s, fence_s = tuning.get("candidate_compile_s") or 0.0, tuning.get("candidate_fence_s") or 0.0
    return (
        f"    candidates: {built} built, compiling {compile_s / built:.2f} s each and waiting for the host "
        f"fence {fence_s / built:.2f} s each (summed over CPUs: {compile_s + fence_s:.1f} s)"
    )


def auto_rules_text(auto: dict[str, Any]) -> str:
    """An auto budget's rules in words: "until onnxruntime 0.146 ms, 15 min, plateau 64 trials < 2 %, 2000 trials"."""
    parts = []
    until = auto.get("until")
    if until is not None:
        target = auto.get("until_ms")
        if isinstance(until, str) and target is not None:
            parts.append(f"until {until} {target:.4g} ms ({(auto.get('baseline') or {}).get('source', '?')})")
        elif target is not None:
            parts.append(f"until {target:.4g} ms")
        else:
            parts.append(f"until {until}: inactive, {auto.get('inactive', 'no baseline')}")
    parts.append(f"at most {auto.get('max_minutes'):g} min")
    plateau = auto.get("plateau")
    if plateau:
        parts.append(f"plateau: {plateau['trials']} trials gaining < {100 * plateau['gain']:.3g} %")
    parts.append(f"at most {auto.get('max_trials')} trials")
    return ", ".join(parts)


def _until_text(v: dict[str, Any], checks: int) -> str:
    """The until stop: the kernel estimate against its target, and what the check builds measured."""
    estimate = f"kernel estimate {v.get('estimate_ms', 0):.4g} ms"
    if not checks:  # a build from before check builds, or an until rule that was inactive
        return f"{estimate} at or below {v.get('until_ms', 0):.4g} ms"
    builds = f"{checks} check build{'s' if checks != 1 else ''}"
    target = v.get("estimate_target_ms", v.get("until_ms", 0))
    if v.get("measured_ms") is None:
        return f"{estimate} at or below {target:.4g} ms; the check build failed ({v.get('check_error', '?')})"
    measured = f"measured {v['measured_ms']:.4g} ms"
    until = f"{v.get('until_ms', 0):.4g} ms"
    if v.get("baseline_ms") is not None:  # the baseline timed again beside the program: its bar, or a faster one
        beside = f"ONNX Runtime's {v['baseline_ms']:.4g} ms timed beside it"
        bar = v.get("bar_ms", v["baseline_ms"])
        if bar < v["baseline_ms"]:  # ONNX Runtime ran faster before (in the sweep or beside an earlier check)
            beside = f"ONNX Runtime's fastest median on the board, {bar:.4g} ms ({v['baseline_ms']:.4g} beside it)"
        if v.get("met"):
            return f"{measured} at or below {beside} ({estimate}, {builds}; the sweep's baseline {until})"
        return f"{estimate} at or below {target:.4g} ms, but {measured}, above {beside} after {builds}"
    if v.get("met"):
        return f"{measured} at or below {until} ({estimate}, {builds})"
    return f"{estimate} at or below {target:.4g} ms, but {measured}, above {until} after {builds}"


def checks_line(checks: list[dict[str, Any]] | None) -> str | None:
    """The until rule's check builds, one clause each: when, the estimate and what the board measured."""
    if not checks:
        return None
    parts = []
    for c in checks:
        measured, beside = c.get("measured_ms"), c.get("baseline_ms")
        bar = c.get("bar_ms", beside if beside is not None else c.get("until_ms", 0))
        if beside is None:
            whose = ""
        elif bar < beside:
            whose = f" (ONNX Runtime's fastest on the board; {beside:.4g} beside it)"
        else:
            whose = " (ONNX Runtime beside it)"
        said = (
            f"failed ({c.get('error', '?')})"
            if measured is None
            else f"measured {measured:.4g} ms {'<=' if measured <= bar else '>'} {bar:.4g}{whose}"
        )
        parts.append(
            f"trial {c.get('trial')} ({c.get('minutes', 0):.1f} min): estimate {c.get('estimate_ms', 0):.4g} ms, {said}"
        )
    return "    check builds (the program timed on a board): " + "; ".join(parts)


def stop_text(tuning: dict[str, Any]) -> str | None:
    """What stopped an auto build and the values its rule compared (None: a fixed budget)."""
    rule = tuning.get("stopped_by")
    if not rule:
        return None
    v = tuning.get("stop") or {}
    if rule == "until":
        text = _until_text(v, len(tuning.get("checks") or []))
    elif rule == "plateau":
        text = (
            f"the last {v.get('trials')} trials gained {100 * v.get('gained', 0):.3g} % "
            f"({v.get('from_ms', 0):.4g} -> {v.get('to_ms', 0):.4g} ms), under {100 * v.get('gain', 0):.3g} %"
        )
    elif rule == "max_minutes":
        text = f"{v.get('minutes', 0):.2f} min of tuning, at most {v.get('max_minutes', 0):g}"
    elif rule in ("max_trials", "exhausted"):
        text = f"{v.get('trials')} trials, at most {v.get('max_trials')}"
        if rule == "exhausted":
            text += "; every task reached its own cap or ran out of candidates"
    else:
        text = str(v.get("error", ""))
    if v.get("group") is not None:
        text += f"; met in search group {int(v['group']) + 1}, which ended every group's search"
    if v.get("tuned_by"):
        text += f"; by build {str(v['tuned_by'])[:12]} of the same workloads and rules, whose records it applied"
    return f"{rule}: {text}"


def warm_start_line(warm: dict[str, Any] | None) -> str | None:
    """The warm start of a build's tuning in one line; None for builds tuned before it was recorded."""
    if not warm:
        return None
    if not warm.get("enabled"):
        return "    warm start: off ([tuning] warm_start = false)"
    seeded = warm.get("seeded") or []
    text = (
        f"    warm start: cost model trained on {warm.get('trained_on', 0)} stored records of "
        f"{warm.get('workloads', 0)} workloads ({_s(warm.get('train_s'))}); "
    )
    if seeded:
        total = {k: sum(int(s.get(k) or 0) for s in seeded) for k in ("offered", "accepted", "measured")}
        text += (
            f"{len(seeded)} tasks seeded from similar workloads: {total['offered']} records offered, "
            f"{total['accepted']} replays accepted, {total['measured']} measured"
        )
        ranked = sum(1 for s in seeded if s.get("ranked"))
        if ranked:
            text += f", chosen by the cost model in {ranked} task{'s' if ranked > 1 else ''}"
    else:
        text += "no task seeded"
    return text + (f" ({warm['note']})" if warm.get("note") else "")


def search_line(search: dict[str, Any] | None) -> str | None:
    """How many Ray workers searched the tasks (``[tuning] search_workers``); None when one was asked."""
    if not search:
        return None
    if search.get("workers", 1) <= 1:
        return f"    searched by 1 worker, {search.get('asked')} asked: {search.get('why', '?')}"
    groups = []
    for n, group in enumerate(search.get("groups") or [], start=1):
        tasks = len(group.get("tasks") or [])
        if group.get("error"):
            groups.append(f"{n}: {tasks} tasks, failed ({group['error']})")
            continue
        stopped = f", stopped by {group['stopped_by']}" if group.get("stopped_by") else ""
        groups.append(f"{n}: {tasks} tasks, {group.get('trials')} trials in {_s(group.get('tuning_s'))}{stopped}")
    nodes = search.get("nodes", 1)
    where = f"{nodes} node" + ("s" if nodes != 1 else "")
    return f"    searched by {search['workers']} workers on {where}; groups " + "; ".join(groups)


def print_tuning(console: Console, tuning: dict[str, Any] | None) -> None:
    """The tuning part of `results show`: the summary lines and the per-task table."""
    from tvmbench.answers import columns, table

    if not tuning:
        return
    for line in tuning_lines(tuning):
        console.print(line, highlight=False, soft_wrap=not console.is_terminal)
    tasks = tuning.get("tasks") or []
    if tasks:
        table.render(console, columns.TUNED_TASKS, tasks, "tuned tasks")


def _s(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f} s"
