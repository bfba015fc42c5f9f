"""The board-health rule, and the golden model a board must run correctly.

Policy (board states live in the ``boards`` table):
- ``ok`` -> ``suspect`` on any ``infra`` or ``timeout`` attempt; every failure in a row counts.
- A correct run (``ok`` or ``wrong-result``: the board ran the program) or a passing golden model
  resets the count and turns ``suspect`` back to ``ok``: a slow model timing out is the model's fault,
  not the board's.
- ``QUARANTINE_AFTER`` failures in a row (job or golden) -> ``quarantined``: never scheduled again until
  ``tvmbench farm reset <board>``.

The store applies the rule (``next_state``) when it records a run; the scheduler decides when to run
the golden model (orchestrator/health.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

QUARANTINE_AFTER = 3  # infra/timeout failures in a row before a board is quarantined
BOARD_FAULTS: tuple[str, ...] = ("infra", "timeout")  # run statuses that count against the board
BOARD_RAN: tuple[str, ...] = ("ok", "wrong-result")  # the board ran the program: it is healthy


def next_state(state: str, failures: int, run_status: str, health: str | None = None) -> tuple[str, int]:
    """(board state, failures in a row) after a run with ``run_status`` on a board in ``state``.

    ``health`` is "ok" when the board ran the golden model correctly just before this attempt.
    """
    if health == "ok" or run_status in BOARD_RAN:
        failures = 0
        if state == "suspect":
            state = "ok"
    if run_status in BOARD_FAULTS:
        failures += 1
        if state != "quarantined":
            state = "quarantined" if failures >= QUARANTINE_AFTER else "suspect"
    return state, failures


@dataclass(frozen=True)
class GoldenModel:
    """A small program with known-good outputs, built for one target (the health check's payload)."""

    name: str
    artifact: bytes
    sha256: str
    input_names: tuple[str, ...]
    inputs: dict[str, Any]  # name -> numpy array
    expected: tuple[Any, ...]  # numpy arrays from ONNX Runtime
    atol: float = 1e-4
    rtol: float = 1e-3
