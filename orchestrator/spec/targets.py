"""The [[targets]] tables of a sweep file (a preset, or a TVM target of its own), and which executors fit them."""

from __future__ import annotations

from typing import Any

from orchestrator.spec.checks import SpecError, checked_board_key, checked_name, typed, unknown_keys
from tvmbench.core.records import TargetSpec, canonical_hash
from workers.aot.boards import BOARDS, is_mcu_target
from workers.executors import registry
from workers.targets import PRESETS, resolve_target

_TARGET_KEYS = {"preset", "name", "target", "board_key", "arch", "cross_compiler", "emulated"}


def parse_target(where: str, table: Any) -> TargetSpec:
    """One [[targets]] table as a TargetSpec: its name and board key checked, whichever way it was given."""
    target = _target(where, table)
    checked_name(f"{where}.name", target.name)
    checked_board_key(f"{where}.board_key", target.board_key)
    return target


# The type of each key, checked whichever way the table is given (a preset's overrides included).
_KEY_TYPES: tuple[tuple[str, type, str], ...] = (
    ("name", str, "a string"),
    ("target", dict, 'a TVM target table such as { kind = "llvm", mtriple = "..." }'),
    ("board_key", str, "a tracker key string"),
    ("arch", str, "a machine name like aarch64"),
    ("cross_compiler", str, "a compiler command"),
    ("emulated", bool, "true or false"),
)


def _target(where: str, table: Any) -> TargetSpec:
    if not isinstance(table, dict):
        raise SpecError(f'{where}: expected a table like {{ preset = "host" }}')
    unknown_keys(where, table, _TARGET_KEYS)
    for key, kind, hint in _KEY_TYPES:
        if key in table:
            typed(f"{where}.{key}", table[key], kind, hint)
    if "preset" in table:
        preset = typed(f"{where}.preset", table["preset"], str, "a preset name")
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
    if "arch" not in table and table["name"] not in PRESETS:  # a preset's name brings its arch along
        raise SpecError(f'{where}: add arch = "aarch64" (the board\'s `uname -m`) to target {table["name"]!r}')
    return resolve_target(table["name"], table)


def check_distinct(targets: tuple[TargetSpec, ...]) -> None:
    """Refuse two targets whose jobs would have one job key: a key holds of a target only its TVM target,
    cross_compiler and board_key, so two such entries (a preset listed again under another name) would
    plan two jobs that build and store as one (README, "A sweep file")."""
    seen: dict[str, int] = {}
    for i, t in enumerate(targets):
        same = seen.setdefault(canonical_hash([t.tvm_target, t.cross_compiler, t.board_key]), i)
        if same != i:
            raise SpecError(
                f"targets[{i}] ({t.name}) is the same target as targets[{same}] ({targets[same].name}): the same "
                "TVM target, cross_compiler and board_key (what a job key holds of a target); remove one "
                "(or give it another board_key)"
            )


def check_tunable(targets: tuple[TargetSpec, ...], executors: tuple[str, ...]) -> None:
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


def check_mcu_pairing(targets: tuple[TargetSpec, ...], executors: tuple[str, ...]) -> None:
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
