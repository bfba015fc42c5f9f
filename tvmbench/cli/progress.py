"""The progress bar of `sweep run` / `sweep resume`: jobs done of planned, what is built and measured,
time spent, and an estimate of the time left."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class EtaColumn(ProgressColumn):
    """``ETA 0:01:23`` from the jobs' rate so far; ``ETA ?`` until a job has finished (no rate yet)."""

    max_refresh = 1.0  # the estimate moves with each job: redrawing it faster only makes it flicker

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("")
        if task.total is None or not task.completed or not task.elapsed:
            return Text("ETA ?", style="progress.remaining")
        # The mean rate over the whole run: jobs are uneven (a build, then many cached measurements),
        # so rich's short-window speed swings too much to plan around.
        left = (task.total - task.completed) * task.elapsed / task.completed
        return Text(f"ETA {_clock(left)}", style="progress.remaining")


def progress_bar(console: Console, get_time: Callable[[], float] | None = None) -> Progress:
    """The sweep's bar on ``console`` (stderr); ``get_time`` replaces the clock (tests)."""
    # The line fits 80 columns: the bar gives way to the counts, the elapsed time and the ETA. Not a
    # terminal (a log file, CI): no bar at all, so the line there holds no box-drawing characters.
    bar = [BarColumn(bar_width=max(8, min(40, console.width - 84)))] if console.is_terminal else []
    return Progress(
        TextColumn("{task.description}", style="bold", markup=False),
        *bar,
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        EtaColumn(),
        console=console,
        transient=False,
        **({"get_time": get_time} if get_time is not None else {}),
    )
