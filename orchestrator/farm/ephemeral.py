"""The farm a sweep runs against: the one given or configured, else an ephemeral local one stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from orchestrator.farm.errors import check_board_count
from orchestrator.farm.local import LocalFarm
from orchestrator.farm.processes import reap_stale_farms, write_pid_file
from orchestrator.farm.provisioning import EMULATED_BOARDS, Note, provision_boards
from orchestrator.farm.state import configured_tracker
from workers.board_kinds import kind_for_key
from workers.toolchains.toolchain import Toolchain


def _is_mcu(key: str) -> bool:
    kind = kind_for_key(key)
    return kind is not None and kind.agent == "mcu"


@contextmanager
def farm_for_run(
    home: Path,
    tracker: str | None,
    boards: int,
    board_keys: set[str] | None = None,
    note: Note = lambda _m: None,
    toolchains: Sequence[Toolchain] | None = None,
) -> Iterator[str]:
    """The tracker to run a sweep against: ``tracker``, the configured farm, or an ephemeral local one.

    The ephemeral farm (stopped afterwards) starts ``boards`` host boards and one board for each key of
    ``board_keys`` this machine can emulate (an aarch64 board under qemu, provisioned the first time; a
    Cortex-M under QEMU). Its processes die with this driver even on SIGKILL (PR_SET_PDEATHSIG), and are
    recorded in a pid file so that the next run or resume stops anything a killed driver left behind.
    With ``toolchains`` (the releases a sweep needs), the host and emulated boards are started once per
    toolchain, each running that release's runtime under its release's key (``LocalFarm.start``).
    """
    check_board_count(boards)
    address = tracker or configured_tracker(home)
    if address:
        yield address
        return
    reap_stale_farms(home)
    keys = board_keys or set()
    wanted: dict[str, int] = {"host": boards}
    versions = [t.tvm_version for t in toolchains] if toolchains else None
    emulated = sorted(keys & set(EMULATED_BOARDS))
    roots = provision_boards(home, emulated, note, tvm_versions=versions)
    wanted.update(dict.fromkeys(emulated, 1))
    wanted.update(dict.fromkeys(sorted(k for k in keys if _is_mcu(k)), 1))
    described = ", ".join(f"{n} {k}" for k, n in wanted.items())
    note(f"no farm configured: starting a local tracker and board(s) {described} on 127.0.0.1")
    local = LocalFarm.start(
        home / "logs" / "ephemeral-farm", wanted, board_roots=roots, die_with_parent=True, toolchains=toolchains
    )
    pid_file = write_pid_file(home, local.to_json())
    try:
        yield local.tracker
    finally:
        local.stop()
        pid_file.unlink(missing_ok=True)
