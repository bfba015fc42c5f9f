"""Synthetic result rows written straight through the ORM, for the analysis tests (no TVM, no boards)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from db import models as m
from db.store import ResultStore, tuning_columns
from tvmbench.core.records import canonical_hash

T0 = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass
class Result:
    """One job of a synthetic sweep; ``samples`` in ``unit``."""

    model: str = "tiny_cnn"
    executor: str = "vm-compiled"
    opt_level: int = 2
    pipeline: str = "per-target"
    target: str = "host"
    board_key: str = "host"
    status: str = "ok"
    samples: list[float] = field(default_factory=list)
    unit: str = "ms"
    emulated: bool = False
    error: str | None = None
    pass_trace: list[str] = field(default_factory=list)
    fingerprint: str | None = None
    tuning: dict[str, Any] | None = None  # a Build's tuning provenance (tuned builds only)
    first_ms: float | None = None
    peak_mem_mb: float | None = None
    warnings: list[str] = field(default_factory=list)
    tvm: str | None = None  # the release its build ran under (a `tvm` axis value); None: the sweep's TVM
    kernel_count: int | None = None
    layout: str | None = None  # a `layout` axis value; None: no axis
    kernel_profile: dict[str, Any] | None = None  # the final run's, in the board agent's shape

    @property
    def job_key(self) -> str:
        parts: list[Any] = [self.model, self.executor, self.opt_level, self.pipeline, self.target, self.board_key]
        parts.append(self.emulated)
        if self.tuning:  # untuned results keep the keys they always had
            parts.append(self.tuning.get("budget"))
        if self.tvm:  # the tvm axis is part of the job key; results without it keep theirs
            parts.append(["tvm", self.tvm])
        if self.layout:  # likewise the layout axis
            parts.append(["layout", self.layout])
        return canonical_hash(parts)


def noisy(center: float, n: int = 10, rel: float = 0.02, seed: int = 0) -> list[float]:
    """``n`` samples around ``center`` with relative spread ``rel`` (deterministic)."""
    rng = np.random.default_rng(seed)
    return [float(x) for x in center * (1 + rel * rng.standard_normal(n))]


def add_sweep(
    store: ResultStore,
    sweep_id: str,
    results: list[Result],
    *,
    label: str = "",
    created_at: datetime | None = None,
    tvm_version: str = "0.27.0",
) -> str:
    """Write one sweep with a job, build and final run per result; returns the sweep id."""
    created = created_at or T0
    with store._sessions.begin() as s:
        s.add(
            m.Sweep(
                id=sweep_id,
                name="synthetic",
                label=label,
                source_path="synthetic.toml",
                source="",
                status="complete",
                job_count=len(results),
                host="testhost",
                tvm_version=tvm_version,
                created_at=created,
                finished_at=created,
            )
        )
        for r in results:
            sha = canonical_hash(r.model)
            if s.get(m.Model, sha) is None:
                s.add(m.Model(sha256=sha, name=r.model, source="synthetic", size_bytes=1, inputs=[]))
            board_id = f"{r.board_key}@127.0.0.1:9000"
            if s.get(m.Board, board_id) is None:
                s.add(m.Board(id=board_id, key=r.board_key, emulated=r.emulated, last_seen=created))
            release = r.tvm or tvm_version
            build_key = canonical_hash([r.job_key, release])
            if s.get(m.Build, build_key) is None:
                s.add(
                    m.Build(
                        build_key=build_key,
                        model_sha256=sha,
                        target={"kind": "llvm"},
                        executor=r.executor,
                        opt_level=r.opt_level,
                        pipeline=r.pipeline,
                        status="ok" if r.status not in ("model", "build") else r.status,
                        fingerprint=r.fingerprint or build_key[:16],
                        pass_trace=r.pass_trace,
                        pass_count=len(r.pass_trace),
                        kernel_count=r.kernel_count,
                        tvm_version=release,
                        created_at=created,
                        **tuning_columns(r.tuning),
                    )
                )
            s.flush()
            job = m.Job(
                sweep_id=sweep_id,
                job_key=r.job_key,
                model_sha256=sha,
                model_name=r.model,
                target_name=r.target,
                board_key=r.board_key,
                executor=r.executor,
                opt_level=r.opt_level,
                pipeline=r.pipeline,
                build_key=build_key,
                config={"emulated": r.emulated, **({"layout": r.layout} if r.layout else {})},
                status=r.status,
                error=r.error,
                finished_at=created + timedelta(minutes=1),
            )
            s.add(job)
            s.flush()
            if r.status in ("model", "build"):
                continue
            run = m.Run(
                job_id=job.id,
                attempt=1,
                board_id=board_id,
                status=r.status,
                error=r.error,
                unit=r.unit,
                samples=r.samples,
                median=statistics.median(r.samples) if r.samples else None,
                mean=statistics.fmean(r.samples) if r.samples else None,
                std=statistics.pstdev(r.samples) if r.samples else None,
                min=min(r.samples) if r.samples else None,
                max=max(r.samples) if r.samples else None,
                max_abs_err=1e-6,
                emulated=r.emulated,
                first_ms=r.first_ms,
                peak_mem_mb=r.peak_mem_mb,
                warnings=r.warnings,
                kernel_profile=r.kernel_profile,
                started_at=created,
                finished_at=created,
            )
            s.add(run)
            s.flush()
            job.final_run_id = run.id
    return sweep_id


def row_by(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    """The single row whose fields equal ``match``."""
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{len(found)} rows match {match}"
    return found[0]
