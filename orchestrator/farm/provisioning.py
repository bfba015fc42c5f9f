"""Which boards this machine can start, and how: the command of each board agent, and the provisioned
roots of the emulated Linux boards (infra/farm/<key>/provision.sh). The kinds are workers/board_kinds.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from orchestrator.farm.errors import FarmError
from workers.board_kinds import BOARD_AGENT, INFRA_DIR, BoardKind, kind_for_key, provisioned_kinds
from workers.toolchains.boards import release_key
from workers.toolchains.pins import PINS

__all__ = [
    "EMULATED_BOARDS",
    "EMULATED_BOARD_START_S",
    "INFRA_DIR",
    "Note",
    "board_command",
    "board_root",
    "is_provisioned",
    "provision_board",
    "provision_boards",
]

EMULATED_BOARDS: dict[str, BoardKind] = provisioned_kinds()
EMULATED_BOARD_START_S = 180.0  # `import tvm` alone takes 6-30 s under qemu on a busy machine

Note = Callable[[str], None]  # how a long step tells the user what it is doing (the CLI prints it dimmed)


def board_root(key: str) -> Path:
    """Where the emulated board ``key`` is provisioned: TVMBENCH_BOARD_ROOT_<KEY>, else TVMBENCH_HOME/boards/<key>.

    ``key`` is a tracker key: a release's board has a root of its own (arm64-emu-tvm0.26.0; in the
    variable's name every character but letters and digits is ``_``: ..._ARM64_EMU_TVM0_26_0).
    """
    env = os.environ.get("TVMBENCH_BOARD_ROOT_" + re.sub(r"[^A-Z0-9]", "_", key.upper()))
    if env:
        return Path(env)
    from db.engine import default_home  # here: db.engine loads SQLAlchemy, which `farm up --help` must not

    return default_home() / "boards" / key


def is_provisioned(root: Path) -> bool:
    return (root / ".tvmbench-provisioned").is_file()


def provision_board(
    key: str,
    root: Path | None = None,
    log: Path | None = None,
    *,
    tvm_version: str | None = None,
    base_root: Path | None = None,
) -> Path:
    """Provision the emulated board ``key`` into ``root`` (once; a provisioned root is reused).

    ``tvm_version``: the board runs that TVM release (its wheels for the board's architecture, with the
    tvm-ffi of ``pins.PINS``) instead of the script's default; ``base_root``, a provisioned root of another
    release, lends its userland. FarmError for a release without a pin, or a kind whose script cannot
    install another release (its stamp must name the release asked for).
    """
    kind = EMULATED_BOARDS[key]
    root = root or board_root(key)
    env = {**os.environ, "PYTHON": sys.executable}  # this interpreter has pip; a bare python3 may not
    if tvm_version is not None:
        pin = PINS.get(tvm_version)
        if pin is None:
            raise FarmError(
                f"board {key} with TVM {tvm_version}: no tvm-ffi pin for that release in "
                f"workers/toolchains/pins.py (pinned: {', '.join(PINS)})"
            )
        env.update(TVM_VERSION=pin.tvm, TVM_FFI_VERSION=pin.ffi)
        if base_root is not None and is_provisioned(base_root):
            env["BASE_ROOT"] = str(base_root)
    # The script is idempotent (it checks its own pins), so a provisioned root costs one bash start.
    result = subprocess.run(
        ["bash", str(kind.provision_script), str(root)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        check=False,
    )
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(result.stdout)
    if result.returncode != 0:
        tail = " | ".join(result.stdout.strip().splitlines()[-3:])
        raise FarmError(f"provisioning board {key} into {root} failed: {tail}")
    stamp = (root / ".tvmbench-provisioned").read_text() if is_provisioned(root) else ""
    if tvm_version is not None and f"apache-tvm[rpc]=={tvm_version} " not in f"{stamp} ":
        raise FarmError(
            f"board {key}: its {kind.provision_script.name} did not install TVM {tvm_version} into {root} "
            f"(it provisioned: {stamp.strip() or 'nothing'}); boards of other releases are not supported for this kind"
        )
    return root


def provision_boards(
    home: Path, keys: list[str], note: Note = lambda _msg: None, tvm_versions: list[str | None] | None = None
) -> dict[str, str]:
    """Provision each emulated board of ``keys`` (once; a provisioned root is reused): {tracker key: root}.

    With ``tvm_versions``, one root per release (None or the installed one: the plain key's root), each
    under its release's key (``release_key``); a release's root borrows the userland of the plain one
    when that is provisioned. FarmError names a key this machine cannot emulate, or a provisioning that failed.
    """
    roots: dict[str, str] = {}
    for key in keys:
        if key not in EMULATED_BOARDS:
            raise FarmError(
                f"--board {key!r} is not a board this machine can emulate; use one of: {', '.join(EMULATED_BOARDS)}"
            )
        for version in tvm_versions or [None]:
            tracker_key = release_key(key, version)
            root = board_root(tracker_key)
            if not is_provisioned(root):
                note(f"provisioning board {tracker_key} into {root} (once; about a minute)")
            release = version if tracker_key != key else None
            log = home / "logs" / f"provision-{tracker_key}.log"
            roots[tracker_key] = str(
                provision_board(key, root, log=log, tvm_version=release, base_root=board_root(key))
            )
    return roots


def board_command(
    key: str,
    tracker: str,
    host: str,
    port: int,
    root: Path | None = None,
    *,
    python: str = sys.executable,
    tracker_key: str | None = None,
    hold: Path | None = None,
) -> list[str]:
    """The command that runs one board agent for ``key``: natively, or under its emulator.

    ``python`` runs a native agent (a toolchain's interpreter: that release's runtime), which registers
    under ``tracker_key`` (default ``key``; a release's boards register under ``release_key``) and holds
    the lock file ``hold`` shared while it runs (its toolchain's, so that it is not removed under it).
    """
    agent_args = ["--tracker", tracker, "--key", tracker_key or key, "--host", host, "--port", str(port)]
    if hold is not None:
        agent_args += ["--hold", str(hold)]
    kind = kind_for_key(key)
    if kind is None:  # a key of no known kind (a second host, a lab's own board): a native agent under it
        return [python, str(BOARD_AGENT), *agent_args]
    if kind.agent == "native":
        return kind.agent_command(agent_args, python=python)
    if python != sys.executable:
        raise FarmError(
            f"board {key} runs under {kind.agent}, not under a host toolchain's python: its release is the "
            "one its root was provisioned with (provision_boards with tvm_versions)"
        )
    if kind.agent == "mcu":  # an emulated microcontroller (cortex-m4-emu, ...) gets the MCU agent
        return kind.agent_command(agent_args)
    if shutil.which(kind.emulator or "") is None:
        raise FarmError(f"board {key} needs {kind.emulator}: apt-get install {kind.emulator_package}")
    root = root or board_root(key)
    if not is_provisioned(root):
        raise FarmError(
            f"board {key} is not provisioned at {root}: run {kind.provision_script} {root} "
            f"(or `tvmbench farm up --board {key}`, which provisions it)"
        )
    return kind.agent_command(agent_args, root)
