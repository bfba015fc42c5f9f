"""Sweeps and boards as lists: which sweep a reference names, every sweep with its progress (`results
sweeps`, the dashboard's live page), the boards the database knows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from db import models as m
from db.lookup import QueryError, resolve_prefix
from tvmbench.core import liveness
from tvmbench.core.records import FINAL_STATUSES, PENDING_STATUSES

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.store import ResultStore


NAMED_SHOWN = 5  # sweeps of one name a note lists
#: Where resolve_sweep says which sweep a name stood for when several have it (the CLI sets a stderr
#: printer; None, the default for the library and the dashboard, says nothing).
on_name_choice: Callable[[str], None] | None = None


def resolve_sweep(store: ResultStore, ref: str) -> m.Sweep:
    """The one sweep ``ref`` names: exact id, unique id prefix, or label/name (newest wins, and
    ``on_name_choice`` is told which one when several sweeps have that label or name)."""
    with store.read() as s:
        sweep_id = resolve_prefix(s, m.Sweep.id, ref, "sweep id")
        if sweep_id is not None:
            return s.get(m.Sweep, sweep_id)
        named = list(
            s.scalars(
                select(m.Sweep)
                .where((m.Sweep.label == ref) | (m.Sweep.name == ref))
                .order_by(m.Sweep.created_at.desc(), m.Sweep.id)
                .limit(NAMED_SHOWN + 1)
            )
        )
        if named:
            if len(named) > 1 and on_name_choice is not None:
                others = ", ".join(sw.id for sw in named[1:NAMED_SHOWN]) + (
                    " and more" if len(named) > NAMED_SHOWN else ""
                )
                on_name_choice(
                    f"note: {ref!r} names several sweeps; using the newest, {named[0].id} "
                    f"(created {named[0].created_at:%Y-%m-%d %H:%M}); the others: {others}; give an id to choose"
                )
            return named[0]
    raise QueryError(f"no sweep {ref!r} (id, id prefix, label or name); `tvmbench results sweeps` lists them")


#: Sweep statuses of a driver still at work: their progress moves.
ACTIVE_SWEEP_STATUSES = ("running", "cancelling")


def sweeps_overview(
    store: ResultStore, sweep_id: str | None = None, *, active_or: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Every sweep, newest first, with its progress (`results sweeps`): jobs final / ok / failed / pending.

    ``sweep_id`` (an exact id) narrows it to one sweep; ``active_or`` to the sweeps still running plus
    the listed ids (what a live page polls: on a database of a million jobs it counts only those sweeps'
    jobs, by the jobs.sweep_id index).
    """
    sweeps_q = select(m.Sweep).order_by(m.Sweep.created_at.desc())
    counts_q = select(m.Job.sweep_id, m.Job.status, func.count()).group_by(m.Job.sweep_id, m.Job.status)
    if sweep_id is not None:
        sweeps_q, counts_q = sweeps_q.where(m.Sweep.id == sweep_id), counts_q.where(m.Job.sweep_id == sweep_id)
    if active_or is not None:
        sweeps_q = sweeps_q.where(m.Sweep.status.in_(ACTIVE_SWEEP_STATUSES) | m.Sweep.id.in_(list(active_or)))
    with store.read() as s:
        sweeps = list(s.scalars(sweeps_q))
        if active_or is not None:
            counts_q = counts_q.where(m.Job.sweep_id.in_([sw.id for sw in sweeps]))
        counted = s.execute(counts_q)
        statuses: dict[str, dict[str, int]] = {}
        for sid, status, n in counted:
            statuses.setdefault(sid, {})[status] = int(n)
        # Live trial counts only where they move (running sweeps) or were asked for (one sweep): on a big
        # database, reading every job's config for the whole list would make the sweeps page slow.
        tuning = _tuning_progress(
            s, [sw.id for sw in sweeps if sw.status in ACTIVE_SWEEP_STATUSES or sw.id == sweep_id]
        )
    rows = []
    for sw in sweeps:
        counts = statuses.get(sw.id, {})
        final = sum(n for st, n in counts.items() if st in FINAL_STATUSES)
        status = sweep_shown_status(sw)
        rows.append(
            {
                "sweep_id": sw.id,
                "name": sw.name,
                "label": sw.label,
                "status": status,
                "jobs": sw.job_count,
                "final": final,
                "ok": counts.get("ok", 0),
                "failed": final - counts.get("ok", 0),
                "pending": sum(n for st, n in counts.items() if st in PENDING_STATUSES),
                "statuses": dict(sorted(counts.items())),
                "created_at": sw.created_at.isoformat(),
                "finished_at": sw.finished_at.isoformat() if sw.finished_at else None,
                "tvm_version": sw.tvm_version,
                "source": sw.source_path,
                "driver": sweep_driver(sw),
                "resume": liveness.resume_hint(sw.id) if status == liveness.INTERRUPTED else None,
            }
        )
        if sw.id in tuning:
            rows[-1]["tuning_trials"], rows[-1]["tuning_budget"] = tuning[sw.id]
    return rows


def sweep_shown_status(sweep: m.Sweep) -> str:
    """The sweep's status as people see it: ``interrupted`` when it says running but its driver is gone."""
    return liveness.shown_status(sweep.status, sweep.driver_host, sweep.driver_pid, sweep.heartbeat_at)


def sweep_driver(sweep: m.Sweep) -> dict[str, Any] | None:
    """Where the sweep's (last) driver ran and when it last said it was alive; None before migration 0007."""
    if not sweep.driver_host:
        return None
    beat = sweep.heartbeat_at
    return {"host": sweep.driver_host, "pid": sweep.driver_pid, "heartbeat_at": beat.isoformat() if beat else None}


def _tuning_progress(s: Session, sweep_ids: list[str]) -> dict[str, tuple[int, int]]:
    """(trials done, trial budget) per sweep with tuned jobs, over its distinct tuned builds.

    A finished build counts the trials it ran plus those stored records covered; a build still tuning
    counts the records it has committed so far (they carry the source "build <build key[:16]>").
    """
    if not sweep_ids:
        return {}
    # An auto budget's config says budget "auto" (no integer to cast): its total is its trial cap.
    budget = m.Job.config["tuning"]["budget"].as_string()
    cap = m.Job.config["tuning"]["auto"]["max_trials"].as_integer()
    tuned = [
        (sid, bk, cap_of if cap_of is not None else int(total))
        for sid, bk, total, cap_of in s.execute(
            select(m.Job.sweep_id, m.Job.build_key, budget, cap)
            .where(m.Job.sweep_id.in_(sweep_ids), budget.is_not(None))
            .distinct()
        )
    ]
    if not tuned:
        return {}
    keys = sorted({bk for _, bk, _ in tuned})
    finished = {
        bk: int(run or 0) + int(covered or 0)
        for bk, run, covered in s.execute(
            select(m.Build.build_key, m.Build.tuning_trials, m.Build.tuning["trials_from_records"].as_integer()).where(
                m.Build.build_key.in_(keys), m.Build.tuning_budget.is_not(None)
            )
        )
    }
    sources = {f"build {bk[:16]}": bk for bk in keys if bk not in finished}
    live = {
        sources[src]: int(n)
        for src, n in s.execute(
            select(m.TuningRecord.source, func.count())
            .where(m.TuningRecord.source.in_(list(sources)))
            .group_by(m.TuningRecord.source)
        )
    }
    progress: dict[str, tuple[int, int]] = {}
    for sid, bk, total in tuned:
        done = min(int(total), finished.get(bk, live.get(bk, 0)))
        trials, budget_sum = progress.get(sid, (0, 0))
        progress[sid] = (trials + done, budget_sum + int(total))
    return progress
