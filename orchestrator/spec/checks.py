"""What every table of a sweep file is checked with: the one error, unknown keys, types, axes, control characters."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

from tvmbench.core.printable import unprintable

MAX_NAME = 100  # characters of a name or label: each heads table rows, page titles and plot legends
# A tracker key: TVM matches a board's key up to a ':', and the farm names files and releases after it.
BOARD_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


class SpecError(ValueError):
    """A sweep file is invalid; the message is one line naming the key or path and the fix."""


def unknown_keys(where: str, table: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise SpecError(f"{where}: unknown key {extra[0]!r}; allowed keys: {', '.join(sorted(allowed))}")


def as_toml(value: Any) -> str:
    """``value`` as the sweep file wrote it, for messages: true and false as TOML spells them, not Python."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def typed(where: str, value: Any, kind: type | tuple[type, ...], hint: str) -> Any:
    # bool is an int in Python; a sweep file that says opt_level = true is wrong, not 1.
    if isinstance(value, bool) and kind is not bool and (kind is int or (isinstance(kind, tuple) and bool not in kind)):
        raise SpecError(f"{where} = {as_toml(value)}: expected {hint}")
    if not isinstance(value, kind):
        raise SpecError(f"{where} = {as_toml(value)}: expected {hint}")
    return value


def axis(where: str, value: Any, check: Callable[[Any], bool], hint: str) -> tuple[Any, ...]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise SpecError(f"{where} is empty: list at least one of {hint}")
    for v in values:
        if isinstance(v, bool) or not check(v):
            raise SpecError(f"{where}: {as_toml(v)} is not valid; use {hint}")
    return tuple(dict.fromkeys(values))  # drop duplicates, keep the order the user wrote


def checked_name(where: str, value: str, *, may_be_empty: bool = False) -> str:
    """``value`` unless it is blank (where a name is needed) or longer than MAX_NAME characters."""
    if not value.strip() and not (may_be_empty and value == ""):
        raise SpecError(f"{where} = {value!r} is blank: give a name people will read in the results")
    if len(value) > MAX_NAME:
        raise SpecError(f"{where} is {len(value)} characters long; at most {MAX_NAME} (it heads tables and pages)")
    return value


def checked_board_key(where: str, value: str) -> str:
    """``value`` if it can be a tracker key: letters, digits and . _ + - (no ':' or spaces), at most 64."""
    if not BOARD_KEY.fullmatch(value):
        raise SpecError(
            f"{where} = {value!r} cannot be a tracker key: use letters, digits and . _ + - (at most 64, no ':' or "
            'spaces), e.g. "rpi4"'
        )
    return value


def no_control_characters(where: str, value: Any) -> None:
    """Refuse control characters in any string: names and paths are printed on terminals, where an escape
    sequence (ESC [ ...) would recolour, retitle or hide text on the screen of whoever lists the results."""
    if isinstance(value, dict):
        for key, item in value.items():
            no_control_characters(f"{where}.{key}" if where else str(key), item)
            no_control_characters(f"{where} key", key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            no_control_characters(f"{where}[{i}]", item)
    elif isinstance(value, str):
        bad = unprintable(value)
        if bad is not None:
            kind = "the control character" if unicodedata.category(bad) == "Cc" else "the bidi control"
            raise SpecError(
                f"{where} = {value!r} contains {kind} U+{ord(bad):04X}; remove it "
                "(names and paths are printed on terminals)"
            )
