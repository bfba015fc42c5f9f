"""What `sweep plan` says beside its table: the name results are stored under, the default target, the
toolchains of the tvm axis, and each tuned job's tasks, stored coverage and baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tvmbench.cli.common import home, note

if TYPE_CHECKING:  # the orchestrator (Ray, TVM, onnx) loads inside the functions that use it
    from db.store import ResultStore
    from orchestrator.spec import SweepSpec


def toolchain_needs(spec: SweepSpec) -> list:
    """The tvm axis' toolchains (orchestrator/toolchains.need): ToolchainError, one line, for a bad one."""
    from orchestrator import toolchains

    return toolchains.needs(spec.toolchains)


def toolchain_lines(needs: list, rows: list[dict]) -> list[str]:
    """`sweep plan`'s lines on the toolchains of the tvm axis: which are added, which `sweep run` provisions,
    and each one's jobs and programs to build."""
    from orchestrator.toolchains import add_command, shown

    lines = []
    for n in needs:
        mine = [r for r in rows if r.get("toolchain") == n.text]
        counts = f"{len(mine)} job(s), {sum(not r['built'] for r in mine)} to build"
        if n.toolchain is None:
            lines.append(
                f"toolchain {shown(n.text)} (TVM {n.tvm_version}): {counts}; missing: `sweep run` provisions it "
                f"(or `{add_command(n.text)}`)"
            )
        else:
            where = "installed" if n.toolchain.kind == "installed" else n.toolchain.python
            lines.append(f"toolchain {shown(n.text)} (TVM {n.tvm_version}): {counts}; added ({where})")
    return lines


def stored_name(store: ResultStore, spec: SweepSpec) -> str:
    """The name the sweep's results are stored under, with a note when it is not this file's.

    A sweep's id is its content's hash, which leaves out the names (of the sweep, its models, its
    targets): a file that differs from a stored sweep only there is that sweep, whose rows keep the names
    of the text first stored. Said here, not found out from `results list --sweep NEW-NAME` answering none.
    """
    stored = store.get_sweep(spec.sweep_id)
    if stored is None or (stored.name == spec.name and stored.source == spec.source):
        return spec.name
    note(
        f"this file's content is that of sweep {spec.sweep_id} ({stored.name}), stored from {stored.source_path}: "
        "its results stay under the names written there; `--label NAME` measures this file again as a new sweep"
    )
    return stored.name


def default_target_note(spec: SweepSpec) -> str | None:
    """What a sweep file without [[targets]] runs on, said rather than assumed."""
    if not spec.default_target:
        return None
    return (
        "no [[targets]] in the sweep file: using the preset `host` (this machine's CPU, board key `host`); "
        'add [[targets]] preset = "..." to choose (`tvmbench targets list`)'
    )


def tuning_plan(store, spec: SweepSpec, job, jobs: list, tasks_of: dict) -> dict:
    """Tasks, trials and stored coverage of one tuned job (the front pipeline runs here: seconds); an auto
    job's until = "onnxruntime" baseline too."""
    from orchestrator.tuning import plan_baseline

    plan = _tuning_tasks(store, spec, job, tasks_of)
    baseline = plan_baseline(store, jobs, job, spec.sweep_id)
    return {**plan, "budget": "auto", "baseline": baseline} if job.tuning_auto else plan


def _tuning_tasks(store, spec: SweepSpec, job, tasks_of: dict) -> dict:
    from orchestrator import toolchains
    from orchestrator.tuning import once, plan_tuning, plan_tuning_in_toolchain, records_database, untuned_profile
    from workers.build_common import tvm_versions

    try:
        model = spec.model_paths[job.model.sha256].read_bytes()
        database = records_database(store, home(), job, tvm_versions()[0])
        foreign = None if job.toolchain is None else toolchains.need(job.toolchain)
        if foreign is not None and foreign.toolchain is None:
            return {"budget": job.tuning, "error": f"toolchain {foreign.text} is not added yet", "tasks": []}
        # The stored untuned profile is the same for every budget of a program: asked once per plan.
        profile_key = (
            "profile",
            job.model.sha256,
            repr(job.model.inputs),
            job.target.board_key,
            job.pipeline,
            job.layout,
        )
        profile = once(tasks_of, profile_key, lambda: untuned_profile(store, job))
        if foreign is not None and foreign.toolchain.kind != "installed":
            # Only its own release hashes its tasks as its records are keyed: its child extracts them.
            return plan_tuning_in_toolchain(foreign.toolchain, job, model, database, profile, tasks_of)
        return plan_tuning(job, model, database, profile, tasks_of)
    except Exception as exc:  # the build would fail the same way; the plan says so instead of dying
        from tvmbench.core.errors import one_line

        return {"budget": job.tuning, "error": one_line(exc), "tasks": []}
