"""Plan: a pure function from a validated sweep spec to its jobs, in a stable order."""

from __future__ import annotations

import itertools

from orchestrator.spec import SweepSpec
from workers.records import Job


def plan_jobs(spec: SweepSpec) -> list[Job]:
    """Expand the sweep matrix: model x target x executor x opt_level x pipeline."""
    return [
        Job(model=m, target=t, executor=e, opt_level=o, pipeline=p, measure=spec.measure)
        for m, t, e, o, p in itertools.product(
            spec.models, spec.targets, spec.executors, spec.opt_levels, spec.pipelines
        )
    ]
