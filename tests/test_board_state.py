"""Board state readings (workers/board_state.py) from sysfs trees laid out like a real board's, and the
warnings drawn from a before/after pair. The live host and emulated boards are in test_measurement.py
and test_arm64_board.py."""

from __future__ import annotations

from pathlib import Path

from tvmbench.answers.report import board_state_line
from workers import board_state


def _board(root: Path, governor: str, cur_khz: list[int], temps_mc: list[int]) -> tuple[str, str]:
    cpu, thermal = root / "cpu", root / "thermal"
    for i, khz in enumerate(cur_khz):
        freq = cpu / f"cpu{i}" / "cpufreq"
        freq.mkdir(parents=True, exist_ok=True)
        (freq / "scaling_governor").write_text(governor + "\n")
        (freq / "scaling_min_freq").write_text("600000\n")
        (freq / "scaling_max_freq").write_text("1800000\n")
        (freq / "scaling_cur_freq").write_text(f"{khz}\n")
    (cpu / "cpuidle").mkdir(parents=True, exist_ok=True)  # not a core
    for i, mc in enumerate(temps_mc):
        zone = thermal / f"thermal_zone{i}"
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "type").write_text("cpu-thermal\n")
        (zone / "temp").write_text(f"{mc}\n")
    return str(cpu), str(thermal)


def _state(cpu: str, thermal: str) -> dict:
    return {"cpufreq": board_state.cpufreq(cpu), "thermal": board_state.thermal(thermal), "load_avg": [0.1, 0.1, 0.1]}


def test_a_steady_performance_board_gives_no_warning(tmp_path: Path) -> None:
    cpu, thermal = _board(tmp_path, "performance", [1800000] * 4, [45000])
    state = _state(cpu, thermal)
    assert [c["cpu"] for c in state["cpufreq"]["cores"]] == [0, 1, 2, 3]
    assert state["cpufreq"]["cores"][0] == {
        "cpu": 0, "governor": "performance", "min_khz": 600000, "max_khz": 1800000, "cur_khz": 1800000,
    }  # fmt: skip
    assert state["thermal"]["zones"][0]["temp_c"] == 45.0
    assert board_state.assess(state, state) == []


def test_governor_clock_drift_and_warming_are_warnings(tmp_path: Path) -> None:
    before = _state(*_board(tmp_path / "a", "ondemand", [1800000, 1800000], [45000]))
    after = _state(*_board(tmp_path / "b", "ondemand", [1800000, 1200000], [53000]))
    warnings = board_state.assess(before, after)
    assert len(warnings) == 3, warnings
    assert "governor 'ondemand' on cpu 0,1" in warnings[0]
    assert "cpu1 1800->1200 MHz" in warnings[1]
    assert "thermal_zone0 45.0->53.0 C" in warnings[2]


def test_no_cpufreq_is_unavailable_with_a_reason_and_no_warning(tmp_path: Path) -> None:
    (tmp_path / "cpu" / "cpu0").mkdir(parents=True)  # a core with no cpufreq folder, as on this VM
    state = _state(str(tmp_path / "cpu"), str(tmp_path / "none"))
    assert state["cpufreq"]["available"] is False and "cpufreq" in state["cpufreq"]["reason"]
    assert state["thermal"]["available"] is False and state["thermal"]["reason"]
    assert "cores" not in state["cpufreq"]  # nothing pretends to be a zero
    assert board_state.assess(state, state) == []
    assert "unavailable" in board_state_line(state)


def test_session_memory_reads_this_process(tmp_path: Path) -> None:
    mem = board_state.session_memory()
    assert mem["available"] and mem["vmhwm_kb"] >= mem["vmrss_kb"] > 0
    missing = board_state.session_memory(str(tmp_path / "no-status"))
    assert missing["available"] is False and "not readable" in missing["reason"]
