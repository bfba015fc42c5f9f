"""Sweep files: TOML in, a validated ``SweepSpec`` out, or one ``SpecError`` line naming the culprit.

``sweep`` reads the file and its [axes]; each other table has its module (``models``, ``targets``,
``measure`` with [tolerance], ``tuning``), all checked with ``checks``. The format is in ``sweep``'s docstring.
"""

from __future__ import annotations

from orchestrator.spec.checks import SpecError
from orchestrator.spec.sweep import SweepSpec, load_spec, parse_spec, sweep_text
from orchestrator.spec.tuning import MAX_TUNING_BUDGET

__all__ = ["MAX_TUNING_BUDGET", "SpecError", "SweepSpec", "load_spec", "parse_spec", "sweep_text"]
