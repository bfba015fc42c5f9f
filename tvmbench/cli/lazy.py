"""Modules the CLI's commands use, imported when a command first uses them, not when the CLI starts.

``tvmbench --help`` builds every command group; the answers' table and report modules (and the executor
registry they read) are needed only once a command prints something. A command module names them as
usual (``report.simple_table(...)``); the name is a stand-in that imports the module on its first
attribute access. It is not put in ``sys.modules`` (as importlib's LazyLoader would put a half-made
module, which Python 3.11 does not guard against two threads finishing at once: the dashboard's request
threads read these modules too), so every other import gets the real module, under the import lock.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands in for the module ``name`` and imports it on first use; attributes read and set go to it."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _module(self) -> Any:
        return importlib.import_module(object.__getattribute__(self, "_name"))

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._module(), attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._module(), attr, value)

    def __repr__(self) -> str:
        return f"<lazy module {object.__getattribute__(self, '_name')!r}>"


def lazy(name: str) -> Any:
    """The module ``name``, imported on its first attribute access."""
    return LazyModule(name)
