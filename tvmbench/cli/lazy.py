"""Modules the CLI's commands use, loaded when a command first uses them, not when the CLI starts.

``tvmbench --help`` builds every command group; the answers' table and report modules (and the executor
registry they read) are needed only once a command prints something. importlib's LazyLoader defers a
module's execution to its first attribute access, so the command modules keep plain module names.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy(name: str) -> ModuleType:
    """The module ``name``, executed on its first attribute access (at once if it is already loaded)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
