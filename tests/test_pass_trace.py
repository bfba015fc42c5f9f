"""The compact pass trace: stored folded, read back exact, old rows (the plain list) still read."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from sqlalchemy import select, update

from db import models as m
from db.store import ResultStore
from tests.test_store_backends import TVM, begin, make_jobs, ok_build
from tvmbench.answers import query as reads
from tvmbench.core.pass_trace import CODEGEN, compact, compact_split, expand, pipeline_passes

RELAX = ["_pipeline", "sequential", "LegalizeOps", "FuseOps", "FuseTIR", "VMShapeLower", "tirx.BindTarget"]
TIR = ["_pipeline", "sequential", *(f"s_tir.P{i}" for i in range(55)), "s_tir.ThreadSync", "s_tir.ThreadSync"]


def per_kernel_trace(kernels: int) -> list[str]:
    return [*RELAX, *TIR * kernels, "tirx.LowerIntrin"]


def test_compact_folds_the_per_kernel_pipeline_and_expands_exactly() -> None:
    trace = per_kernel_trace(40)
    stored = compact(trace)
    assert expand(stored) == trace
    assert {"repeat": 40, "passes": TIR} in stored
    assert len(json.dumps(stored)) * 10 < len(json.dumps(trace))
    rng = random.Random(0)
    for _ in range(200):  # anything, repeated or not, comes back as it was
        names = [rng.choice("abcab") for _ in range(rng.randint(0, 80))]
        assert expand(compact(names)) == names


def test_codegen_marker_and_old_rows() -> None:
    trace = per_kernel_trace(3)
    stored = compact_split(trace, len(RELAX))
    assert CODEGEN in stored and expand(stored) == trace and pipeline_passes(stored) == len(RELAX)
    assert pipeline_passes(compact(trace)) is None
    assert expand(trace) == trace  # an old row is the plain list


def test_store_keeps_the_trace_compact_and_reads_it_exact(store: ResultStore) -> None:
    job = make_jobs()[0]
    begin(store, jobs=[job])
    trace = per_kernel_trace(50)
    build = replace(ok_build(job), pass_trace=tuple(trace), pipeline_passes=len(RELAX))
    store.save_build(job, build)
    with store.read() as s:
        row = s.get(m.Build, build.build_key)
        assert row is not None and len(row.pass_trace) < 20 and row.pass_count == len(trace)
    back = store.get_build(build.build_key)
    assert back is not None and list(back.pass_trace) == trace and back.pipeline_passes == len(RELAX)
    assert reads.job_detail(store, job.key)["build"]["pass_trace"] == trace
    # A row written before the compact form holds the plain list: it reads the same.
    with store.read() as s:
        s.execute(update(m.Build).where(m.Build.build_key == build.build_key).values(pass_trace=trace))
        s.commit()
        assert s.scalar(select(m.Build.pass_trace).where(m.Build.build_key == build.build_key)) == trace
    assert reads.job_detail(store, job.key)["build"]["pass_trace"] == trace
    assert list(store.get_build(build.build_key).pass_trace) == trace  # type: ignore[union-attr]
    assert TVM
