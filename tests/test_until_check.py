"""The until rule's check builds (workers/tuning/check.py), fast: the loop around the search with the board's
timing and the search as seams, and what `results show` says of them.

The check build for real (MetaSchedule, the program built and timed on the local farm's board) is in
tests/test_tuning_auto.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tvmbench.answers.tuning_text import checks_line, stop_text, tuning_lines
from tvmbench.core.records import AutoBudget, Job, ModelRef, TargetSpec, TuningSettings
from workers.tuning import check
from workers.tuning.stage import TuningEnv
from workers.tuning.stats import TuningStats

AUTO = {"until": "onnxruntime", "until_ms": 2.0, "max_minutes": 15.0, "plateau": None, "max_trials": 2000}


def job(until: Any = "onnxruntime") -> Job:
    return Job(
        model=ModelRef(name="m", sha256="0" * 64, source="m.onnx", inputs=(("x", (1, 4), "float32"),)),
        target=TargetSpec(name="host", tvm_target={"kind": "llvm"}, board_key="host", arch="x86_64"),
        executor="vm-compiled", opt_level=2, pipeline="per-target", tuning=2000,
        tuning_settings=TuningSettings(cost_model="random"), tuning_auto=AutoBudget(until=until),
    )  # fmt: skip


def until_stop(estimate_ms: float, target_ms: float) -> dict[str, Any]:
    return {"auto": AUTO, "stopped_by": "until", "stop": {"estimate_ms": estimate_ms, "until_ms": target_ms}}


@dataclass
class Searches:
    """The search after each check: hands out ``stops`` in turn, records the env and bests it was given."""

    stops: list[dict[str, Any]]
    envs: list[TuningEnv] = field(default_factory=list)
    bests: list[dict[str, float | None]] = field(default_factory=list)

    def __call__(self, env: TuningEnv, best: dict[str, float | None]) -> Any:
        self.envs.append(env)
        self.bests.append(best)
        stop = self.stops.pop(0)
        return type("Searched", (), {"stop": {**stop, "auto": {"rules": "as this search saw them"}},
                                     "measured": {"t0": 3}})()  # fmt: skip


def timing(measured: float | tuple[float, float]) -> check.Timing:
    """The board's word: the program's median, or (the program's, the baseline's timed beside it)."""
    return check.Timing(*measured) if isinstance(measured, tuple) else check.Timing(measured)


def checked(
    monkeypatch: pytest.MonkeyPatch,
    measured: list[float | tuple[float, float]],
    stops: list[dict[str, Any]],
    until: Any = "onnxruntime",
) -> tuple[dict[str, Any], Searches, dict[str, int]]:
    """Run ``until_checked`` on a first until stop (estimate 1.8 ms, baseline 2 ms) with the board measuring
    ``measured`` in turn (see ``timing``) and the search after each check stopping with ``stops`` in turn."""
    times = iter(measured)
    monkeypatch.setattr(check, "time_program", lambda *_args: timing(next(times)))
    stats = TuningStats()
    stats.record_batch("t0", [None, None], [1e-3, 0.9e-3])
    searches = Searches(list(stops))
    counts = {"t0": 2}
    env = TuningEnv(tracker="127.0.0.1:1", baseline={"ms": 2.0, "source": "onnxruntime job abc"})
    stop = check.until_checked(
        job(until), env, until_stop(1.8, 2.0), stats, {"t0": None}, searches, counts, None, export=lambda: b""
    )
    return stop, searches, counts


def test_recalibrated_scales_the_target_by_what_the_check_found() -> None:
    # The estimate said 1.8 ms and the program measured 2.4 ms: to measure 2 ms the estimate must say 1.5.
    assert check.recalibrated(2.0, 1.8, 2.4) == pytest.approx(1.5)


def test_a_program_at_the_baseline_stops_it_after_one_check(monkeypatch: pytest.MonkeyPatch) -> None:
    stop, searches, _ = checked(monkeypatch, [1.9], [])
    assert stop["stopped_by"] == "until" and not searches.envs
    assert stop["stop"] == {
        "estimate_ms": 1.8, "estimate_target_ms": 2.0, "until_ms": 2.0, "measured_ms": 1.9, "met": True
    }  # fmt: skip
    (only,) = stop["checks"]
    assert (only["trial"], only["estimate_ms"], only["target_ms"], only["measured_ms"]) == (2, 1.8, 2.0, 1.9)


def test_a_program_above_it_searches_on_to_the_recalibrated_target(monkeypatch: pytest.MonkeyPatch) -> None:
    stop, searches, counts = checked(monkeypatch, [2.4, 1.95], [until_stop(1.4, 1.5)])
    (env,) = searches.envs
    assert env.estimate_target_ms == pytest.approx(1.5) and env.baseline == {"ms": 2.0, "source": "onnxruntime job abc"}
    assert searches.bests == [{"t0": 0.9e-3}]  # it goes on from this build's best, not from no time at all
    assert counts == {"t0": 2}  # what ``stats`` holds: the fake search measured nothing
    assert stop["auto"] == AUTO  # the rules as asked, not as the recalibrated search saw them
    assert stop["stop"]["met"] and stop["stop"]["measured_ms"] == 1.95 and stop["stop"]["estimate_target_ms"] == 1.5
    assert [c["measured_ms"] for c in stop["checks"]] == [2.4, 1.95]


def test_it_gives_up_checking_after_max_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    misses = [until_stop(1.0, 1.1)] * (check.MAX_CHECKS - 1)
    stop, searches, _ = checked(monkeypatch, [3.0] * check.MAX_CHECKS, misses)
    assert len(stop["checks"]) == check.MAX_CHECKS and len(searches.envs) == check.MAX_CHECKS - 1
    assert stop["stopped_by"] == "until" and not stop["stop"]["met"] and stop["stop"]["measured_ms"] == 3.0
    assert "but measured 3 ms, above 2 ms after 4 check builds" in stop_text(stop)


def test_another_rule_after_a_check_is_the_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    later = {"stopped_by": "max_minutes", "stop": {"minutes": 15.0, "max_minutes": 15.0}}
    stop, _, _ = checked(monkeypatch, [2.4], [later])
    assert stop["stopped_by"] == "max_minutes" and stop["stop"] == later["stop"] and len(stop["checks"]) == 1
    assert "check builds (the program timed on a board): trial 2 (0.0 min): estimate 1.8 ms, measured 2.4 ms > 2" in (
        "\n".join(tuning_lines({**stop, "budget": 2000, "trials_run": 5}))
    )


def test_a_check_that_cannot_run_keeps_the_estimates_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(*_args: Any) -> float:
        raise ConnectionResetError("board b1 closed the session")

    monkeypatch.setattr(check, "time_program", gone)
    stop = check.until_checked(
        job(), TuningEnv(tracker="t", baseline={"ms": 2.0}), until_stop(1.8, 2.0), TuningStats(), {}, None, {}, None,
        export=lambda: b"",
    )  # fmt: skip
    assert stop["stop"]["measured_ms"] is None and "board b1 closed the session" in stop["stop"]["check_error"]
    assert "the check build failed (ConnectionResetError: board b1 closed the session)" in stop_text(stop), stop


def test_an_inactive_until_rule_is_never_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check, "time_program", lambda *_args: pytest.fail("timed a program"))
    given = until_stop(1.8, 2.0)
    assert check.until_checked(job(), TuningEnv(tracker="t"), given, TuningStats(), {}, None, {}, None,
                               export=lambda: b"") is given  # fmt: skip


def test_the_baseline_timed_beside_the_program_is_its_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    # The sweep's baseline said 2 ms; on the board now ONNX Runtime takes 1.7 and the program 1.6: met.
    stop, searches, _ = checked(monkeypatch, [(1.6, 1.7)], [])
    assert stop["stopped_by"] == "until" and not searches.envs
    assert stop["stop"]["met"] and stop["stop"]["baseline_ms"] == stop["stop"]["bar_ms"] == 1.7
    assert stop["stop"]["until_ms"] == 2.0 and stop["checks"][0]["baseline_ms"] == 1.7
    assert stop_text(stop) == (
        "until: measured 1.6 ms at or below ONNX Runtime's 1.7 ms timed beside it (kernel estimate 1.8 ms, 1 check "
        "build; the sweep's baseline 2 ms)"
    )
    assert "measured 1.6 ms <= 1.7 (ONNX Runtime beside it)" in checks_line(stop["checks"])


def test_a_slower_baseline_beside_it_holds_the_program_to_the_fastest_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    # ONNX Runtime beside the program ran 2.6 ms against the sweep's 2: a competing process, or its slow mode,
    # not a program at its level. The program's 2.3 misses the 2 ms, and the search goes on from there.
    stop, searches, _ = checked(monkeypatch, [(2.3, 2.6), (1.9, 4.5)], [until_stop(1.1, 1.2)])
    (env,) = searches.envs
    assert env.estimate_target_ms == pytest.approx(2.0 * 1.8 / 2.3)
    assert [(c["measured_ms"], c["bar_ms"]) for c in stop["checks"]] == [(2.3, 2.0), (1.9, 2.0)]
    assert stop["stop"]["met"] and stop["stop"]["bar_ms"] == 2.0 and stop["stop"]["baseline_ms"] == 4.5
    line = checks_line(stop["checks"])
    assert "measured 2.3 ms > 2 (ONNX Runtime's fastest on the board; 2.6 beside it)" in line, line
    assert stop_text(stop) == (
        "until: measured 1.9 ms at or below ONNX Runtime's fastest median on the board, 2 ms (4.5 beside it) "
        "(kernel estimate 1.1 ms, 2 check builds; the sweep's baseline 2 ms)"
    )


def test_a_faster_baseline_beside_one_check_holds_every_later_check_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first check found ONNX Runtime at 1.2 ms (the sweep's 2 was its slow mode); the second found it at
    # 2.6 and the program at 1.5: below the 2.6 beside it, above the 1.2 the board has shown, so not met.
    later = {"stopped_by": "max_minutes", "stop": {"minutes": 15.0, "max_minutes": 15.0}}
    stop, searches, _ = checked(monkeypatch, [(1.6, 1.2), (1.5, 2.6)], [until_stop(1.2, 1.3), later])
    assert len(searches.envs) == 2 and [c["bar_ms"] for c in stop["checks"]] == [1.2, 1.2]
    assert searches.envs[1].estimate_target_ms == pytest.approx(1.2 * 1.2 / 1.5)  # from the fastest, not 2.6
    assert stop["stopped_by"] == "max_minutes"
    assert check.fastest_bar(2.0, []) == 2.0


def test_a_miss_against_the_baseline_beside_it_recalibrates_from_that(monkeypatch: pytest.MonkeyPatch) -> None:
    # Below the stored 2 ms but above the 1.5 ms ONNX Runtime took beside it: searched on, and the estimate
    # (1.8 ms for a program of 1.9) must reach 1.5 x 1.8 / 1.9.
    stop, searches, _ = checked(monkeypatch, [(1.9, 1.5), (1.4, 1.5)], [until_stop(1.4, 1.42)])
    (env,) = searches.envs
    assert env.estimate_target_ms == pytest.approx(1.5 * 1.8 / 1.9)
    assert [c["measured_ms"] for c in stop["checks"]] == [1.9, 1.4] and stop["stop"]["met"]
    assert "measured 1.9 ms > 1.5 (ONNX Runtime beside it)" in checks_line(stop["checks"])


def test_a_number_of_ms_is_checked_like_the_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    stop, _, _ = checked(monkeypatch, [1.9], [], until=2.0)
    assert stop["stop"]["met"] and stop["stop"]["until_ms"] == 2.0


def test_old_builds_without_checks_read_as_before() -> None:
    old = {"stopped_by": "until", "stop": {"estimate_ms": 0.12, "until_ms": 0.15}}
    assert stop_text(old) == "until: kernel estimate 0.12 ms at or below 0.15 ms"
    assert checks_line(None) is None


class Remote:
    """A board's RPC session as ``baseline_timer`` sees it: ONNX Runtime answering ``answers`` in turn."""

    def __init__(self, answers: list[dict[str, Any]] | None) -> None:
        self.answers, self.uploaded, self.calls = answers, [], []

    def get_function(self, name: str) -> Any:
        if self.answers is None:
            raise AttributeError(f"function {name} not found")  # a stock TVM RPC server
        return self.run

    def run(self, *args: Any) -> str:
        import json

        self.calls.append(args[:4])
        return json.dumps(self.answers.pop(0))

    def upload(self, data: Any, name: str) -> None:
        self.uploaded.append((type(data), name))

    def cpu(self, _index: int) -> Any:
        import tvm

        return tvm.cpu(0)


def test_the_baseline_timer_runs_the_uploaded_model_one_sample_a_call() -> None:
    import numpy as np

    remote = Remote([{"available": True, "samples_ms": [0.5]}, {"available": True, "samples_ms": [0.25]}])
    timer = check.baseline_timer(remote, job(), b"onnx", {"x": np.zeros((1, 4), "float32")})
    assert timer is not None and timer() == [0.25]
    ((kind, name),) = remote.uploaded
    assert kind is bytearray and name.startswith("tvmbench-") and name.endswith(".onnx")  # bytes read as a path
    assert remote.calls == [(name, 10, 1, '["x"]')] * 2  # the probe, then one sample of `number` runs


@pytest.mark.parametrize(
    "answers", [None, [{"available": False, "reason": "onnxruntime is not installed on this board"}]]
)
def test_a_board_without_onnxruntime_leaves_the_stored_median(answers: list[dict[str, Any]] | None) -> None:
    import numpy as np

    assert check.baseline_timer(Remote(answers), job(), b"onnx", {"x": np.zeros((1, 4), "float32")}) is None
