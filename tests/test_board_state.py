"""Board state readings (workers/board_state.py) from sysfs trees laid out like a real board's, and the
warnings drawn from a before/after pair. The live host and emulated boards are in test_measurement.py
and test_arm64_board.py."""

from __future__ import annotations

from pathlib import Path

import pytest

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


# --- TVM's runtime threads: one per physical core ------------------------------------------------------


def _topology(root: Path, siblings: dict[int, str]) -> str:
    for cpu, listed in siblings.items():
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(listed + "\n")
    return str(root)


def test_physical_cores_counts_hyperthread_siblings_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(board_state.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    smt = _topology(tmp_path / "smt", {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    assert board_state.physical_cores(smt) == 2
    # No hyper-threads (a cloud VM like this CI machine): every CPU is a core. TVM's own default halves it.
    assert board_state.physical_cores(_topology(tmp_path / "vm", {c: str(c) for c in range(4)})) == 4
    # Only the CPUs this process may use count (taskset, a cgroup's cpuset), and no sysfs at all is fine.
    monkeypatch.setattr(board_state.os, "sched_getaffinity", lambda pid: {1, 3})
    assert board_state.physical_cores(smt) == 1
    assert board_state.physical_cores(str(tmp_path / "absent")) == 2


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, {"threads": 3, "source": "cores"}),
        ({"TVM_NUM_THREADS": "1"}, {"threads": 1, "source": "TVM_NUM_THREADS"}),
        ({"OMP_NUM_THREADS": "2"}, {"threads": 2, "source": "OMP_NUM_THREADS"}),
        ({"TVM_NUM_THREADS": "5", "OMP_NUM_THREADS": "2"}, {"threads": 5, "source": "TVM_NUM_THREADS"}),
        # TVM reads garbage as 0 and then runs one thread: the cores are counted and the variable replaced.
        ({"TVM_NUM_THREADS": "lots"}, {"threads": 3, "source": "cores"}),
        ({"TVM_NUM_THREADS": " "}, {"threads": 3, "source": "cores"}),
    ],
)
def test_use_every_core_respects_a_count_the_environment_names(
    tmp_path: Path, monkeypatch, env: dict[str, str], expected: dict
) -> None:
    for name in board_state.THREADS_ENV:  # set first, so that monkeypatch restores what use_every_core sets
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(board_state.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert board_state.use_every_core(str(tmp_path)) == expected
    if expected["source"] == "cores":  # what TVM's runtime reads first now says so
        assert board_state.os.environ["TVM_NUM_THREADS"] == "3"
