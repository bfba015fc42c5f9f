"""Rows and records: the column values a record is written as, and the record (or the dict people read)
a row is read back as. One place per table, shared by the writes (db/writes.py) and the answers
(tvmbench/answers/query.py), so a column added to a table is mapped once.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from db import models as m
from tvmbench.core import records
from tvmbench.core.pass_trace import compact_split, expand, pipeline_passes


def now() -> datetime:
    """The time a row is written at (UTC, as every timestamp column)."""
    return datetime.now(UTC)


def timestamp(value: float | None) -> datetime | None:
    """A POSIX time (a record's started_at, finished_at) as the column's datetime; None stays None."""
    return datetime.fromtimestamp(value, UTC) if value is not None else None


# --- models, jobs --------------------------------------------------------------------------------


def model_values(model: records.ModelRef, size_bytes: int) -> dict[str, Any]:
    """The models row of ``model``."""
    return {
        "sha256": model.sha256,
        "name": model.name,
        "source": model.source,
        "size_bytes": size_bytes,
        "inputs": [[n, list(sh), dt] for n, sh, dt in model.inputs],
    }


def job_values(sweep_id: str, job: records.Job, tvm_version: str) -> dict[str, Any]:
    """The jobs row of ``job`` in sweep ``sweep_id``, pending (its config is what a resume rebuilds it from)."""
    return {
        "sweep_id": sweep_id,
        "job_key": job.key,
        "model_sha256": job.model.sha256,
        "model_name": job.model.name,
        "target_name": job.target.name,
        "board_key": job.target.board_key,
        "executor": job.executor,
        "opt_level": job.opt_level,
        "pipeline": job.pipeline,
        "build_key": job.build_key(tvm_version),
        "status": "pending",
        "config": {
            **job.build_config(),
            "measure": asdict(job.measure),
            "board_key": job.target.board_key,
            "target_name": job.target.name,
            "emulated": job.target.emulated,
        },
    }


# --- builds --------------------------------------------------------------------------------------

#: Build record fields stored in builds columns of the same name, unchanged.
BUILD_FIELDS = (
    "status",
    "error",
    "fingerprint",
    "kernel_count",
    "compile_s",
    "artifact_sha256",
    "artifact_size",
    "artifact_arch",
    "tvm_version",
    "ffi_version",
    "host",
    "memory",
    "tuning",
    "layout",
)
#: What `results show` prints of a build, in this order (pass_trace expanded).
BUILD_DETAIL_FIELDS = (
    "status",
    "error",
    "fingerprint",
    "pass_count",
    "pass_trace",
    "kernel_count",
    "compile_s",
    "artifact_sha256",
    "artifact_size",
    "artifact_arch",
    "tvm_version",
    "ffi_version",
    "host",
    "memory",
    "flash_bytes",
    "ram_bytes",
    "params_bytes",
    "planned_bytes",
    "tuning",
    "layout",
)


def tuning_columns(tuning: dict[str, Any] | None) -> dict[str, Any]:
    """The builds columns that carry a tuning dict and the scalars the answers filter and sort on."""
    tuning = tuning or None
    return {
        "tuning": tuning,
        "tuning_budget": tuning.get("budget") if tuning else None,
        "tuning_trials": tuning.get("trials_run") if tuning else None,
        "tuning_s": tuning.get("tuning_s") if tuning else None,
    }


def static_memory_columns(memory: dict[str, Any] | None) -> dict[str, int | None]:
    """params_bytes and planned_bytes of a build's memory dict, for VM and microcontroller builds alike:
    a microcontroller's weights are its parameters, its arena and workspace its planned storage."""
    memory = memory or {}
    params = memory.get("params_bytes", memory.get("weights_bytes"))
    planned = memory.get("planned_bytes")
    if planned is None and "arena_bytes" in memory:
        planned = memory["arena_bytes"] + memory.get("workspace_bytes", 0)
    return {"params_bytes": params, "planned_bytes": planned}


def build_values(job: records.Job, build: records.Build) -> dict[str, Any]:
    """The builds row of ``build`` (compiled for ``job``)."""
    return {
        "build_key": build.build_key,
        "model_sha256": job.model.sha256,
        "target": job.target.tvm_target,
        "executor": job.executor,
        "opt_level": job.opt_level,
        "pipeline": job.pipeline,
        **{name: getattr(build, name) for name in BUILD_FIELDS},
        # Runs of the per-kernel TIR pipeline folded (tvmbench/core/pass_trace.py); pass_count counts them all.
        "pass_trace": compact_split(build.pass_trace, build.pipeline_passes),
        "pass_count": len(build.pass_trace),
        "created_at": now(),
        "flash_bytes": (build.memory or {}).get("flash_bytes"),
        "ram_bytes": (build.memory or {}).get("ram_bytes"),
        **tuning_columns(build.tuning),
        **static_memory_columns(build.memory),
    }


def build_record(row: m.Build) -> records.Build:
    """The Build record a builds row holds (what a cached build is reused as)."""
    return records.Build(
        build_key=row.build_key,
        pass_trace=tuple(expand(row.pass_trace)),
        pipeline_passes=pipeline_passes(row.pass_trace),
        **{name: getattr(row, name) for name in BUILD_FIELDS},
    )


def build_detail(row: m.Build) -> dict[str, Any]:
    """A builds row as `results show` prints it (an older row's plain pass list reads the same)."""
    return {
        name: expand(row.pass_trace) if name == "pass_trace" else getattr(row, name) for name in BUILD_DETAIL_FIELDS
    }


# --- runs ----------------------------------------------------------------------------------------

#: Run record fields stored in runs columns of the same name, unchanged.
RUN_FIELDS = (
    "attempt",
    "board_id",
    "status",
    "error",
    "unit",
    "max_abs_err",
    "max_rel_err",
    "emulated",
    "load_avg_1m",
    "builds_in_flight",
    "equivalent_to",
    "kernel_profile",
    *m.RUN_DETAIL_FIELDS,
)


def run_values(job_id: int, run: records.Run) -> dict[str, Any]:
    """The runs row of attempt ``run`` of job ``job_id``."""
    return {
        "job_id": job_id,
        **{name: getattr(run, name) for name in RUN_FIELDS},
        "samples": list(run.samples_ms),
        "median": run.median_ms,
        "mean": run.mean_ms,
        "std": run.std_ms,
        "min": run.min_ms,
        "max": run.max_ms,
        "warnings": list(run.warnings),
        "started_at": timestamp(run.started_at),
        "finished_at": timestamp(run.finished_at),
    }


def run_detail(row: m.Run) -> dict[str, Any]:
    """A runs row as `results show` prints one attempt."""
    return {
        "attempt": row.attempt,
        "board": row.board_id,
        "status": row.status,
        "error": row.error,
        "unit": row.unit,
        "samples": row.samples,
        "median": row.median,
        "mean": row.mean,
        "std": row.std,
        "min": row.min,
        "max": row.max,
        "max_abs_err": row.max_abs_err,
        "max_rel_err": row.max_rel_err,
        "emulated": row.emulated,
        "load_avg_1m": row.load_avg_1m,
        "builds_in_flight": row.builds_in_flight,
        "equivalent_to": row.equivalent_to,
        "kernel_profile": row.kernel_profile,
        **{name: getattr(row, name) for name in m.RUN_DETAIL_FIELDS},
        "warnings": row.warnings or [],
        "started_at": row.started_at.isoformat() if row.started_at else None,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }
