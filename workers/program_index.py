"""Which programs are built or being built: identical programs skip codegen and export.

A program's identity (its fingerprint, the structural hash of the IR after the Relax pipeline plus
what turns it into machine code) is known before codegen, which is 3-8 s of a 9-15 s build. The first
build task to claim a program compiles it; a later one, in any Ray task on any node, learns the build
key that has (or will have) the artifact and returns at once with ``Build.reused_from`` set. The
driver then gives it that artifact. The index is one small Ray actor per sweep run (``ProgramIndex``),
created by the driver and handed to the build tasks; ``Claims`` is the in-process form for callers
outside Ray.
"""

from __future__ import annotations

from collections.abc import Callable

from tvmbench.core.records import Job, canonical_hash

# A Builder's hook: (reuse key, this build's key) -> the build key that builds that program, or None
# when this build is the one to compile it.
ClaimFn = Callable[[str, str], str | None]


def reuse_key(fingerprint: str, job: Job) -> str:
    """What makes two builds' artifacts interchangeable: the program and the compiler that links it."""
    return canonical_hash([fingerprint, job.target.cross_compiler])


class Claims:
    """Reuse key -> the build key that compiles it (the first to claim it)."""

    def __init__(self, known: dict[str, str] | None = None) -> None:
        self._owner: dict[str, str] = dict(known or {})

    def claim(self, reuse_key: str, build_key: str) -> str | None:
        """None when ``build_key`` is the one to compile the program, else the build key that does."""
        owner = self._owner.setdefault(reuse_key, build_key)
        return None if owner == build_key else owner

    def release(self, reuse_key: str, build_key: str) -> None:
        """``build_key`` could not compile the program after all: the next claim compiles it."""
        if self._owner.get(reuse_key) == build_key:
            del self._owner[reuse_key]

    def owners(self) -> dict[str, str]:
        return dict(self._owner)


def start_index(known: dict[str, str] | None = None) -> object:
    """A ``Claims`` in a Ray actor (no CPU), for the build tasks of one sweep run."""
    import ray

    return ray.remote(num_cpus=0, max_restarts=0)(Claims).remote(known)


def remote_claim(index: object) -> ClaimFn:
    """The Builder hook that asks the actor ``index``."""
    import ray

    def claim(reuse_key: str, build_key: str) -> str | None:
        return ray.get(index.claim.remote(reuse_key, build_key))  # type: ignore[attr-defined]

    return claim
