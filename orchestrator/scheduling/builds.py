"""The build queue: cache hits, builds to run, and program reuse between builds.

A build key whose ok Build is stored and whose artifact is in the cache is ready at once. Identical
programs skip codegen (workers/program_index.py): the first build to claim a program compiles it, a
later one returns with ``reused_from`` and takes that build's artifact, now if it is done, when it
finishes otherwise (it is parked on it). If the build it reused failed, or its task died, it is compiled
again by itself.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from db.store import ResultStore
from orchestrator.scheduling.jobs import JobState
from tvmbench.core.records import Build
from workers.artifacts import ArtifactCache
from workers.program_index import reuse_key


class BuildQueue:
    """Builds of one run by build key: done (``builds``, ``artifacts``), to run, parked on another."""

    def __init__(
        self, states: dict[str, list[JobState]], store: ResultStore, cache: ArtifactCache, put: Callable[[Any], Any]
    ) -> None:
        self.states, self.cache, self.put = states, cache, put
        self.builds: dict[str, Build] = {}
        self.artifacts: dict[str, Any] = {}  # build key -> pool reference of the artifact bytes
        self.to_build: deque[str] = deque()
        self.parked: dict[str, list[tuple[str, Build]]] = defaultdict(list)  # compiling build -> reusing builds
        self.no_reuse: set[str] = set()  # builds to compile themselves (the build they reused failed)
        self.lost: set[str] = set()  # builds whose task died: whoever claimed their program compiles it itself
        self.cached: list[str] = []
        self.known: dict[str, str] = {}  # reuse key -> build key with the artifact, for the program index
        stored_builds = store.get_builds(list(states))
        for build_key, jobs in states.items():
            stored = stored_builds.get(build_key)
            data = self.cache.get(stored.artifact_sha256) if stored and stored.ok and stored.artifact_sha256 else None
            if stored is not None and data is not None:
                self.builds[build_key] = stored
                self.artifacts[build_key] = put(data)
                self.cached.append(build_key)
                if stored.fingerprint:
                    self.known.setdefault(reuse_key(stored.fingerprint, jobs[0].job), build_key)
            else:
                self.to_build.append(build_key)

    def take_sharing(self, build_key: str, lowering: Callable[[str], str | None], most: int) -> list[str]:
        """Up to ``most`` queued builds that share ``build_key``'s pipeline run, taken off the queue.

        ``lowering``: build key -> the key of its shared pipeline run (Executor.shared_lowering), or None.
        """
        shared = lowering(build_key)
        if shared is None:
            return []
        keys = [k for k in self.to_build if lowering(k) == shared][:most]
        for key in keys:
            self.to_build.remove(key)
        return keys

    def finished(self, build_key: str, build: Build, data: bytes | None) -> list[tuple[str, Build]]:
        """A build task ended: the (build key, Build) pairs now done, in order (it, then builds parked on it).

        Empty when the build reused a program still compiling (parked) or that failed (queued again).
        """
        if build.ok and build.reused_from:
            leader = self.builds.get(build.reused_from)
            if build.reused_from in self.lost:  # its claim outlived it in the program index
                self._rebuild(build_key)
                return []
            if leader is None:  # still compiling: wait for it
                self.parked[build.reused_from].append((build_key, build))
                return []
            if not leader.ok or build.reused_from not in self.artifacts:
                self._rebuild(build_key)
                return []
            build = self._adopt(build, leader)
        elif data is not None:
            self.cache.put(data)
            self.artifacts[build_key] = self.put(data)
        self.builds[build_key] = build
        done = [(build_key, build)]
        for parked_key, parked in self.parked.pop(build_key, []):
            if build.ok and build_key in self.artifacts:
                adopted = self._adopt(parked, build)
                self.builds[parked_key] = adopted
                done.append((parked_key, adopted))
            else:
                self._rebuild(parked_key)
        return done

    def lose(self, build_key: str) -> None:
        """A build whose task died: the builds parked on its program, now or later, compile by themselves."""
        self.lost.add(build_key)
        for parked_key, _ in self.parked.pop(build_key, []):
            self._rebuild(parked_key)

    def _adopt(self, build: Build, leader: Build) -> Build:
        """``build`` with the artifact of ``leader`` (the identical program), and the codegen passes that made it."""
        assert build.reused_from is not None
        self.artifacts[build.build_key] = self.artifacts[build.reused_from]
        codegen = leader.pass_trace[leader.pipeline_passes :] if leader.pipeline_passes is not None else ()
        return replace(
            build,
            artifact_sha256=leader.artifact_sha256,
            artifact_size=leader.artifact_size,
            artifact_arch=leader.artifact_arch,
            pass_trace=(*build.pass_trace, *codegen),
        )

    def _rebuild(self, build_key: str) -> None:
        """Compile ``build_key`` by itself (the build whose artifact it was to share failed)."""
        self.no_reuse.add(build_key)
        self.to_build.appendleft(build_key)
