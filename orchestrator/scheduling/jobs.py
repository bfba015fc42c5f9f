"""One object per job of a sweep run: its attempts, the boards it failed on, its leader or followers.

Jobs that build the identical program (same fingerprint) for the same board key and measure settings
are equivalent: the first becomes the leader and is measured; the others follow it and get a copy of
its final run (``Run.equivalent_to`` naming the leader) instead of a measurement of their own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tvmbench.core.records import Build, Job, Run, canonical_hash


@dataclass(eq=False)
class JobState:
    """A job in this run. ``attempt``: the last attempt number given out (the store's count at the start)."""

    job: Job
    build_key: str
    attempt: int = 0
    failed_on: set[str] = field(default_factory=set)  # boards an attempt failed on (a retry prefers another)
    leader: JobState | None = None
    followers: list[JobState] = field(default_factory=list)
    run: Run | None = None  # the final run, once it has one
    status: str = "pending"
    # The tracker key of the boards that run its artifact when not the target's: those of its TVM release
    # (workers/toolchains/boards.release_key) for a job of the tvm axis built by another release.
    route: str | None = None

    @property
    def key(self) -> str:
        return self.job.key

    @property
    def board_key(self) -> str:
        return self.route or self.job.target.board_key

    def next_attempt(self) -> int:
        self.attempt += 1
        return self.attempt


class Equivalence:
    """Leaders by equivalence key: who measures, who follows."""

    def __init__(self) -> None:
        self._leaders: dict[str, JobState] = {}

    def leader_of(self, state: JobState, build: Build) -> JobState | None:
        """The leader ``state`` follows (now attached to it), or None when ``state`` leads its program."""
        same = canonical_hash([build.fingerprint, state.board_key, asdict(state.job.measure)])
        leader = self._leaders.setdefault(same, state)
        if leader is state:
            return None
        state.leader = leader
        if leader.run is None:
            leader.followers.append(state)
        return leader
