"""Which boards run which TVM runtime: the tracker key a board of one release registers under.

An artifact loads only in the runtime of the release that built it, so a job of a release that is not the
installed one asks the tracker for ``release_key(key, version)`` and never sees a board of another release.
The installed release keeps the plain key: farms and sweeps without a ``tvm`` axis are unchanged, and a
stock ``rpc_server`` of any release joins a release's pool by registering under its key.
"""

from __future__ import annotations

from functools import cache

RELEASE_MARK = "-tvm"  # host-tvm0.26.0 (not ``:``: TVM splits a server's match key at it)


@cache
def installed_version() -> str:
    """The apache-tvm version of this process (read without importing TVM)."""
    from workers.build_common import tvm_versions

    return tvm_versions()[0]


def release_key(key: str, tvm_version: str | None) -> str:
    """The tracker key of boards of ``key`` that run TVM ``tvm_version`` (``key`` itself for the installed one)."""
    if tvm_version is None or tvm_version == installed_version():
        return key
    return f"{key}{RELEASE_MARK}{tvm_version}"


def split_release_key(tracker_key: str) -> tuple[str, str | None]:
    """(board key, release) of a tracker key; the release is None for a plain key (the installed release)."""
    key, mark, version = tracker_key.rpartition(RELEASE_MARK)
    if mark and key and version[:1].isdigit():
        return key, version
    return tracker_key, None
