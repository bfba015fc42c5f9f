"""tvmbench: which TVM build configuration is fastest, and correct, on each board.

    import tvmbench
    sweep_id, table = tvmbench.run("examples/quickstart.toml")
    results = tvmbench.open()            # or tvmbench.open("postgresql://...")
    results.best(model="light_squeezenet")

Importing this package is cheap: TVM and Ray load only when a sweep runs. The API is loaded on first use
(PEP 562) because every layer imports `tvmbench.core`, and that must not pull the API (and through it the
orchestrator) into a board agent or a build worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tvmbench.api import Results, SweepRun, open, plan, run

__all__ = ["Results", "SweepRun", "open", "plan", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tvmbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'tvmbench' has no attribute {name!r}")
