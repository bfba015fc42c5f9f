"""Which Ray node a one-CPU task goes to: the node with the most CPUs not taken by this caller's tasks.

Ray's SPREAD is best effort. A worker that finished its task takes the next queued task of the same
function and resources without asking the scheduler again (lease reuse), so when another node's worker is
slow to start, which on a loaded machine takes seconds, every build of a short sweep ran on the first
node. The caller counts its own tasks per node and names the node (soft node affinity): placement no
longer depends on how fast a worker starts. The affinity is soft: a node that died, or can never fit
the task, hands it to the rest of the cluster. Whether a node that is only busy (another sweep's tasks
hold its CPUs) hands it on too is the caller's choice: a sweep's builds do, so that a shared cluster's
idle nodes are used; a parallel search's groups do not, because the tuned build that submits them holds
a CPU of its own until it waits for them, and a group that spilled away from that node at that instant
would make their placement a matter of timing again.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class NodeSlots:
    """Nodes' CPUs and this caller's tasks on each: where the next task goes (no Ray needed)."""

    def __init__(self, cpus: dict[str, int] | None = None) -> None:
        self.cpus: dict[str, int] = dict(cpus or {})
        self.running: Counter[str] = Counter()
        self.placed: Counter[str] = Counter()  # ever: ties go to the node that has had fewer

    def refresh(self, cpus: dict[str, int]) -> None:
        """The cluster's nodes now (node id -> CPUs); the counts of nodes still there are kept."""
        self.cpus = dict(cpus)

    def pick(self) -> str | None:
        """The node for the next task: most CPUs free of our tasks, then fewest placed, then node id."""
        if not self.cpus:
            return None
        return min(self.cpus, key=lambda n: (self.running[n] - self.cpus[n], self.placed[n], n))

    def started(self, node: str | None) -> None:
        if node is not None:
            self.running[node] += 1
            self.placed[node] += 1

    def finished(self, node: str | None) -> None:
        if node is not None and self.running[node] > 0:
            self.running[node] -= 1


def cpu_nodes() -> dict[str, int]:
    """The live nodes of the connected Ray cluster that have CPUs: node id -> CPUs."""
    import ray

    return {
        n["NodeID"]: int(n["Resources"]["CPU"])
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1
    }


def on_node(node: str | None, spill: bool = True) -> Any:
    """The scheduling strategy that sends a task to ``node``; SPREAD if None.

    Soft: elsewhere if the node is gone; with ``spill`` also while its CPUs are all taken.
    """
    if node is None:
        return "SPREAD"
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=spill)
