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

    tvm = ["0.27.0.post1", "0.26.0"]   # optional: TVM releases, wheel paths or { python = PATH }
    layout = ["NCHW", "NHWC", "NCHW8c"] # optional: data layouts of the Relax VM builds

    [measure]
    number = 10
    repeat = 3

    [tuning]                            # only with a tuning axis: tuning = [0, 64, 512] or [0, "auto"] in [axes]
    cost_model = "xgb"
    until = "onnxruntime"               # the auto budget's stop rules (also max_minutes, plateau, max_trials)

    [tolerance]
    atol = 1e-4
    rtol = 1e-3
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from orchestrator.spec.checks import SpecError, axis, checked_name, no_control_characters, typed, unknown_keys
from orchestrator.spec.matrix import check_size
from orchestrator.spec.measure import parse_measure
from orchestrator.spec.models import parse_model
from orchestrator.spec.targets import check_distinct, check_mcu_pairing, check_tunable, parse_target
from orchestrator.spec.tuning import AUTO, MAX_TUNING_BUDGET, parse_auto, parse_tuning
from orchestrator.toolchains import INTERPRETER, canonical, shown
from tvmbench.core.errors import describe_missing
from tvmbench.core.records import (
    LAYOUTS,
    PIPELINES,
    AutoBudget,
    MeasureSettings,
    ModelRef,
    TargetSpec,
    TuningSettings,
    canonical_hash,
)
from workers.executors import registry
from workers.executors.registry import KERNEL_PATHS
from workers.toolchains.boards import installed_version
from workers.toolchains.spec import parse as parse_toolchain
from workers.toolchains.toolchain import ToolchainError


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
    tunings: tuple[int | str, ...] = (0,)  # MetaSchedule trial budgets; 0 = untuned; "auto" stops by itself
    tuning: TuningSettings = field(default_factory=TuningSettings)
    tuning_auto: AutoBudget | None = None  # the auto budget's stop rules, when tunings has "auto"
    input_files: dict[str, Path] = field(default_factory=dict)  # sha256 -> .npz of a model's inputs
    default_target: bool = False  # the file has no [[targets]]: the "host" preset was used
    # The tvm axis: each entry's toolchain text (orchestrator/toolchains.canonical); () without the axis.
    toolchains: tuple[str, ...] = ()
    # The layout axis (LAYOUTS, in the order written); () without the axis.
    layouts: tuple[str, ...] = ()

    def read_models(self) -> dict[str, bytes]:
        """Each model file's bytes by sha256, checked against what was read when the file was loaded.

        A file re-exported while the sweep started (the farm and Ray take seconds) would be built under
        the old model's hash: its rows would claim a model that was never measured. SpecError instead.
        """
        data = {}
        for sha, path in self.model_paths.items():
            try:
                data[sha] = path.read_bytes()
            except OSError as exc:
                raise SpecError(f"{path}: cannot be read now ({exc.strerror}); put it back and run again") from None
            if hashlib.sha256(data[sha]).hexdigest() != sha:
                raise SpecError(
                    f"{path} changed since the sweep file was read (it was {sha[:12]}); run the sweep again "
                    "to plan it for the file as it is now, or put the old file back"
                )
        return data

    @cached_property  # a frozen spec hashes to one id; a plan of 24,000 jobs asked for it per job (13 s)
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
                # And only sweeps with the auto budget its stop rules.
                **({"tuning_auto": self.tuning_auto.__dict__} if self.tuning_auto is not None else {}),
                # And only sweeps with a tvm axis carry it.
                **({"toolchains": self.toolchains} if self.toolchains else {}),
                # And only sweeps with a layout axis carry it.
                **({"layouts": self.layouts} if self.layouts else {}),
            }
        )[:12]


_TOP_KEYS = {"name", "label", "models", "targets", "axes", "measure", "tolerance", "tuning"}
_AXES_DEFAULTS: dict[str, list[Any]] = {
    "executor": ["vm-bytecode"],
    "opt_level": [2],
    "pipeline": ["per-target"],
    "kernels": ["c"],
    "tuning": [0],
    "tvm": [],  # no axis: the TVM tvmbench runs on
    "layout": [],  # no axis: the module as imported, no layout in the keys
}


def parse_spec(text: str, *, base: Path, source_path: str = "<string>") -> SweepSpec:
    """Validate sweep-file text; relative model paths resolve against ``base``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source_path}: not valid TOML ({exc}); fix the syntax at that line") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise SpecError(f"{source_path}: arrays or tables nested too deeply to read; flatten them") from None
    unknown_keys("sweep file", data, _TOP_KEYS)
    no_control_characters("", data)
    name = checked_name("name", typed("name", data.get("name", Path(source_path).stem), str, "a string"))
    label = checked_name("label", typed("label", data.get("label", ""), str, "a string"), may_be_empty=True)

    raw_models = data.get("models")
    if not isinstance(raw_models, list) or not raw_models:
        raise SpecError(
            'models: add at least one [[models]] table with path = "file.onnx" or onnx = "light_squeezenet"'
        )
    models, paths, input_files = [], {}, {}
    for i, table in enumerate(raw_models):
        model, path, inputs_file = parse_model(f"models[{i}]", table, base)
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
    targets = tuple(parse_target(f"targets[{i}]", t) for i, t in enumerate(raw_targets))
    check_distinct(targets)
    if len({t.name for t in targets}) != len(targets):
        raise SpecError('targets: two targets share a name; give each a distinct name = "..."')

    axes = typed("[axes]", data.get("axes", {}), dict, "a table")
    unknown_keys("[axes]", axes, set(_AXES_DEFAULTS))
    executors = axis(
        "axes.executor",
        axes.get("executor", _AXES_DEFAULTS["executor"]),
        lambda v: v in registry.NAMES,
        " or ".join(f'"{e}"' for e in registry.NAMES),
    )
    opt_levels = axis(
        "axes.opt_level",
        axes.get("opt_level", _AXES_DEFAULTS["opt_level"]),
        lambda v: isinstance(v, int) and 0 <= v <= 3,
        "integers 0 to 3",
    )
    pipelines = axis(
        "axes.pipeline",
        axes.get("pipeline", _AXES_DEFAULTS["pipeline"]),
        lambda v: v in PIPELINES,
        " or ".join(f'"{p}"' for p in PIPELINES),
    )
    kernels = axis(
        "axes.kernels",
        axes.get("kernels", _AXES_DEFAULTS["kernels"]),
        lambda v: v in KERNEL_PATHS,
        " or ".join(f'"{k}"' for k in KERNEL_PATHS),
    )
    tunings = axis(
        "axes.tuning",
        axes.get("tuning", _AXES_DEFAULTS["tuning"]),
        lambda v: v == AUTO or (isinstance(v, int) and 0 <= v <= MAX_TUNING_BUDGET),
        f'trial budgets: integers from 0 (untuned) to {MAX_TUNING_BUDGET}, or "{AUTO}" (stops by itself)',
    )
    toolchains = parse_toolchains(axes.get("tvm"), base)
    layouts = parse_layouts(axes.get("layout"), executors)
    if "tuning" in data and not any(tunings):
        raise SpecError("[tuning]: the sweep tunes nothing; add tuning = [0, 64] (trial budgets) to [axes]")
    tuning = parse_tuning(data)
    tuning_auto = parse_auto(data, tunings)
    if any(tunings):
        check_tunable(targets, executors)
        check_tuned_toolchains(toolchains, tuning)
    check_mcu_pairing(targets, executors)

    spec = SweepSpec(
        kernels=kernels,
        name=name,
        label=label,
        models=tuple(models),
        targets=targets,
        executors=executors,
        opt_levels=opt_levels,
        pipelines=pipelines,
        measure=parse_measure(data),
        tunings=tunings,
        tuning=tuning,
        tuning_auto=tuning_auto,
        model_paths=paths,
        source=text,
        source_path=source_path,
        input_files=input_files,
        default_target=default_target,
        toolchains=toolchains,
        layouts=layouts,
    )
    check_size(spec)
    return spec


def parse_layouts(value: Any, executors: tuple[str, ...]) -> tuple[str, ...]:
    """The layout axis: LAYOUTS values in the order written, () when absent; refused when no executor of
    the sweep takes it (it would change nothing but the keys)."""
    if value is None:
        return ()
    layouts = axis("axes.layout", value, lambda v: v in LAYOUTS, " or ".join(f'"{x}"' for x in LAYOUTS))
    if not any(registry.takes_layouts(e) for e in executors):
        takers = ", ".join(registry.layout_names())
        raise SpecError(
            f"axes.layout: no executor of the sweep converts layouts ({', '.join(executors)}); add one of "
            f"{takers} to axes.executor, or remove axes.layout"
        )
    return layouts


def parse_toolchains(value: Any, base: Path) -> tuple[str, ...]:
    """The tvm axis: each entry parsed (workers.toolchains.spec) into a job's toolchain text; () when absent.

    Only the form is checked here; whether a release is on the index, a wheel exists, an interpreter
    imports TVM is for `sweep plan` and `sweep run` to say (orchestrator/toolchains.need).
    """
    if value is None:
        return ()
    entries = value if isinstance(value, list) else [value]
    if not entries:
        raise SpecError(
            'axes.tvm is empty: list at least one of a release ("0.26.0"), a wheel\'s path or { python = PATH }'
        )
    texts = []
    for entry in entries:
        try:
            texts.append(canonical(parse_toolchain(entry), base))
        except ToolchainError as exc:
            raise SpecError(f"axes.tvm: {exc}") from None
    return tuple(dict.fromkeys(texts))  # drop duplicates, keep the order the user wrote


# The cost models' packages: a toolchain tvmbench provisions (a release, a wheel) has neither.
COST_MODEL_NEEDS = {"xgb": "xgboost", "mlp": "torch"}


def check_tuned_toolchains(toolchains: tuple[str, ...], tuning: TuningSettings) -> None:
    """Tuned builds of another release tune in its toolchain's child (workers/toolchains/tuning.py), whose
    venv holds TVM, numpy and onnx only: a cost model needing more is refused here for a provisioned one
    (an interpreter's packages are its own: its child says when it lacks the package)."""
    needs = COST_MODEL_NEEDS.get(tuning.cost_model)
    if needs is None:
        return
    other = next((t for t in toolchains if t != installed_version() and not t.startswith(INTERPRETER)), None)
    if other is not None:
        raise SpecError(
            f'axes.tvm: tuning in toolchain {shown(other)} with [tuning] cost_model = "{tuning.cost_model}" needs '
            f'{needs}, which a provisioned toolchain lacks: set [tuning] cost_model = "random"'
        )


def sweep_text(path: Path) -> str:
    """A sweep file's text: UTF-8 whatever the locale, without the byte-order mark Windows editors write."""
    return path.read_text(encoding="utf-8-sig")


def not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    """The line for a sweep file that is not UTF-8: where its first bad byte is, so an editor can find it."""
    data = exc.object if isinstance(exc.object, bytes) else b""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # the byte-order mark of UTF-16, as Windows tools write
        return (
            f"{path}: not UTF-8 but UTF-16 (it starts with a UTF-16 byte-order mark); TOML files are UTF-8: "
            "save it as UTF-8"
        )
    line = data.count(b"\n", 0, exc.start) + 1
    column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
    return (
        f"{path}: not UTF-8 (byte 0x{data[exc.start]:02x} at line {line}, column {column}); TOML files are UTF-8: "
        "save it as UTF-8 (from Latin-1: iconv -f latin1 -t utf-8)"
    )


def load_spec(path: str | Path, *, label: str | None = None) -> SweepSpec:
    """Read and validate a sweep file; ``label`` (if given) overrides the file's, making a new sweep."""
    path = Path(path)
    if not path.is_file():
        what = "no such sweep file" if not path.exists() and not path.is_symlink() else describe_missing(path)
        raise SpecError(f"{path}: {what}; give the path to a .toml file")
    try:
        text = sweep_text(path)
    except UnicodeDecodeError as exc:
        raise SpecError(not_utf8(path, exc)) from None
    except OSError as exc:  # a regular file that refuses reads: never the CLI's "could not write the output"
        what = exc.strerror or exc
        raise SpecError(f"{path}: cannot be read ({what}); give the path to a readable .toml file") from None
    # The absolute path is stored with the sweep: `sweep resume` then works from any directory.
    spec = parse_spec(text, base=path.resolve().parent, source_path=str(path.resolve()))
    if label is not None:
        no_control_characters("--label", label)
        checked_name("--label", label, may_be_empty=True)
        spec = replace(spec, label=label)
    # Here, not in parse_spec: `sweep resume` parses stored sweeps again, whose names were accepted before.
    # A name taken from the file's name (2024.toml) is not refused: the user never wrote it, and `--sweep 2024`
    # is ambiguous only with an id that starts so (the lookup says which it took).
    if spec.name != path.stem:
        not_id_like("name", spec.name, f'write name = "run-{spec.name}" (any character but a hex digit will do)')
    not_id_like(
        "--label" if label is not None else "label",
        spec.label,
        f'give a label with another character, e.g. "run-{spec.label}"',
    )
    return spec


# Hex digits only, as many as the shortest id prefix people type: `results list --sweep`, `sweep status`
# read such a reference as an id (prefix) first, so a sweep named so is answered for another one.
_ID_LIKE = re.compile(r"[0-9a-fA-F]{4,}")  # SQLite's LIKE matches ids regardless of case: A-F too


def not_id_like(where: str, value: str, fix: str) -> None:
    """SpecError when a sweep's name or label reads as a sweep id."""
    if _ID_LIKE.fullmatch(value):
        raise SpecError(
            f"{where} = {value!r} reads as a sweep id (hex digits only): `--sweep {value}` would name any sweep "
            f"whose id starts so; {fix}"
        )
