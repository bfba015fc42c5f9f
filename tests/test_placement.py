"""Where one-CPU tasks go (workers/placement.py): decided by the caller's own counts, not by the moment.

The real two-node cluster is tests/test_multinode.py (a sweep's builds and a parallel search's groups).
"""

from __future__ import annotations

from workers.placement import NodeSlots, on_node


def test_tasks_in_flight_at_once_go_to_different_one_cpu_nodes() -> None:
    slots = NodeSlots({"b": 1, "a": 1})
    first = slots.pick()
    slots.started(first)
    second = slots.pick()
    slots.started(second)
    assert {first, second} == {"a", "b"}


def test_a_node_with_more_cpus_takes_more_tasks() -> None:
    slots = NodeSlots({"big": 2, "small": 1})
    picked = []
    for _ in range(3):
        node = slots.pick()
        slots.started(node)
        picked.append(node)
    assert sorted(picked) == ["big", "big", "small"]
    # Every CPU taken: the next goes where the fewest of ours run per CPU, then to whoever had fewer.
    assert slots.pick() == "small"


def test_a_finished_task_frees_its_node_and_turns_go_round() -> None:
    slots = NodeSlots({"a": 1, "b": 1})
    order = []
    for _ in range(4):  # one at a time: each node gets its turn, not the first node every time
        node = slots.pick()
        slots.started(node)
        order.append(node)
        slots.finished(node)
    assert order == ["a", "b", "a", "b"]
    slots.finished("a")  # more finishes than starts (a cancelled task's handle) never goes negative
    assert slots.running["a"] == 0


def test_a_node_that_left_is_not_picked_and_none_means_ray_decides() -> None:
    slots = NodeSlots({"a": 4, "b": 1})
    slots.refresh({"b": 1})
    assert slots.pick() == "b"
    slots.refresh({})
    assert slots.pick() is None
    slots.started(None)  # no node known: nothing is counted
    assert not slots.running
    assert on_node(None) == "SPREAD"
    strategy = on_node("ab" * 28)
    assert (strategy.node_id, strategy.soft, strategy._spill_on_unavailable) == ("ab" * 28, True, True)
    assert on_node("ab" * 28, spill=False)._spill_on_unavailable is False
