"""Target presets: a name a sweep file can use for a TVM target, its cross compiler and its board key.

The presets are the board kinds' targets (workers/board_kinds.py: a new one is added there).
"""

from __future__ import annotations

from typing import Any

from tvmbench.core.records import TargetSpec
from workers.board_kinds import KINDS
from workers.host_cpu import host_arch, host_cpu

__all__ = ["PRESETS", "host_arch", "host_cpu", "presets_for", "resolve_target", "target_kind"]

PRESETS: dict[str, TargetSpec] = {name: kind.target for name, kind in KINDS.items()}


def target_kind(tvm_target: dict[str, Any]) -> str:
    """The TVM target kind ("llvm", "cuda", ...) of a dict or {"tag": name} target."""
    if "kind" in tvm_target:
        return str(tvm_target["kind"])
    if "tag" in tvm_target:
        from tvm.target import Target

        return str(Target(tvm_target["tag"]).kind.name)
    return "llvm"


def presets_for(arch: str | None, board_key: str | None = None) -> list[str]:
    """Preset names that build for ``arch``; a preset whose board key is ``board_key`` comes first."""
    names = [p.name for p in PRESETS.values() if arch and p.arch == arch]
    names.sort(key=lambda n: PRESETS[n].board_key != board_key)
    return names


def resolve_target(name: str, table: dict[str, Any] | None = None) -> TargetSpec:
    """A preset by name, or a user-defined target from its sweep-file table.

    ``table`` holds ``target`` (TVM target dict), ``board_key``, ``arch`` and optionally
    ``cross_compiler``/``emulated``; keys given there override the preset's of the same name.
    """
    base = PRESETS.get(name)
    if table is None:
        if base is None:
            raise KeyError(name)
        return base
    fields: dict[str, Any] = {} if base is None else dict(base.__dict__)
    fields["name"] = name
    if "target" in table:
        fields["tvm_target"] = table["target"]
    for key in ("board_key", "arch", "cross_compiler", "emulated"):
        if key in table:
            fields[key] = table[key]
    fields.setdefault("board_key", name)
    return TargetSpec(**fields)
