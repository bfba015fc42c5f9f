"""The results schema (SQLAlchemy 2 typed ORM). Alembic migrations in db/migrations follow these classes.

sweeps 1-n jobs 1-n runs; jobs n-1 builds (content-addressed), n-1 models; runs n-1 boards.
A job row is the job's final state: status "ok" or an error kind once final, "pending"/"pending-device"
before. Every attempt on a board is a run row with its number.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Run fields stored in columns of the same name (migration 0005: sampling, phases, memory, board state).
RUN_DETAIL_FIELDS = (
    "warmup_runs",
    "stop_reason",
    "ci_rel",
    "sampling",
    "upload_bytes",
    "upload_s",
    "load_s",
    "first_ms",
    "phases",
    "peak_mem_mb",
    "memory",
    "board_state",
)


class Base(DeclarativeBase):
    pass


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # content hash of the spec
    name: Mapped[str] = mapped_column(String(200))
    label: Mapped[str] = mapped_column(String(200), default="")
    source_path: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)  # the TOML as submitted, so resume needs no file
    status: Mapped[str] = mapped_column(String(32), default="running")  # running/complete/incomplete/cancelled
    job_count: Mapped[int] = mapped_column(Integer, default=0)
    host: Mapped[str] = mapped_column(String(200), default="")
    tvm_version: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The driver at work on it (migration 0007): where and which process, and when it last said so; a
    # reader shows a running sweep whose driver is gone as interrupted (tvmbench/core/liveness.py).
    driver_host: Mapped[str | None] = mapped_column(String(200), nullable=True)
    driver_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Model(Base):
    __tablename__ = "models"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)
    inputs: Mapped[list] = mapped_column(JSON)  # [[name, shape, dtype], ...]


class Build(Base):
    __tablename__ = "builds"

    build_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    model_sha256: Mapped[str] = mapped_column(ForeignKey("models.sha256"))
    target: Mapped[dict] = mapped_column(JSON)
    executor: Mapped[str] = mapped_column(String(32))
    opt_level: Mapped[int] = mapped_column(Integer)
    pipeline: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(32))  # ok / model / build
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    pass_trace: Mapped[list] = mapped_column(JSON, default=list)
    pass_count: Mapped[int] = mapped_column(Integer, default=0)
    kernel_count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    compile_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    artifact_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    artifact_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    artifact_arch: Mapped[str | None] = mapped_column(String(32), nullable=True)
    tvm_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ffi_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    host: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Microcontroller (aot-c) builds: does it fit the part? flash = text + weights; ram = arena +
    # workspace + I/O buffers + stack estimate; memory holds the parts. NULL for other executors.
    flash_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ram_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    memory: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # MetaSchedule tuning provenance (migration 0006): the whole dict (tasks, trials, failures by kind,
    # time split) and, for the answers' SQL, its budget, trials run and tuning seconds. NULL when untuned.
    tuning: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    tuning_budget: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tuning_trials: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tuning_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The static memory of a build (migration 0005): params = weights (VM: the Relax constants; aot-c:
    # the weights in flash); planned = intermediate storage after memory planning (VM: parsed from
    # relax.analysis.estimate_memory_usage; aot-c: arena + workspace). VM builds also set ram_bytes to
    # params + planned, the RAM the program needs before any runtime overhead.
    params_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    planned_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The layout axis' conversion (migration 0008, workers/layouts.py): layout, whether ConvertLayout ran,
    # conv2d found and converted, transposes added. NULL for builds of jobs without a layout.
    layout: Mapped[dict | None] = mapped_column(JSON, nullable=True)


class Board(Base):
    __tablename__ = "boards"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)  # key@host:port
    key: Mapped[str] = mapped_column(String(100), index=True)
    arch: Mapped[str | None] = mapped_column(String(32), nullable=True)
    emulated: Mapped[bool] = mapped_column(Boolean, default=False)
    facts: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    state: Mapped[str] = mapped_column(String(32), default="ok")  # ok / suspect / quarantined
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    last_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("sweep_id", "job_key", name="uq_jobs_sweep_key"),
        Index("ix_jobs_model_target", "model_name", "target_name"),
        Index("ix_jobs_status", "status"),
        # analysis queries (migration 0003)
        Index("ix_jobs_rank", "status", "model_name", "board_key", "sweep_id"),
        Index("ix_jobs_finished_at", "finished_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id"), index=True)
    job_key: Mapped[str] = mapped_column(String(64), index=True)
    model_sha256: Mapped[str] = mapped_column(ForeignKey("models.sha256"))
    model_name: Mapped[str] = mapped_column(String(200))
    target_name: Mapped[str] = mapped_column(String(100))
    board_key: Mapped[str] = mapped_column(String(100))
    executor: Mapped[str] = mapped_column(String(32))
    opt_level: Mapped[int] = mapped_column(Integer)
    pipeline: Mapped[str] = mapped_column(String(32))
    build_key: Mapped[str] = mapped_column(String(64), index=True)
    config: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(32), default="pending")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    equivalent_to: Mapped[str | None] = mapped_column(String(64), nullable=True)  # job key measured instead
    final_run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("job_id", "attempt", name="uq_runs_job_attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    board_id: Mapped[str | None] = mapped_column(ForeignKey("boards.id"), nullable=True, index=True)
    status: Mapped[str] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    unit: Mapped[str] = mapped_column(String(16), default="ms")
    samples: Mapped[list] = mapped_column(JSON, default=list)
    median: Mapped[float | None] = mapped_column(Float, nullable=True)
    mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    std: Mapped[float | None] = mapped_column(Float, nullable=True)
    min: Mapped[float | None] = mapped_column(Float, nullable=True)
    max: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_abs_err: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_rel_err: Mapped[float | None] = mapped_column(Float, nullable=True)
    emulated: Mapped[bool] = mapped_column(Boolean, default=False)
    load_avg_1m: Mapped[float | None] = mapped_column(Float, nullable=True)
    builds_in_flight: Mapped[int | None] = mapped_column(Integer, nullable=True)
    equivalent_to: Mapped[str | None] = mapped_column(String(64), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Per-kernel times from the board agent ([measure] profile = true); migration 0002.
    kernel_profile: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # Sampling, phases, memory and board state (migration 0005). NULL = not measured (older rows, failed
    # runs, or unavailable: the JSON columns then say why).
    warmup_runs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stop_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)  # ci-reached/max-repeat/max-s
    ci_rel: Mapped[float | None] = mapped_column(Float, nullable=True)  # 95 % CI half-width / median
    sampling: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    upload_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    upload_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    load_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    first_ms: Mapped[float | None] = mapped_column(Float, nullable=True)  # the first inference after load
    phases: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    peak_mem_mb: Mapped[float | None] = mapped_column(Float, nullable=True)  # session VmHWM on the board
    memory: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    board_state: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    warnings: Mapped[list | None] = mapped_column(JSON, nullable=True)


class TuningWorkload(Base):
    """A MetaSchedule workload (one TIR task's IRModule) in one tuning scope.

    Records are only comparable within a scope: the same workload timed on another target, another kind
    of board or by another TVM is another workload here. ``workload_hash`` is MetaSchedule's own hash of
    the module under ``module_equality`` (what JSONDatabase writes as the first field of a workload line).
    """

    __tablename__ = "tuning_workloads"
    __table_args__ = (
        UniqueConstraint(
            "workload_hash", "module_equality", "target_key", "board_key", "tvm_version", name="uq_tuning_workloads"
        ),
        Index("ix_tuning_workloads_scope", "target_key", "board_key", "tvm_version", "module_equality"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_hash: Mapped[str] = mapped_column(String(32))  # decimal uint64, as MetaSchedule prints it
    module_equality: Mapped[str] = mapped_column(String(32))  # structural / ignore-tensor / anchor-block
    target_key: Mapped[str] = mapped_column(String(64))  # sha256 of the canonical JSON of `target`
    target: Mapped[dict] = mapped_column(JSON)  # tvm Target.export() of the tuning target
    board_key: Mapped[str] = mapped_column(String(100))
    tvm_version: Mapped[str] = mapped_column(String(64))
    mod_b64: Mapped[str] = mapped_column(Text)  # the IRModule, base64 of tvm.ir.save_json (MetaSchedule's form)
    task_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class TuningWorkloadModel(Base):
    """Which models' tuning met a workload (for `tuning export --model`)."""

    __tablename__ = "tuning_workload_models"

    workload_id: Mapped[int] = mapped_column(ForeignKey("tuning_workloads.id"), primary_key=True)
    model_name: Mapped[str] = mapped_column(String(200), primary_key=True)


class TuningRecord(Base):
    """One measured MetaSchedule candidate: its schedule trace and run times (a JSONDatabase record line)."""

    __tablename__ = "tuning_records"
    __table_args__ = (
        UniqueConstraint("workload_id", "record_hash", name="uq_tuning_records"),
        # get_top_k: the fastest valid records of one workload
        Index("ix_tuning_records_top", "workload_id", "valid", "mean_run_s"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("tuning_workloads.id"))
    record_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the record's JSON: an import is idempotent
    trace: Mapped[list] = mapped_column(JSON)  # Trace.as_json(remove_postproc=False): [insts, decisions]
    run_secs: Mapped[list | None] = mapped_column(JSON, nullable=True)  # 1e10 = the run failed
    target: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    args_info: Mapped[list | None] = mapped_column(JSON, nullable=True)
    mean_run_s: Mapped[float] = mapped_column(Float)  # 1e10 when no valid time (MetaSchedule's sort key)
    valid: Mapped[bool] = mapped_column(Boolean)  # TuningRecord.IsValid(): a real time and a schedule
    source: Mapped[str | None] = mapped_column(String(200), nullable=True)  # "sweep <id>", "import <dir>", ...
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
