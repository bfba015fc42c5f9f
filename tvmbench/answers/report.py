"""Terminal tables for the CLI (rich). Pure formatting: the data comes from db.store."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.text import Text

from tvmbench.answers import columns
from tvmbench.answers.table import Rendered, render, short_id
from workers.executors.registry import static_memory_names

_STATUS_STYLE = {"ok": "green", "pending": "yellow", "pending-device": "yellow"}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def simple_table(
    console: Console, rows: list[dict[str, Any]], title: str, cols: list[columns.Column] | None = None
) -> Rendered | None:
    """Rows as a table: ``cols`` declared in answers.columns, else one column per key of the first row."""
    if not rows:
        console.print(f"{title}: nothing to show")
        return None
    return render(console, cols or columns.generic(list(rows[0]), rows), rows, title)


def plan_table(console: Console, sweep_id: str, rows: list[dict[str, Any]]) -> None:
    tuned = any(r.get("tuning") for r in rows)
    releases = any(r.get("toolchain") for r in rows)
    layouts = any(r.get("layout") for r in rows)
    title = f"sweep {short_id(sweep_id)}: {len(rows)} jobs"
    shown = render(console, columns.plan(tuned, releases, layouts), rows, title)
    # Jobs with the same plan (the VM modes of a program, opt_levels that lower alike) share one table.
    same_plan: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("tuning_plan"):
            plan = json.dumps(r["tuning_plan"], sort_keys=True, default=str)
            same_plan.setdefault((r["model"], r["board_key"], plan), []).append(r)
    for group in same_plan.values():
        tuning_plan_table(console, group, shown)
    to_build = len(
        {
            (
                r["model"],
                r["target"],
                r["executor"],
                r.get("kernels_path"),
                r["opt_level"],
                r["pipeline"],
                r.get("tuning"),
                r.get("toolchain"),  # one program per release
                r.get("layout"),  # and per layout
            )
            for r in rows
            if not r["built"]
        }
    )
    to_run = sum(1 for r in rows if r["status"] in ("new", "pending", "pending-device"))
    cancelled = sum(1 for r in rows if r["status"] == "cancelled")
    # `sweep run` skips cancelled jobs as final; `sweep resume` runs them again: the line says which it means.
    also = f" ({cancelled} cancelled: `tvmbench sweep resume {sweep_id}` runs them again)" if cancelled else ""
    console.print(
        f"{to_build} program(s) to build, {to_run} job(s) to run, {len(rows) - to_run} already final{also}",
        soft_wrap=not console.is_terminal,
    )


PLAN_JOBS_NAMED = 4  # job ids a shared plan's heading names before "and N more"


def tuning_plan_table(console: Console, rows: list[dict[str, Any]], shown: Rendered | None = None) -> None:
    """The tasks tuned jobs with one plan will tune: trials each, and how many stored records already cover."""
    row, plan = rows[0], rows[0]["tuning_plan"]
    ids = [shown.id("job", r["job_key"]) if shown else short_id(r["job_key"], 12) for r in rows]
    more = f" and {len(ids) - PLAN_JOBS_NAMED} more" if len(ids) > PLAN_JOBS_NAMED else ""
    job = f"{'jobs' if len(ids) > 1 else 'job'} {', '.join(ids[:PLAN_JOBS_NAMED])}{more}"
    head = f"{job} ({row['model']} on {row['board_key']}): budget {plan['budget']} trials"
    if plan.get("budget") == "auto":
        head = f"{job} ({row['model']} on {row['board_key']}): budget auto"
    if plan.get("error"):
        console.print(f"{head}: cannot plan the tasks: {plan['error']}", soft_wrap=not console.is_terminal)
        return
    if plan.get("budget") == "auto":
        auto_plan_lines(console, head, plan)
        render(console, columns.PLAN_TASKS, plan["tasks"])
        return
    basis = "the untuned kernel profile" if plan["weights_from"] == "profile" else "weight x FLOPs"
    console.print(
        f"{head}, {plan['trials_to_run']} to run, {plan['trials_covered']} covered by stored records "
        f"({plan['database']}); split by {basis}",
        soft_wrap=not console.is_terminal,
    )
    render(console, columns.PLAN_TASKS, plan["tasks"])


def auto_plan_lines(console: Console, head: str, plan: dict[str, Any]) -> None:
    """An auto job's plan: its stop rules, what stored records cover, and a warning when until is inactive."""
    from tvmbench.answers.tuning_text import auto_rules_text

    auto, baseline = plan["auto"], plan.get("baseline") or {}
    plateau = {"trials": auto["plateau_trials"], "gain": auto["plateau_gain"]} if auto["plateau_trials"] else None
    rules = auto_rules_text({"max_minutes": auto["max_minutes"], "plateau": plateau, "max_trials": auto["max_trials"]})
    until = auto.get("until")
    if isinstance(until, str):  # the baseline executor's median
        if baseline.get("ms") is not None:
            rules = f"until {until} {baseline['ms']:.4g} ms ({baseline['source']}), {rules}"
        elif baseline.get("source"):
            rules = f"until the median of {baseline['source']}, {rules}"
        else:
            rules = f"until {until} (inactive), {rules}"
    elif until is not None:
        rules = f"until {until:.4g} ms, {rules}"
    console.print(
        f"{head}: every task in one search, stopping at the first of: {rules}; {plan['trials_covered']} trials "
        f"covered by stored records ({plan['database']})",
        soft_wrap=not console.is_terminal,
    )
    if baseline.get("why"):
        console.print(
            f'warning: until = "{until}" is inactive for this job: {baseline["why"]}; add "{until}" to [axes] '
            "executor, or give until a number of milliseconds",
            style="yellow",
            soft_wrap=not console.is_terminal,
        )


def results_table(console: Console, rows: list[dict[str, Any]], title: str) -> None:
    if not rows:
        console.print(f"{title}: no results")
        return
    shown = render(console, columns.results(rows), rows, title)
    failed = [r for r in rows if r["status"] not in ("ok", "pending", "pending-device") and r["error"]]
    for r in failed[:10]:
        line = Text.assemble((f"{shown.id('job', r['job_key'])} {r['status']}:", "red"), " ", r["error"])
        console.print(line, highlight=False, soft_wrap=not console.is_terminal)
    if any(r["equivalent_to"] for r in rows):
        console.print("program 'a = b': the job built the same program as job b, which was measured once for both")
    warned = [r for r in rows if r.get("warnings")]
    for r in warned[:10]:
        for w in r["warnings"]:
            line = Text.assemble((f"{shown.id('job', r['job_key'])} warning:", "red"), " ", w)
            console.print(line, highlight=False, soft_wrap=not console.is_terminal)
    static_ram = set(static_memory_names())
    static = sorted(
        {r["executor"] for r in rows if r.get("executor") in static_ram and r.get("peak_mem_mb") is not None}
    )
    if static:
        console.print(
            f"peak MB of {', '.join(static)} jobs: the firmware's static RAM (arena, workspace, I/O, stack estimate)"
        )


def outcome_line(outcome: Any) -> str:
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(outcome.statuses.items()))
    built = (
        f"compiled {outcome.built} program(s), reused {outcome.cached} from the artifact cache"
        if outcome.built or outcome.cached
        else "compiled nothing"
    )
    if outcome.built == 0 and outcome.cached:
        built = f"compiled nothing: all {outcome.cached} program(s) came from the artifact cache"
    parts = [f"sweep {outcome.sweep_id}: {outcome.jobs} jobs ({statuses})", built]
    skipped = getattr(outcome, "codegen_skipped", 0)
    if skipped:
        parts.append(f"{skipped} of them skipped codegen: an identical program was compiled already")
    if outcome.already_final:
        parts.append(f"{outcome.already_final} job(s) already had results and were skipped")
    if outcome.equivalent:
        parts.append(f"{outcome.equivalent} job(s) built a program identical to another's and share its measurement")
    return "; ".join(parts)


def split_pass_trace(trace: list[str]) -> tuple[list[str], int]:
    """(graph-level passes in order, count of TIR passes): the TIR pipeline repeats per kernel batch."""
    graph = [p for p in trace if not p.startswith(("tirx.", "s_tir.")) and p not in ("_pipeline", "sequential")]
    return graph, sum(1 for p in trace if p.startswith(("tirx.", "s_tir.")))


def job_detail(console: Console, d: dict[str, Any]) -> None:
    """`results show`: one job's configuration, build, pass trace and runs."""
    # Every line whole in a pipe (a log, grep), however long: the console's 200 columns cut an error, a
    # model path or the static memory line in two; a terminal wraps them at its width.
    whole = not console.is_terminal
    console.print(Text.assemble((f"job {d['job_key']}", "bold"), f" (sweep {d['sweep_id']})"), soft_wrap=whole)
    console.print(f"  model {d['model']}  target {d['target']}  board key {d['board_key']}", soft_wrap=whole)
    layout = f"  layout {d['layout']}" if d.get("layout") else ""
    executor = f"  executor {d['executor']}  opt_level {d['opt_level']}  pipeline {d['pipeline']}{layout}"
    console.print(executor, soft_wrap=whole)
    status = Text(d["status"], style=_STATUS_STYLE.get(d["status"], "red"))
    error = f": {d['error']}" if d.get("error") else ""
    console.print(Text.assemble("  status ", status, error), highlight=False, soft_wrap=whole)
    b = d.get("build")
    if b:
        console.print(
            f"  build {b['status']}: program {b['fingerprint']}, {b['kernel_count']} kernels, "
            f"{b['pass_count']} passes, {_fmt(b['compile_s'])} s, {b['artifact_size']} bytes "
            f"{b['artifact_arch']}, TVM {b['tvm_version']} / ffi {b['ffi_version']}",
            soft_wrap=whole,
        )
        memory = b.get("memory")
        if memory and memory.get("kind") == "relax-static-plan":
            console.print(f"  static memory: {static_plan_line(memory)}", highlight=False, soft_wrap=whole)
        elif memory:  # microcontroller builds: does it fit the part?
            console.print(
                f"  memory: flash {memory['flash_bytes']} bytes (text {memory['text_bytes']}, weights "
                f"{memory['weights_bytes']}), RAM {memory['ram_bytes']} bytes (arena {memory['arena_bytes']}, "
                f"workspace {memory['workspace_bytes']}, I/O {memory['io_bytes']}, stack estimate "
                f"{memory['stack_estimate_bytes']})",
                highlight=False,
                soft_wrap=whole,
            )
        if b.get("layout"):
            console.print(f"  layout {layout_line(b['layout'])}", highlight=False, soft_wrap=whole)
        if b.get("error"):
            console.print(f"  build error: {b['error']}", highlight=False, soft_wrap=whole)
        if b.get("tuning"):
            from tvmbench.answers.tuning import curve_lines
            from tvmbench.answers.tuning_text import print_tuning

            print_tuning(console, b["tuning"])
            for line in curve_lines(d.get("tuning_curve")):
                console.print(line, highlight=False, soft_wrap=whole)
        if b["pass_trace"]:
            relax_passes, tir_count = split_pass_trace(b["pass_trace"])
            console.print(
                f"  pass trace ({len(b['pass_trace'])} passes, {tir_count} of them TIR lowering; all in --json): "
                + " > ".join(relax_passes),
                highlight=False,
                soft_wrap=whole,
            )
    for other in d.get("same_program_as", []):
        console.print(
            f"  same program as job {other['job_key'][:12]} (opt_level {other['opt_level']}, "
            f"{other['pipeline']}, {other['executor']})",
            soft_wrap=whole,
        )
    for r in d.get("runs", []):
        samples = ", ".join(f"{s:.4g}" for s in r["samples"])
        line = (
            f"  run {r['attempt']} on {r['board'] or '-'}: {r['status']}"
            + (f" median {_fmt(r['median'])} {r['unit']}" if r["median"] is not None else "")
            + (" (emulated)" if r["emulated"] else "")
            + (f", samples [{samples}]" if samples else "")
            + (f", max abs err {_fmt(r['max_abs_err'])}" if r["max_abs_err"] is not None else "")
            + (f", load {r['load_avg_1m']:.2f}" if r["load_avg_1m"] is not None else "")
            + (f", same program as {r['equivalent_to'][:12]}" if r["equivalent_to"] else "")
        )
        console.print(line, highlight=False, soft_wrap=whole)
        if r["error"]:
            console.print(f"    error: {r['error']}", highlight=False, soft_wrap=whole)
        for text in run_measurement_lines(r):
            console.print(Text(f"    {text}"), highlight=False, soft_wrap=whole)  # reasons are text, not markup


def layout_line(layout: dict[str, Any]) -> str:
    """A build's layout conversion (workers/layouts.py) in one line."""
    name, convs = layout.get("layout"), layout.get("convs", 0)
    if not layout.get("converted"):
        return f"{name}: as imported (no conversion), {convs} conv2d"
    desired = "; ".join(f"{op}: {', '.join(want)}" for op, want in (layout.get("desired") or {}).items())
    text = (
        f"{name}: ConvertLayout ({desired}): {layout.get('convs_converted', 0)} of {convs} conv2d converted, "
        f"{layout.get('transposes_added', 0)} {'transposes' if name == 'NHWC' else 'layout transforms'} added"
    )
    if not convs:
        text += " (no conv2d in the model: the conversion is a no-op)"
    if layout.get("grouped_kept"):
        kept = layout["grouped_kept"]
        text += f"; {kept} grouped conv2d run NCHW between layout transforms (TOPI has no grouped NCHWc)"
    if layout.get("other_blocks"):
        pairs = ", ".join(f"{n} {pair}" for pair, n in layout["other_blocks"].items())
        text += f"; channels the block does not divide run in smaller blocks: {pairs}"
    if layout.get("other_convs"):
        text += f"; {layout['other_convs']} other convolution(s) (conv1d, conv3d, transposed) left as imported"
    rewritten = layout.get("rewritten") or {}
    if rewritten:
        said = {
            "dropout": "dropout(s) made the identity",
            "stacked_reductions": "stacked Sum/Mean/Min/Max made pairwise",
        }
        text += "; before it: " + ", ".join(f"{n} {said.get(k, k)}" for k, n in rewritten.items())
    return text


def static_plan_line(memory: dict[str, Any]) -> str:
    """A Relax build's static memory: parameters and planned intermediate storage."""
    if memory.get("available") is False:
        return f"unavailable ({memory.get('reason')})"
    dynamic = (
        f", {memory['dynamic_allocations']} dynamic-size allocation(s) not counted"
        if memory.get("dynamic_allocations")
        else ""
    )
    return (
        f"params {_mb(memory['params_bytes'])} + planned intermediates {_mb(memory['planned_bytes'])} "
        f"({memory['planned_allocations']} allocation(s); {_mb(memory['unplanned_bytes'])} without planning)"
        f" + largest kernel scratch {_mb(memory.get('kernel_scratch_bytes'))} = {_mb(memory['ram_bytes'])}"
        " (relax.analysis.estimate_memory_usage after StaticPlanBlockMemory)" + dynamic
    )


def _mb(n_bytes: float | None) -> str:
    if n_bytes is None:
        return "?"
    mb = n_bytes / 2**20
    return f"{n_bytes} B" if mb < 0.01 else f"{mb:.2f} MB"


def run_measurement_lines(r: dict[str, Any]) -> list[str]:
    """Sampling, phases, memory and board state of one run (rows before migration 0005 have none)."""
    lines = []
    sampling = r.get("sampling")
    if sampling:
        target = f" (target {sampling['target_rel_ci']:.1%})" if sampling.get("target_rel_ci") else ""
        rel = f"±{sampling['rel_ci']:.2%}" if sampling.get("rel_ci") is not None else "± unknown"
        lines.append(
            f"sampling: {sampling['samples']} samples after {sampling['warmup']} warmup, stopped by "
            f"{sampling['stop_reason']}; median 95% CI {rel}{target}; {sampling['timer_calls']} timer call(s) "
            f"in {sampling['elapsed_s']:.2f} s"
        )
    notes = r.get("phases") or {}
    if r.get("upload_bytes") is not None or notes:
        parts = []
        if r.get("upload_bytes") is not None:
            parts.append(f"upload {_mb(r['upload_bytes'])} in {r['upload_s'] * 1e3:.1f} ms")
        parts.append(f"load {r['load_s'] * 1e3:.1f} ms" if r.get("load_s") is not None else _unavailable("load", notes))
        if r.get("first_ms") is not None:
            source = (notes.get("first_inference") or {}).get("source")
            parts.append(f"first inference {r['first_ms']:.4g} ms" + (f" ({source}-timed)" if source else ""))
        else:
            parts.append(_unavailable("first inference", notes, "first_inference"))
        if r.get("median") is not None:
            parts.append(f"steady state median {r['median']:.4g} {r['unit']}")
        lines.append("phases: " + ", ".join(parts))
    memory = r.get("memory")
    if memory:
        if memory.get("available"):
            model = f", +{memory['model_mb']:.1f} MB over the session before load" if "model_mb" in memory else ""
            lines.append(f"memory: peak {r['peak_mem_mb']:.1f} MB (session VmHWM after the runs){model}")
        else:
            lines.append(f"memory: unavailable ({memory.get('reason')})")
    state = r.get("board_state")
    if state:
        lines.append(f"board before: {board_state_line(state.get('before'))}")
        lines.append(f"board after:  {board_state_line(state.get('after'))}")
    for w in r.get("warnings") or []:
        lines.append(f"warning: {w}")
    return lines


def _unavailable(what: str, notes: dict[str, Any], key: str | None = None) -> str:
    reason = (notes.get(key or what) or {}).get("reason")
    return f"{what} unavailable" + (f" ({reason})" if reason else "")


def board_state_line(state: dict[str, Any] | None) -> str:
    """A board state (workers/board_state.read_state) in one line: governors, clock range, hottest zone, load."""
    if not state:
        return "unavailable"
    if state.get("available") is False:
        return f"unavailable ({state.get('reason')})"
    parts = []
    freq = state.get("cpufreq") or {}
    if freq.get("available"):
        governors = sorted({c.get("governor") or "?" for c in freq["cores"]})
        cur = [c["cur_khz"] for c in freq["cores"] if c.get("cur_khz")]
        clocks = f" {min(cur) / 1000:.0f}-{max(cur) / 1000:.0f} MHz" if cur else ""
        parts.append(f"{len(freq['cores'])} cores {'/'.join(governors)}{clocks}")
    else:
        parts.append(f"cpufreq unavailable ({freq.get('reason')})")
    th = state.get("thermal") or {}
    if th.get("available"):
        hottest = max(th["zones"], key=lambda z: z["temp_c"])
        parts.append(f"{hottest['temp_c']:.1f} C ({hottest['type'] or hottest['zone']})")
    else:
        parts.append(f"thermal unavailable ({th.get('reason')})")
    if state.get("load_avg"):
        parts.append("load " + " ".join(f"{x:.2f}" for x in state["load_avg"]))
    return "; ".join(parts)
