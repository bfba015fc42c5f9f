"""Sweep files: TOML in, a validated ``SweepSpec`` out, or one ``SpecError`` line naming the culprit.

A sweep file looks like::

    name = "quickstart"

    [[models]]
    onnx = "light_squeezenet"          # bundled with the onnx package, or: path = "models/net.onnx"
    inputs = { data_0 = [1, 3, 224, 224] }   # only where the file leaves dimensions symbolic

    [[targets]]
    preset = "host"                     # or: name = "..." with target = { kind = "llvm", ... }, board_key

    [axes]
    executor = ["vm-bytecode", "vm-compiled"]
    opt_level = [0, 2]
    pipeline = ["per-target"]

    [measure]
    number = 10
    repeat = 3

    [tuning]                            # only with a tuning axis: tuning = [0, 64, 512] in [axes]
    cost_model = "xgb"

    [tolerance]
    atol = 1e-4
    rtol = 1e-3
"""

from __future__ import annotations

import hashlib
import tomllib
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from tvmbench.core.errors import describe_missing
from tvmbench.core.records import (
    COST_MODELS,
    MODULE_EQUALITIES,
    PIPELINES,
    MeasureSettings,
    ModelRef,
    TargetSpec,
    TuningSettings,
    canonical_hash,
)
from workers.aot.boards import BOARDS, is_mcu_target
from workers.executors import registry
from workers.executors.registry import KERNEL_PATHS
from workers.onnx_model import (
    DEFAULT_INT_RANGE,
    MAX_TENSOR_BYTES,
    LoadedModel,
    ModelError,
    bundled_path,
    index_bounds,
    load_inputs_file,
    load_model,
)
from workers.targets import PRESETS, resolve_target


class SpecError(ValueError):
    """A sweep file is invalid; the message is one line naming the key or path and the fix."""


@dataclass(frozen=True)
class SweepSpec:
    name: str
    label: str
    models: tuple[ModelRef, ...]
    targets: tuple[TargetSpec, ...]
    executors: tuple[str, ...]
    opt_levels: tuple[int, ...]
    pipelines: tuple[str, ...]
    measure: MeasureSettings
    model_paths: dict[str, Path]  # sha256 -> file, for the builds
    source: str  # the TOML text, kept with the sweep so it can be resumed
    source_path: str
    kernels: tuple[str, ...] = ("c",)  # executors with a kernels axis (aot-c): "c" and/or "llvm" codegen
    tunings: tuple[int, ...] = (0,)  # MetaSchedule trial budgets; 0 = untuned
    tuning: TuningSettings = field(default_factory=TuningSettings)
    input_files: dict[str, Path] = field(default_factory=dict)  # sha256 -> .npz of a model's inputs
    default_target: bool = False  # the file has no [[targets]]: the "host" preset was used

    @property
    def sweep_id(self) -> str:
        """Content hash: the same file (and label) submitted twice is one sweep."""
        return canonical_hash(
            {
                # Input ranges or an inputs file only where given (older sweep ids stay the same).
                "models": [(m.sha256, m.inputs, *m.input_values().values()) for m in self.models],
                "targets": [t.__dict__ for t in self.targets],
                "executors": self.executors,
                "opt_levels": self.opt_levels,
                "pipelines": self.pipelines,
                "measure": self.measure.identity(),  # sampling keys only when set: older ids stay
                "label": self.label,
                # Only sweeps with an executor that takes the kernels axis carry it (older sweep ids stay the same).
                **({"kernels": self.kernels} if any(registry.get(e).kernel_paths for e in self.executors) else {}),
                # Likewise only tuned sweeps carry the tuning axis and settings.
                **({"tunings": self.tunings, "tuning": self.tuning.__dict__} if any(self.tunings) else {}),
            }
        )[:12]


_TOP_KEYS = {"name", "label", "models", "targets", "axes", "measure", "tolerance", "tuning"}
_MODEL_KEYS = {"name", "path", "onnx", "inputs", "input_ranges", "inputs_file"}
_TARGET_KEYS = {"preset", "name", "target", "board_key", "arch", "cross_compiler", "emulated"}
_AXES_DEFAULTS: dict[str, list[Any]] = {
    "executor": ["vm-bytecode"],
    "opt_level": [2],
    "pipeline": ["per-target"],
    "kernels": ["c"],
    "tuning": [0],
}
MAX_TUNING_BUDGET = 100_000  # trials per job; far beyond any useful search (20k is ResNet-50 territory)
_MEASURE_KEYS = {
    "number",
    "repeat",
    "min_repeat_ms",
    "cooldown_ms",
    "seed",
    "session_timeout_s",
    "device_wait_s",
    "profile",
    "warmup",
    "min_repeat",
    "max_repeat",
    "target_rel_ci",
    "max_s",
}
_TOLERANCE_KEYS = {"atol", "rtol"}
# Upper bounds: past them a job runs for days, or a timeout overflows where it reaches C++ as an int.
_MEASURE_LIMITS: dict[str, float] = {
    "number": 1_000_000,
    "repeat": 10_000,
    "min_repeat_ms": 3_600_000,
    "cooldown_ms": 3_600_000,
    "session_timeout_s": 86_400,
    "device_wait_s": 86_400,
    "seed": 2**63 - 1,
    # Sampling: 100,000 samples is already hours for a millisecond model; warmup is discarded time.
    "warmup": 10_000,
    "min_repeat": 100_000,
    "max_repeat": 100_000,
    "max_s": 43_200,
}


def _unknown(where: str, table: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise SpecError(f"{where}: unknown key {extra[0]!r}; allowed keys: {', '.join(sorted(allowed))}")


def _typed(where: str, value: Any, kind: type | tuple[type, ...], hint: str) -> Any:
    # bool is an int in Python; a sweep file that says opt_level = true is wrong, not 1.
    if isinstance(value, bool) and kind is not bool and (kind is int or (isinstance(kind, tuple) and bool not in kind)):
        raise SpecError(f"{where} = {value!r}: expected {hint}")
    if not isinstance(value, kind):
        raise SpecError(f"{where} = {value!r}: expected {hint}")
    return value


def _axis(where: str, value: Any, check: Callable[[Any], bool], hint: str) -> tuple[Any, ...]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise SpecError(f"{where} is empty: list at least one of {hint}")
    for v in values:
        if isinstance(v, bool) or not check(v):
            raise SpecError(f"{where}: {v!r} is not valid; use {hint}")
    return tuple(dict.fromkeys(values))  # drop duplicates, keep the order the user wrote


def _model(where: str, table: Any, base: Path) -> tuple[ModelRef, Path]:
    if not isinstance(table, dict):
        raise SpecError(f'{where}: expected a table like {{ path = "net.onnx" }}')
    _unknown(where, table, _MODEL_KEYS)
    if ("path" in table) == ("onnx" in table):
        raise SpecError(f'{where}: give exactly one of path = "file.onnx" or onnx = "light_squeezenet"')
    try:
        if "path" in table:
            path = base / _typed(f"{where}.path", table["path"], str, "a file path string")
            source = str(table["path"])
        else:
            path = bundled_path(_typed(f"{where}.onnx", table["onnx"], str, "a bundled model name"))
            source = f"onnx:{path.stem}"
        loaded: LoadedModel = load_model(path)
    except ModelError as exc:
        raise SpecError(f"{where}: {exc}") from None
    given = _typed(f"{where}.inputs", table.get("inputs", {}), dict, "a table of input name -> shape list")
    known = {name for name, _, _ in loaded.inputs}
    for name in given:
        if name not in known:
            raise SpecError(f"{where}.inputs: model {path.name} has no input {name!r}; its inputs: {sorted(known)}")
    inputs = []
    for name, dims, dtype in loaded.inputs:
        if name in given:
            shape = given[name]
            if not (
                isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
            ):
                raise SpecError(f"{where}.inputs.{name} = {shape!r}: expected a list of positive ints")
            if len(shape) != len(dims) or any(isinstance(d, int) and d != s for d, s in zip(dims, shape, strict=False)):
                raise SpecError(f"{where}.inputs.{name} = {shape}: the model declares {list(dims)}")
        elif all(isinstance(d, int) and d > 0 for d in dims):
            shape = list(dims)
        elif any(isinstance(d, int) and d == 0 for d in dims):
            raise SpecError(
                f"{where}: input {name!r} of {path.name} has a zero-size dimension {list(dims)}: nothing to "
                "compute or time; export the model with sizes of at least 1"
            )
        else:
            raise SpecError(
                f"{where}: input {name!r} of {path.name} has symbolic dims {list(dims)}; "
                f"add inputs = {{ {name} = [...] }} with concrete sizes"
            )
        size = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
        if size > MAX_TENSOR_BYTES:
            raise SpecError(
                f"{where}.inputs.{name} = {shape}: {size / 2**30:.1f} GiB per input, over the "
                f"{MAX_TENSOR_BYTES >> 30} GiB limit; give a smaller shape"
            )
        inputs.append((name, tuple(shape), dtype))
    name = _typed(f"{where}.name", table.get("name", path.stem), str, "a string")
    ranges = _input_ranges(where, table.get("input_ranges", {}), tuple(inputs), loaded, path)
    inputs_file = None
    if "inputs_file" in table:
        if "input_ranges" in table:
            raise SpecError(f"{where}: give input_ranges or inputs_file, not both (the file holds every value)")
        given_file = _typed(f"{where}.inputs_file", table["inputs_file"], str, 'a path like "inputs.npz"')
        inputs_file = base / given_file
        try:
            load_inputs_file(inputs_file, tuple(inputs))
        except ModelError as exc:
            raise SpecError(f"{where}.inputs_file: {exc}") from None
        ranges = ()
    model = ModelRef(
        name=name,
        sha256=loaded.sha256,
        source=source,
        inputs=tuple(inputs),
        value_ranges=ranges,
        inputs_file_sha256=hashlib.sha256(inputs_file.read_bytes()).hexdigest() if inputs_file else None,
    )
    return model, path, inputs_file


def _input_ranges(
    where: str, given: Any, inputs: tuple[tuple[str, tuple[int, ...], str], ...], loaded: LoadedModel, path: Path
) -> tuple[tuple[str, float, float], ...]:
    """Value ranges of the inputs: the sweep file's, else the size of the table an integer input indexes."""
    given = _typed(f"{where}.input_ranges", given, dict, "a table of input name -> [low, high]")
    dtypes = {name: dtype for name, _, dtype in inputs}
    ranges: dict[str, tuple[float, float]] = {}
    for name, bounds in given.items():
        if name not in dtypes:
            raise SpecError(
                f"{where}.input_ranges: model {path.name} has no input {name!r}; its inputs: {sorted(dtypes)}"
            )
        dtype = np.dtype(dtypes[name])
        integer = np.issubdtype(dtype, np.integer)
        number = int if integer else (int, float)
        if not (
            isinstance(bounds, list)
            and len(bounds) == 2
            and all(isinstance(b, number) and not isinstance(b, bool) for b in bounds)
            and bounds[0] <= bounds[1]
        ):
            kind = "integers" if integer else "numbers"
            raise SpecError(
                f"{where}.input_ranges.{name} = {bounds!r}: expected [low, high], two {kind} with low <= high"
            )
        if dtype == np.bool_:
            raise SpecError(f"{where}.input_ranges.{name}: input {name!r} is bool; it takes no range")
        if integer and not (np.iinfo(dtype).min <= bounds[0] and bounds[1] <= np.iinfo(dtype).max):
            raise SpecError(f"{where}.input_ranges.{name} = {bounds}: outside what {dtype.name} holds")
        ranges[name] = (bounds[0], bounds[1])
    # An integer input that indexes a table (Gather: embeddings, lookups) is drawn inside it unless the
    # file says otherwise; only a table smaller than the default draw changes anything.
    for name, size in index_bounds(loaded.proto, {n: s for n, s, _ in inputs}).items():
        if name not in ranges and np.issubdtype(np.dtype(dtypes[name]), np.integer) and size <= DEFAULT_INT_RANGE[1]:
            ranges[name] = (0, size - 1)
    return tuple((name, *ranges[name]) for name, _, _ in inputs if name in ranges)


def _target(where: str, table: Any) -> TargetSpec:
    if not isinstance(table, dict):
        raise SpecError(f'{where}: expected a table like {{ preset = "host" }}')
    _unknown(where, table, _TARGET_KEYS)
    if "preset" in table:
        preset = _typed(f"{where}.preset", table["preset"], str, "a preset name")
        if preset not in PRESETS:
            raise SpecError(f"{where}.preset = {preset!r} is unknown; presets: {', '.join(sorted(PRESETS))}")
        overrides = {k: v for k, v in table.items() if k != "preset"}
        if not overrides:
            return PRESETS[preset]
        name = overrides.pop("name", preset)
        merged = {
            **PRESETS[preset].__dict__,
            **({"tvm_target": overrides.pop("target")} if "target" in overrides else {}),
        }
        merged.update(overrides)
        merged["name"] = name
        return TargetSpec(**merged)
    if "name" not in table or "target" not in table:
        raise SpecError(f'{where}: give preset = "host", or name = "..." with target = {{ kind = "llvm", ... }}')
    name = _typed(f"{where}.name", table["name"], str, "a string")
    _typed(f"{where}.target", table["target"], dict, 'a TVM target table such as { kind = "llvm", mtriple = "..." }')
    for key, kind, hint in (
        ("board_key", str, "a tracker key string"),
        ("arch", str, "a machine name like aarch64"),
        ("cross_compiler", str, "a compiler command"),
        ("emulated", bool, "true or false"),
    ):
        if key in table:
            _typed(f"{where}.{key}", table[key], kind, hint)
    if "arch" not in table and name not in PRESETS:  # a preset's name brings its arch along
        raise SpecError(f'{where}: add arch = "aarch64" (the board\'s `uname -m`) to target {name!r}')
    return resolve_target(name, table)


def _measure(data: dict[str, Any]) -> MeasureSettings:
    measure = _typed("[measure]", data.get("measure", {}), dict, "a table")
    tolerance = _typed("[tolerance]", data.get("tolerance", {}), dict, "a table")
    _unknown("[measure]", measure, _MEASURE_KEYS)
    _unknown("[tolerance]", tolerance, _TOLERANCE_KEYS)
    values: dict[str, Any] = {}
    for f in fields(MeasureSettings):
        section, where = (tolerance, "tolerance") if f.name in _TOLERANCE_KEYS else (measure, "measure")
        if f.name not in section:
            continue
        value = section[f.name]
        if f.type in ("bool", bool):
            values[f.name] = _typed(f"{where}.{f.name}", value, bool, "true or false")
            continue
        integer = f.type in ("int", int, "int | None")
        if integer:
            _typed(f"{where}.{f.name}", value, int, "a non-negative integer")
        else:
            _typed(f"{where}.{f.name}", value, (int, float), "a number")
        if value != value:  # nan: every comparison with it is false, so every output would be "wrong"
            raise SpecError(f"{where}.{f.name} = nan: give a number")
        if value < 0 or (f.name in _POSITIVE_KEYS and value == 0):
            raise SpecError(f"{where}.{f.name} = {value}: must be {'positive' if value == 0 else 'non-negative'}")
        if f.name in _MEASURE_LIMITS and not value <= _MEASURE_LIMITS[f.name]:
            raise SpecError(
                f"{where}.{f.name} = {value}: at most {_MEASURE_LIMITS[f.name]:g} (a sweep that never ends "
                "helps nobody; cancel and resume work in steps)"
            )
        values[f.name] = value if integer else float(value)
    _check_sampling(measure, values)
    return MeasureSettings(**values)


def _tuning(data: dict[str, Any]) -> TuningSettings:
    """The [tuning] table: MetaSchedule's search settings, each checked like every other key."""
    table = _typed("[tuning]", data.get("tuning", {}), dict, "a table")
    allowed = {f.name for f in fields(TuningSettings)} | {"trials_per_task"}
    _unknown("[tuning]", table, allowed)
    if "trials_per_task" in table and "max_trials_per_task" in table:
        raise SpecError("[tuning]: give trials_per_task or max_trials_per_task, not both (they are the same)")
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = "max_trials_per_task" if key == "trials_per_task" else key
        where = f"tuning.{key}"
        if name == "cost_model":
            if value not in COST_MODELS:
                raise SpecError(f"{where} = {value!r}: use " + " or ".join(f'"{c}"' for c in COST_MODELS))
        elif name == "module_equality":
            if value not in MODULE_EQUALITIES:
                raise SpecError(f"{where} = {value!r}: use " + " or ".join(f'"{c}"' for c in MODULE_EQUALITIES))
        elif name in ("builder_timeout_s", "runner_timeout_s", "device_wait_s"):
            _typed(where, value, (int, float), "a number of seconds")
            if not 0 < value <= 86_400:
                raise SpecError(f"{where} = {value}: must be positive seconds, at most a day")
            value = float(value)
        else:  # the integer settings
            _typed(where, value, int, "an integer")
            low, high = (0, 2**31 - 1) if name == "seed" else (1, MAX_TUNING_BUDGET)
            if not low <= value <= high:
                raise SpecError(f"{where} = {value}: must be an integer from {low} to {high}")
        values[name] = value
    return TuningSettings(**values)


def _no_control_characters(where: str, value: Any) -> None:
    """Refuse control characters in any string: names and paths are printed on terminals, where an escape
    sequence (ESC [ ...) would recolour, retitle or hide text on the screen of whoever lists the results."""
    if isinstance(value, dict):
        for key, item in value.items():
            _no_control_characters(f"{where}.{key}" if where else str(key), item)
            _no_control_characters(f"{where} key", key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _no_control_characters(f"{where}[{i}]", item)
    elif isinstance(value, str):
        bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
        if bad is not None:
            raise SpecError(
                f"{where} = {value!r} contains the control character U+{ord(bad):04X}; remove it "
                "(names and paths are printed on terminals)"
            )


_POSITIVE_KEYS = {"number", "repeat", "session_timeout_s", "min_repeat", "max_repeat", "target_rel_ci", "max_s"}


def _check_sampling(measure: dict[str, Any], values: dict[str, Any]) -> None:
    """The sampling keys must make one stop rule: fixed ``repeat``, or adaptive ``target_rel_ci``."""
    adaptive = values.get("target_rel_ci") is not None
    if adaptive and "repeat" in measure:
        raise SpecError(
            "measure.repeat and measure.target_rel_ci: choose one; repeat is a fixed sample count, "
            "target_rel_ci samples until the CI is narrow enough (bound it with min_repeat/max_repeat/max_s)"
        )
    if not adaptive:
        for key in ("min_repeat", "max_repeat"):
            if key in measure:
                raise SpecError(
                    f"measure.{key} bounds adaptive sampling: add target_rel_ci (e.g. 0.02), or use repeat = N"
                )
    if adaptive and values["target_rel_ci"] >= 1:
        raise SpecError(
            f"measure.target_rel_ci = {values['target_rel_ci']}: a fraction of the median, e.g. 0.02 for 2 %"
        )
    low, high = values.get("min_repeat"), values.get("max_repeat")
    if low is not None and high is not None and low > high:
        raise SpecError(f"measure.min_repeat = {low} is above measure.max_repeat = {high}")
    timeout = values.get("session_timeout_s", MeasureSettings.session_timeout_s)
    if values.get("max_s") is not None and values["max_s"] > timeout / 2:
        raise SpecError(
            f"measure.max_s = {values['max_s']:g} must be at most half of session_timeout_s = {timeout:g} "
            "(the session also uploads, loads, warms up and checks the model): lower max_s or raise "
            "session_timeout_s"
        )


def parse_spec(text: str, *, base: Path, source_path: str = "<string>") -> SweepSpec:
    """Validate sweep-file text; relative model paths resolve against ``base``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source_path}: not valid TOML ({exc}); fix the syntax at that line") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise SpecError(f"{source_path}: arrays or tables nested too deeply to read; flatten them") from None
    _unknown("sweep file", data, _TOP_KEYS)
    _no_control_characters("", data)
    name = _typed("name", data.get("name", Path(source_path).stem), str, "a string")
    label = _typed("label", data.get("label", ""), str, "a string")

    raw_models = data.get("models")
    if not isinstance(raw_models, list) or not raw_models:
        raise SpecError(
            'models: add at least one [[models]] table with path = "file.onnx" or onnx = "light_squeezenet"'
        )
    models, paths, input_files = [], {}, {}
    for i, table in enumerate(raw_models):
        model, path, inputs_file = _model(f"models[{i}]", table, base)
        models.append(model)
        paths[model.sha256] = path
        if inputs_file is not None:
            input_files[model.inputs_file_sha256] = inputs_file
    seen: dict[Any, int] = {}
    for i, m in enumerate(models):  # the same content with the same inputs is the same job under two names
        same = seen.setdefault(canonical_hash([m.sha256, m.inputs, m.input_values()]), i)
        if same != i:
            raise SpecError(
                f"models[{i}] ({m.name}) is the same model as models[{same}] ({models[same].name}): the same "
                "file content with the same inputs; list it once (or give it other inputs or input_ranges)"
            )
    if len({m.name for m in models}) != len(models):
        raise SpecError('models: two models share a name; give each a distinct name = "..."')

    default_target = "targets" not in data
    raw_targets = data.get("targets", [{"preset": "host"}])
    if not isinstance(raw_targets, list) or not raw_targets:
        raise SpecError('targets: add at least one [[targets]] table, e.g. preset = "host"')
    targets = tuple(_target(f"targets[{i}]", t) for i, t in enumerate(raw_targets))
    if len({t.name for t in targets}) != len(targets):
        raise SpecError('targets: two targets share a name; give each a distinct name = "..."')

    axes = _typed("[axes]", data.get("axes", {}), dict, "a table")
    _unknown("[axes]", axes, set(_AXES_DEFAULTS))
    executors = _axis(
        "axes.executor",
        axes.get("executor", _AXES_DEFAULTS["executor"]),
        lambda v: v in registry.NAMES,
        " or ".join(f'"{e}"' for e in registry.NAMES),
    )
    opt_levels = _axis(
        "axes.opt_level",
        axes.get("opt_level", _AXES_DEFAULTS["opt_level"]),
        lambda v: isinstance(v, int) and 0 <= v <= 3,
        "integers 0 to 3",
    )
    pipelines = _axis(
        "axes.pipeline",
        axes.get("pipeline", _AXES_DEFAULTS["pipeline"]),
        lambda v: v in PIPELINES,
        " or ".join(f'"{p}"' for p in PIPELINES),
    )
    kernels = _axis(
        "axes.kernels",
        axes.get("kernels", _AXES_DEFAULTS["kernels"]),
        lambda v: v in KERNEL_PATHS,
        " or ".join(f'"{k}"' for k in KERNEL_PATHS),
    )
    tunings = _axis(
        "axes.tuning",
        axes.get("tuning", _AXES_DEFAULTS["tuning"]),
        lambda v: isinstance(v, int) and 0 <= v <= MAX_TUNING_BUDGET,
        f"trial budgets: integers from 0 (untuned) to {MAX_TUNING_BUDGET}",
    )
    if "tuning" in data and not any(tunings):
        raise SpecError("[tuning]: the sweep tunes nothing; add tuning = [0, 64] (trial budgets) to [axes]")
    tuning = _tuning(data)
    if any(tunings):
        _check_tunable(targets, executors)
    _check_mcu_pairing(targets, executors)

    return SweepSpec(
        kernels=kernels,
        name=name,
        label=label,
        models=tuple(models),
        targets=targets,
        executors=executors,
        opt_levels=opt_levels,
        pipelines=pipelines,
        measure=_measure(data),
        tunings=tunings,
        tuning=tuning,
        model_paths=paths,
        source=text,
        source_path=source_path,
        input_files=input_files,
        default_target=default_target,
    )


def _check_tunable(targets: tuple[TargetSpec, ...], executors: tuple[str, ...]) -> None:
    """Tuning (MetaSchedule on the farm) applies to the executors whose entry tunes the target's kind."""
    from workers.targets import target_kind

    tuners = registry.tunable_names()
    if not set(executors) & set(tuners):
        raise SpecError(f'axes.tuning: tuning needs a Relax VM executor; add "{tuners[0]}" to axes.executor')
    if not any(registry.tunable(e, t.tvm_target) for e in executors for t in targets):
        raise SpecError(
            f"axes.tuning: no target to tune; tuning covers {' and '.join(registry.tunable_kinds())} (CPU) targets, "
            f"and {targets[0].name} is {target_kind(targets[0].tvm_target)}"
        )


def _check_mcu_pairing(targets: tuple[TargetSpec, ...], executors: tuple[str, ...]) -> None:
    """Each target needs an executor of the sweep that builds for it (microcontrollers take only aot-c,
    the other targets never take it), and a microcontroller-only executor needs a microcontroller."""
    sample_mcu = PRESETS[next(iter(BOARDS))]
    for e in executors:
        if registry.accepts(e, sample_mcu) and not any(registry.accepts(e, t) for t in targets):
            raise SpecError(
                f'axes.executor: "{e}" needs a microcontroller target; add [[targets]] preset = '
                f'"{next(iter(BOARDS))}" (presets: {", ".join(BOARDS)})'
            )
        # A VM executor beside aot-c on microcontrollers only plans no jobs of its own: allowed.
    for t in targets:
        if any(registry.accepts(e, t) for e in executors):
            continue
        fitting = next(n for n in registry.NAMES if registry.accepts(n, t))
        if is_mcu_target(t.tvm_target):
            raise SpecError(f'targets: {t.name} is a microcontroller: add "{fitting}" to axes.executor')
        raise SpecError(f'targets: {t.name} is not a microcontroller; add a Relax VM executor such as "{fitting}"')


def load_spec(path: str | Path, *, label: str | None = None) -> SweepSpec:
    """Read and validate a sweep file; ``label`` (if given) overrides the file's, making a new sweep."""
    path = Path(path)
    if not path.is_file():
        what = "no such sweep file" if not path.exists() and not path.is_symlink() else describe_missing(path)
        raise SpecError(f"{path}: {what}; give the path to a .toml file")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file; a sweep file is TOML") from None
    # The absolute path is stored with the sweep: `sweep resume` then works from any directory.
    spec = parse_spec(text, base=path.resolve().parent, source_path=str(path.resolve()))
    if label is not None:
        _no_control_characters("--label", label)
        spec = SweepSpec(**{**spec.__dict__, "label": label})
    return spec
