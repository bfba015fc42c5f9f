"""Run a sweep: builds and measurements as tasks, every outcome stored as it arrives.

The scheduler lives in orchestrator/scheduling/ (one module per rule: see its package docstring); this
module keeps the names callers import.
"""

from __future__ import annotations

from orchestrator.scheduling.events import Listener, ProgressFn, SweepOutcome
from orchestrator.scheduling.measurements import BOARD_RECOUNT_S, LOCAL_HOSTS, MAX_ATTEMPTS, host_sharing_keys
from orchestrator.scheduling.pool import InlinePool, TaskPool
from orchestrator.scheduling.run import check_farm_resource, ensure_ray, execute_sweep, nothing_left, run_sweep
from orchestrator.scheduling.sweep import CANCEL_POLL_S
from orchestrator.scheduling.tasks import build_on_node, measure_on_node

__all__ = [
    "BOARD_RECOUNT_S",
    "CANCEL_POLL_S",
    "LOCAL_HOSTS",
    "MAX_ATTEMPTS",
    "InlinePool",
    "Listener",
    "ProgressFn",
    "SweepOutcome",
    "TaskPool",
    "build_on_node",
    "check_farm_resource",
    "ensure_ray",
    "execute_sweep",
    "host_sharing_keys",
    "measure_on_node",
    "nothing_left",
    "run_sweep",
]
