"""tvmbench: which TVM build configuration is fastest, and correct, on each board.

    import tvmbench
    sweep_id, table = tvmbench.run("examples/quickstart.toml")
    results = tvmbench.open()            # or tvmbench.open("postgresql://...")
    results.best(model="light_squeezenet")

Importing this package is cheap: TVM and Ray load only when a sweep runs.
"""

from tvmbench.api import Results, SweepRun, open, plan, run

__all__ = ["Results", "SweepRun", "open", "plan", "run"]
