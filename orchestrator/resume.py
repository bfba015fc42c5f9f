"""The spec of a stored sweep, to resume it from any directory, and what changed on disk since it ran.

A sweep keeps its TOML text and the absolute path it was read from (databases written before that
kept the path as typed, relative to wherever `sweep run` ran). Resuming runs the stored plan:

- the sweep file changed or is gone: the stored text is what the sweep id means, so it runs, and one
  note says so and how to run the file as it is now (`sweep run FILE`: a new sweep where jobs differ);
- a model file changed (its sha256 is not the one the sweep's jobs were planned with): the remaining
  jobs cannot be built from what is on disk, so the resume is refused, naming the model and what to do.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import select

from db import models as m
from db.store import ResultStore
from orchestrator.spec import SpecError, SweepSpec, parse_spec, sweep_text


def resume_spec(store: ResultStore, sweep: Any) -> tuple[SweepSpec, list[str]]:
    """(spec, notes) of the stored ``sweep`` (its row); SpecError naming what is missing or changed."""
    stored_path = Path(sweep.source_path)
    relative = not stored_path.is_absolute()
    where = stored_path.resolve()  # a relative one (an older database) can only be tried from here
    try:
        spec = parse_spec(sweep.source, base=where.parent, source_path=sweep.source_path)
    except SpecError as exc:
        # The stored text cannot be edited, so the parser's own advice ("give the path ...") is not enough:
        # what a resume needs is the file back where the sweep found it.
        raise SpecError(
            f"sweep {sweep.id} can no longer be loaded: {exc}{_relative_hint(sweep, relative)}; a resume runs the "
            f"plan stored with the sweep, so restore that file where it was, or run a sweep file that names "
            f"the models as they are now (`tvmbench sweep run FILE`: a new sweep)"
        ) from None
    if sweep.label:
        spec = replace(spec, label=sweep.label)
    if spec.sweep_id != sweep.id:
        changed = _changed_models(store, sweep.id, spec)
        what = ", ".join(changed) if changed else "its models or their inputs"
        raise SpecError(
            f"sweep {sweep.id} cannot be resumed: {what} changed on disk since it ran, so its remaining jobs "
            f"would build other programs; restore the file(s), or `tvmbench sweep run {where}` to run them as a "
            f"new sweep{_relative_hint(sweep, relative)}"
        )
    notes = []
    if where.is_file():
        try:
            current = sweep_text(where)
        except (OSError, UnicodeDecodeError):
            current = None
        if current != sweep.source:
            notes.append(
                f"{where} changed since sweep {sweep.id} ran: resuming the plan stored with the sweep; "
                f"`tvmbench sweep run {where}` runs the file as it is now"
            )
    else:
        notes.append(f"{where} is gone: resuming sweep {sweep.id} from the copy stored with it")
    return spec, notes


def _relative_hint(sweep: Any, relative: bool) -> str:
    if not relative:
        return ""
    return (
        f" (the sweep was stored with the relative path {sweep.source_path!r}, read here from {Path.cwd()}: "
        f"resume it from the folder it was run in)"
    )


def _changed_models(store: ResultStore, sweep_id: str, spec: SweepSpec) -> list[str]:
    """'name (path)' of each model whose file now hashes differently from the one the sweep's jobs name."""
    with store.read() as s:
        planned = dict(s.execute(select(m.Job.model_name, m.Job.model_sha256).where(m.Job.sweep_id == sweep_id)).all())
    return [
        f"model {model.name} ({spec.model_paths[model.sha256]})"
        for model in spec.models
        if planned.get(model.name) not in (None, model.sha256)
    ]
