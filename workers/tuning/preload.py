"""Import MetaSchedule's tensor intrinsics without TVMScript's ``inspect.stack()`` cost.

The first ``TuneContext`` imports ``tvm.s_tir.tensor_intrin``, which parses about 250 TVMScript
functions; each ``@T.prim_func`` calls ``inspect.stack()``, and for every frame without a source file
(the ``<frozen importlib...>`` frames of an import) ``inspect.getmodule`` scans all of ``sys.modules``.
Measured here: 200 s inside pytest (many modules loaded), ~30 s in a bare script, before the first
trial. With a stack that only reads the lines the parser looks at, the same import takes seconds.
"""

from __future__ import annotations

import inspect
import linecache
import sys
from collections.abc import Callable
from typing import Any

# TVMScript's is_defined_in_class reads the code line of frame 2 (the decorator's caller); the
# closure resolution reads frames' locals only. Lines beyond these frames are never used.
_FRAMES_WITH_LINES = 3


def _fast_stack(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack()`` with source lines for the first few frames only, and no module lookups."""
    frame = sys._getframe(1)
    infos: list[inspect.FrameInfo] = []
    while frame is not None:
        code = frame.f_code
        lines = None
        if context and len(infos) < _FRAMES_WITH_LINES:
            line = linecache.getline(code.co_filename, frame.f_lineno)
            lines = [line] if line else None
        infos.append(
            inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, lines, 0 if lines else None)
        )
        frame = frame.f_back
    return infos


def preload_tensor_intrin() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` now, quickly (a no-op once imported)."""
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    original: Callable[..., Any] = inspect.stack
    inspect.stack = _fast_stack  # type: ignore[assignment]
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.stack = original  # type: ignore[assignment]
