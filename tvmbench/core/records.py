"""Records passed between pipeline stages: spec -> plan -> build -> measure -> store.

Frozen dataclasses with no behaviour beyond derived fields: the vocabulary every stage shares. Which
executors exist, and what each does, is the registry's (workers/executors/registry.py). Failures travel
as values with a kind (see ``ErrorKind``), never as exceptions crossing a stage.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# Who is at fault, after LAVA's split; the retry policy and board health follow from the kind.
ErrorKind = Literal[
    "model",  # bad input: the model cannot be imported
    "build",  # the compiler failed, or the artifact cannot run on the board's architecture
    "device-unavailable",  # no board of the key became free before the deadline
    "timeout",  # the session ran past its deadline on the board
    "infra",  # the board or the network died: retry elsewhere
    "wrong-result",  # ran, but outputs differ from ONNX Runtime beyond tolerance
    "cancelled",
]
ERROR_KINDS: tuple[str, ...] = (
    "model",
    "build",
    "device-unavailable",
    "timeout",
    "infra",
    "wrong-result",
    "cancelled",
)
# A job's status is "ok", one of the error kinds (final), or one of these (not final yet).
PENDING_STATUSES: tuple[str, ...] = ("pending", "pending-device")
FINAL_STATUSES: tuple[str, ...] = ("ok", *ERROR_KINDS)

# "per-target": relax.get_default_pipeline(target) (fuses ops, dlight on GPUs);
# "generic": relax.get_pipeline("default"), what tvm.compile uses (no FuseOps on CPU);
# "per-target-fold-bn": per-target after FoldBatchnormToConv2D + FoldConstant (a batch norm after a
# convolution goes into its weights and a bias, as ONNX Runtime's graph optimizer does);
# "per-target-fold-bn-shuffle": that, and a channel shuffle read by the convolution after it instead of
# copied (workers/channel_shuffle.py); "per-target-fold-bn-shuffle-concat": that, and a convolution of a
# channel concatenation summed over its parts instead of the concatenation copied (workers/concat_split.py).
# workers/rewrites.py holds the rewrites each runs before the layout axis and per-target.
PIPELINES: tuple[str, ...] = (
    "per-target",
    "generic",
    "per-target-fold-bn",
    "per-target-fold-bn-shuffle",
    "per-target-fold-bn-shuffle-concat",
)

# The data layouts of the layout axis (``[axes] layout``): "NCHW" is the module as imported (ONNX is NCHW),
# the others convert its 2-D convolutions before the pipeline (workers/layouts.py): "NHWC" puts the
# channels innermost, "NCHW<k>c" splits them into blocks of k (a vector register's floats).
LAYOUTS: tuple[str, ...] = ("NCHW", "NHWC", "NCHW4c", "NCHW8c", "NCHW16c")


def canonical_json(obj: Any) -> str:
    """The canonical JSON of ``obj``: sorted keys, no whitespace, str() for what JSON has no type for."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def canonical_hash(obj: Any) -> str:
    """sha256 hex of the canonical JSON of ``obj`` (sorted keys, no whitespace)."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


_encode_str = json.encoder.encode_basestring_ascii  # what json.dumps uses for a str (ensure_ascii)


def _leaf(value: Any) -> str:
    """``json.dumps`` of a scalar, without its per-call set-up (called for every job of a plan)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        return _encode_str(value)
    if type(value) is int:
        return int.__repr__(value)
    return canonical_json(value)


def _hash_members(members: dict[str, str]) -> str:
    """``canonical_hash`` of a dict whose values are given already as canonical JSON (the same digest).

    Job keys are computed for every job of a plan (10,000 and more): the parts shared by many jobs
    (model inputs, target, measurement settings) are serialised once, not once per job.
    """
    text = "{" + ",".join(f"{_encode_str(k)}:{v}" for k, v in sorted(members.items())) + "}"
    return hashlib.sha256(text.encode()).hexdigest()


def _once(job: Job, name: str, make: Any) -> Any:
    """``make()`` cached on the (frozen) job under ``name``; not a field, so not in eq, hash or replace."""
    cached = job.__dict__.get(name)
    if cached is None:
        cached = make()
        object.__setattr__(job, name, cached)
    return cached


@functools.lru_cache(maxsize=1024)
def _json_of(value: Any) -> str:
    """Canonical JSON of a hashable record part (model inputs, measurement settings), serialised once."""
    if isinstance(value, MeasureSettings):
        return canonical_json(value.identity())
    return canonical_json(value)


_TARGET_JSON: dict[int, tuple[Any, str]] = {}  # id(target) -> (target, its canonical JSON); holds the target


def _target_json(target: TargetSpec) -> str:
    """Canonical JSON of a target's TVM dict (a dict: not hashable), serialised once per target object."""
    hit = _TARGET_JSON.get(id(target))
    if hit is None or hit[0] is not target:
        if len(_TARGET_JSON) > 4096:
            _TARGET_JSON.clear()
        hit = _TARGET_JSON[id(target)] = (target, canonical_json(target.tvm_target))
    return hit[1]


@dataclass(frozen=True)
class ModelRef:
    """An ONNX model by content, with the concrete input signature it is built for."""

    name: str
    sha256: str
    source: str  # the path as given, or "onnx:<name>" for a model bundled with the onnx package
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # (name, shape, dtype)
    # Where the input values come from when not the default draw: (name, low, high) inclusive ranges
    # (given in the sweep file, or the size of the table an integer input indexes), or the sha256 of an
    # .npz inputs file. Empty/None for the default, so older job keys stay the same.
    value_ranges: tuple[tuple[str, float, float], ...] = ()
    inputs_file_sha256: str | None = None

    @property
    def shape_dict(self) -> dict[str, list[int]]:
        return {name: list(shape) for name, shape, _ in self.inputs}

    def input_values(self) -> dict[str, Any]:
        """What decides the input values beyond the seed, for identities; {} for the default draw."""
        if self.inputs_file_sha256:
            return {"inputs_file": self.inputs_file_sha256}
        return {"value_ranges": [list(r) for r in self.value_ranges]} if self.value_ranges else {}


@dataclass(frozen=True)
class TargetSpec:
    """Where a program is built for and which boards may run it."""

    name: str
    tvm_target: dict[str, Any]  # JSON dict form, or {"tag": "<tvm tag>"}; TVM 0.27 rejects option strings
    board_key: str
    arch: str  # machine the artifact must run on: x86_64, aarch64, armv7l, riscv64, ...
    cross_compiler: str | None = None  # e.g. "aarch64-linux-gnu-gcc"; None builds with the host's cc
    cross_compiler_package: str | None = None  # Debian packages (space-separated): compiler and its libc
    emulated: bool = False  # timings come from an emulator and say nothing about real speed


@dataclass(frozen=True)
class MeasureSettings:
    """How a program is timed and checked; part of a job's identity."""

    number: int = 10
    repeat: int = 3
    min_repeat_ms: int = 0
    cooldown_ms: int = 0
    seed: int = 0
    atol: float = 1e-4
    rtol: float = 1e-3
    session_timeout_s: float = 120.0
    device_wait_s: float = 60.0
    profile: bool = False  # also time every kernel call on the board (needs the board agent)
    # Sampling (workers/sampling.py): runs discarded before sampling; with target_rel_ci, sample between
    # min_repeat and max_repeat until the 95 % CI half-width of the median is within that fraction of it;
    # max_s caps the sampling time of a job in either mode.
    warmup: int = 0
    min_repeat: int | None = None
    max_repeat: int | None = None
    target_rel_ci: float | None = None
    max_s: float | None = None

    def identity(self) -> dict[str, Any]:
        """The settings as they enter job keys and sweep ids: sampling keys left at their defaults are
        omitted, so sweeps written before they existed keep their keys (and their stored results)."""
        values = asdict(self)
        for name in SAMPLING_KEYS:
            if values[name] == _SAMPLING_DEFAULTS[name]:
                del values[name]
        return values


SAMPLING_KEYS: tuple[str, ...] = ("warmup", "min_repeat", "max_repeat", "target_rel_ci", "max_s")
_SAMPLING_DEFAULTS: dict[str, Any] = {
    "warmup": 0,
    "min_repeat": None,
    "max_repeat": None,
    "target_rel_ci": None,
    "max_s": None,
}


# MetaSchedule cost models and module-equality rules a sweep may name in its [tuning] table.
DEFAULT_POPULATION = 512  # MetaSchedule's EvolutionarySearch population_size
COST_MODELS: tuple[str, ...] = ("xgb", "random", "mlp")
MODULE_EQUALITIES: tuple[str, ...] = ("structural", "ignore-tensor", "anchor-block")


@dataclass(frozen=True)
class TuningSettings:
    """How MetaSchedule searches (the ``[tuning]`` table); the budget itself is the ``tuning`` axis."""

    max_trials_per_task: int | None = None  # None: a task may get the whole budget
    num_trials_per_iter: int = 16  # candidates per search round (MetaSchedule's default is 64)
    cost_model: str = "xgb"
    seed: int = 0
    module_equality: str = "structural"
    num_cores: int | None = None  # the boards' cores when the target does not say ("num-cores")
    builder_timeout_s: float = 120.0  # one candidate build on a warm worker
    runner_timeout_s: float = 60.0  # one candidate's board session: upload, load, timing
    device_wait_s: float = 60.0  # waiting for a free board, per candidate
    # Train the cost model on the scope's stored records and seed new workloads from similar ones
    # (workers/tuning/warm_start.py). In the build key only when off: the keys of before stay.
    warm_start: bool = True
    # Schedules the evolutionary search evolves and ranks for each batch after a task's first. On 2 cores
    # that search is most of a round (README, "Tuning: where it stands"). In the build key only when not
    # MetaSchedule's default, so the keys of before stay.
    population: int = DEFAULT_POPULATION
    # Ray workers that search one model's tasks at once, each a group of them (workers/tuning/parallel.py):
    # for clusters whose boards are not the driver's machine. In the build key only when above 1.
    search_workers: int = 1


@dataclass(frozen=True)
class AutoBudget:
    """When the auto budget (``tuning = ["auto"]``) stops: the first of its rules that holds
    (workers/tuning/stopping.py). ``max_trials`` always ends it, so a search never runs unbounded."""

    # A baseline executor's name ("onnxruntime": its median of the model on the board key), a number of
    # ms, or None: no until rule.
    until: str | float | None = None
    max_minutes: float = 15.0
    plateau_trials: int | None = None  # the plateau rule: the last N trials gained less than plateau_gain
    plateau_gain: float | None = None
    max_trials: int = 2000


@dataclass(frozen=True)
class Job:
    """One point of the sweep matrix: a model on a target in one build configuration."""

    model: ModelRef
    target: TargetSpec
    executor: str
    opt_level: int
    pipeline: str
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    # The kernels axis ("c" or "llvm" code generation), for executors that take it (aot-c); None for the others.
    kernels: str | None = None
    tuning: int = 0  # MetaSchedule trial budget; 0 = untuned (the axis "tuning"); the cap of an auto budget
    tuning_settings: TuningSettings = field(default_factory=TuningSettings)
    # The auto budget's stop rules (``tuning = ["auto"]``); None for a fixed budget (whose keys stay as they were).
    tuning_auto: AutoBudget | None = None
    # The TVM toolchain of the releases axis (``[axes] tvm``), as orchestrator/toolchains.py writes it: a
    # release ("0.26.0"), a wheel's absolute path, or "python:" and an interpreter's path. None: no axis,
    # the TVM tvmbench runs on (and the keys every sweep had before the axis).
    toolchain: str | None = None
    # The data layout of the layout axis (one of LAYOUTS), for executors that take it (the Relax VM);
    # None: no axis, or an executor without it (the keys every job had before the axis).
    layout: str | None = None

    def build_config(self) -> dict[str, Any]:
        """What determines the compiled program (not how it is measured)."""
        config = {
            "model": self.model.sha256,
            "inputs": [list(i) for i in self.model.inputs],
            "target": self.target.tvm_target,
            "cross_compiler": self.target.cross_compiler,
            "executor": self.executor,
            "opt_level": self.opt_level,
            "pipeline": self.pipeline,
        }
        if self.kernels is not None:  # executors without the axis keep the keys they always had
            config["kernels"] = self.kernels
        if self.tuning:  # untuned jobs keep the keys they always had
            config["tuning"] = build_config_tuning(self)
        if self.toolchain is not None:  # likewise jobs of sweeps without a tvm axis
            config["toolchain"] = self.toolchain
        if self.layout is not None:  # likewise jobs of sweeps without a layout axis
            config["layout"] = self.layout
        return config

    def lowering_key(self) -> str:
        """What determines the program before codegen: ``build_config()`` without the executor.

        Executors that lower alike (the Relax VM modes) build one untuned configuration from one pipeline run.
        """
        config = self.build_config()
        del config["executor"]
        return canonical_hash(config)

    def _config_members(self) -> dict[str, str]:
        """``build_config()`` with each value as its canonical JSON, shared parts serialised once."""

        def make() -> dict[str, str]:
            members = {
                "model": _leaf(self.model.sha256),
                "inputs": _json_of(self.model.inputs),
                "target": _target_json(self.target),
                "cross_compiler": _leaf(self.target.cross_compiler),
                "executor": _leaf(self.executor),
                "opt_level": _leaf(self.opt_level),
                "pipeline": _leaf(self.pipeline),
            }
            if self.kernels is not None:
                members["kernels"] = _leaf(self.kernels)
            if self.tuning:  # must equal build_config()'s "tuning" (tests/test_tuning_spec.py checks it)
                members["tuning"] = canonical_json(build_config_tuning(self))
            if self.toolchain is not None:
                members["toolchain"] = _leaf(self.toolchain)
            if self.layout is not None:
                members["layout"] = _leaf(self.layout)
            return members

        return _once(self, "_members", make)

    @property
    def key(self) -> str:
        """Stable identity of the job: the same on any machine for the same sweep file.

        Equal to ``canonical_hash({**build_config(), "board_key": ..., "measure": measure.identity(),
        **model.input_values()})``, computed from parts serialised once.
        """

        def make() -> str:
            members = {**self._config_members(), "board_key": _leaf(self.target.board_key)}
            members["measure"] = _json_of(self.measure)
            # other inputs, other verdict; the build stays the same
            members.update({k: canonical_json(v) for k, v in self.model.input_values().items()})
            return _hash_members(members)

        return _once(self, "_key", make)

    def build_key(self, tvm_version: str) -> str:
        """Identity of the artifact: a TVM upgrade builds anew (``canonical_hash({**build_config(), "tvm": v})``)."""
        keys = _once(self, "_build_keys", dict)
        if tvm_version not in keys:
            keys[tvm_version] = _hash_members({**self._config_members(), "tvm": _leaf(tvm_version)})
        return keys[tvm_version]


def build_config_tuning(job: Job) -> dict[str, Any]:
    """The tuning part of a tuned job's build config: budget, board key (timings on the key's boards
    chose the program) and the [tuning] settings; an auto budget's stop rules too (only there: the keys of
    fixed budgets stay as they were)."""
    settings = asdict(job.tuning_settings)
    if settings["warm_start"]:  # the default: tuned keys stay what they were before the setting
        del settings["warm_start"]
    if settings["population"] == DEFAULT_POPULATION:  # likewise
        del settings["population"]
    if settings["search_workers"] == 1:  # likewise
        del settings["search_workers"]
    config = {"budget": job.tuning, "board_key": job.target.board_key, **settings}
    if job.tuning_auto is not None:
        config.update(budget="auto", auto=asdict(job.tuning_auto))
    return config


@dataclass(frozen=True)
class Build:
    """What compiling one job produced, or why it did not."""

    build_key: str
    status: str  # "ok", "model" or "build"
    error: str | None = None
    fingerprint: str | None = None  # structural hash of the lowered IR plus executor and target
    pass_trace: tuple[str, ...] = ()
    kernel_count: int | None = None
    compile_s: float | None = None
    artifact_sha256: str | None = None
    artifact_size: int | None = None
    artifact_arch: str | None = None
    tvm_version: str | None = None
    ffi_version: str | None = None
    host: str | None = None
    # Microcontroller builds: flash_bytes (text + weights), ram_bytes (arena, workspace, I/O, stack
    # estimate) and their parts. Relax VM builds (workers/memory_plan.py): params_bytes, planned_bytes
    # (after StaticPlanBlockMemory) and ram_bytes = their sum. None when not known.
    memory: dict[str, Any] | None = None
    # How many of pass_trace's passes ran before codegen (the Relax pipeline); None when not split.
    pipeline_passes: int | None = None
    # Set when codegen was skipped: the build key whose identical program (same fingerprint) compiled
    # the artifact this build uses (workers/program_index.py); the driver fills in its artifact.
    reused_from: str | None = None
    # MetaSchedule tuning provenance (None when untuned): budget, trials_run, trials_from_records, tasks
    # [{name, weight, flops, trials, best_us, records_found}], failed_trials {kind: n}, errors (samples),
    # tuning_s, build_s, board_wait_s, run_s, cost_model, seed, database; an auto budget adds auto (its
    # rules and baseline), stopped_by (the rule that ended it) and stop (the values that rule compared).
    tuning: dict[str, Any] | None = None
    # The layout axis' conversion (None without the axis): layout, whether ConvertLayout ran, the desired
    # layouts it was given, conv2d calls found and converted, transposes it added (workers/layouts.py).
    layout: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Run:
    """One attempt to run a job's program on a board."""

    job_key: str
    attempt: int
    status: str  # "ok" or an ErrorKind
    board_id: str | None = None
    error: str | None = None
    samples_ms: tuple[float, ...] = ()  # one mean per repeat, as time_evaluator reports them
    median_ms: float | None = None
    mean_ms: float | None = None
    std_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    emulated: bool = False
    load_avg_1m: float | None = None  # host load when the timing started
    builds_in_flight: int | None = None  # builds running on this machine while timing (0 when fenced)
    equivalent_to: str | None = None  # job key whose identical program was measured instead
    board_facts: dict[str, Any] | None = None
    kernel_profile: dict[str, Any] | None = None  # per-kernel times, or {"available": False, "reason": ...}
    health: str | None = None  # "ok" / "failed" when the board ran the golden model before this attempt
    started_at: float | None = None
    finished_at: float | None = None
    # What samples_ms/median_ms/... count: "ms", or "instructions" for emulated microcontrollers (a
    # deterministic count from qemu -icount, never to be ranked against milliseconds).
    unit: str = "ms"
    # How sampling ended (workers/sampling.py): warmup count, stop reason, achieved CI and its details.
    warmup_runs: int | None = None
    stop_reason: str | None = None
    ci_rel: float | None = None
    sampling: dict[str, Any] | None = None
    # Phases before the steady state: upload, module load, first inference (None: not measured; the
    # phases dict then says why).
    upload_bytes: int | None = None
    upload_s: float | None = None
    load_s: float | None = None
    first_ms: float | None = None
    phases: dict[str, Any] | None = None
    # Resident memory of the board's session process (VmHWM, MB) and the readings it comes from, or
    # {"available": False, "reason": ...}.
    peak_mem_mb: float | None = None
    memory: dict[str, Any] | None = None
    # Board state before/after the samples (workers/board_state.py) and the warnings drawn from it.
    board_state: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# MetaSchedule's stand-in run time of a candidate that failed to build or run (kMaxMeanTime).
MS_FAILED_RUN_S = 1e10


@dataclass(frozen=True)
class TuningScope:
    """Where tuning records are valid: one target, one kind of board, one TVM, one module equality.

    A record timed on another board key, for another target or by another TVM is not evidence here.
    ``target`` is the tuning target as ``tvm.target.Target(...).export()`` gives it.
    """

    target: dict[str, Any]
    board_key: str
    tvm_version: str
    module_equality: str = "structural"

    @property
    def target_key(self) -> str:
        return canonical_hash(self.target)
