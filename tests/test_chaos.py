"""The chaos run: >= 20 jobs while a board is killed, the tracker restarted and the driver killed, then a
resume. Reconciliation invariant: jobs accepted = final rows, each with a status, no key twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos_report import run_chaos


@pytest.mark.slow
def test_chaos_sweep_loses_nothing(tmp_path: Path) -> None:
    report = run_chaos(tmp_path)
    summary = "\n".join(report.lines())
    assert report.jobs_accepted >= 20, summary
    assert len(report.faults) == 3, summary  # board killed, tracker restarted, driver killed
    assert report.interrupted_attempts >= 1 and report.retried_jobs >= 1, summary  # the kill hit a measurement
    assert report.results_lost == 0 and report.final_rows == report.jobs_accepted, summary
    assert report.duplicate_keys == 0 and report.bad_attempt_numbers == 0, summary
    assert report.resume_exit in (0, 1), summary
    assert sum(report.statuses.values()) == report.jobs_accepted, summary
