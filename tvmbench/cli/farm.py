"""`tvmbench farm ...`: the device farm, a TVM RPC tracker and its boards (orchestrator/farm/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator import farm
from tvmbench.cli.common import (
    INVALID,
    MAX_BOARDS,
    NOT_FOUND,
    ColumnsOpt,
    DbOpt,
    JsonOpt,
    TrackerOpt,
    TsvOpt,
    WideOpt,
    call,
    check_range,
    console,
    fail,
    home,
    note,
    open_store,
    print_json,
    tables,
)

if TYPE_CHECKING:
    from workers.toolchains.toolchain import Toolchain
from tvmbench.cli.lazy import lazy

columns = lazy("tvmbench.answers.columns")
report = lazy("tvmbench.answers.report")

app = typer.Typer(no_args_is_help=True, help="The device farm: a TVM RPC tracker and its boards.")

TvmOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tvm",
        help="Run the boards on this TVM release (repeatable: one set of boards per release): host boards under "
        "its toolchain (`tvmbench toolchains add`), emulated ones from a root with its wheels. Default: installed TVM.",
    ),
]


def _toolchains(releases: list[str]) -> list[Toolchain]:
    """The toolchain of each --tvm (the installed one by its version or as "installed"); one line, exit 2, for
    a release that has none here."""
    from workers.toolchains import registry
    from workers.toolchains.boards import installed_version
    from workers.toolchains.toolchain import INSTALLED, ToolchainError, installed

    found: list[Toolchain] = []
    for release in dict.fromkeys(releases):
        if not release.strip():
            fail("--tvm '': give a TVM release such as 0.26.0 (or `installed`)", code=INVALID)
        try:
            toolchain = installed() if release in (INSTALLED, installed_version()) else registry.find(release)
        except ToolchainError as exc:
            fail(f"--tvm {release}: {exc}", code=INVALID)
            raise AssertionError("unreachable") from None
        if toolchain is None:
            fail(
                f"--tvm {release}: no toolchain of TVM {release} here: `tvmbench toolchains add {release}` "
                "provisions it (`tvmbench toolchains list` shows those added)",
                code=INVALID,
            )
            raise AssertionError("unreachable")
        found.append(toolchain)
    return found


def _split_board_kinds(kinds: list[str], key: str) -> tuple[bool, list[str]]:
    """(whether --board named the native host kind, the emulated kinds): ``--board host`` is a host board."""
    from workers.board_kinds import kind_for_key

    native = [k for k in kinds if k == key or ((kind := kind_for_key(k)) is not None and kind.agent == "native")]
    return bool(native), [k for k in kinds if k not in native]


@app.command("up")
def farm_up(
    boards: Annotated[int, typer.Option(help="Number of host CPU boards.", min=0, max=MAX_BOARDS)] = 1,
    key: Annotated[str, typer.Option(help="Tracker key of the boards.")] = "host",
    host: Annotated[
        str, typer.Option(help="Address to bind. Anything but 127.0.0.1 exposes remote code execution.")
    ] = farm.LOOPBACK,
    port: Annotated[int | None, typer.Option(help="Tracker port (default: a free one).")] = None,
    board: Annotated[
        list[str] | None,
        typer.Option(
            "--board",
            help="Also start a board of this kind (repeatable): host, or an emulated one: "
            + ", ".join(farm.EMULATED_BOARDS)
            + ". Emulated boards are provisioned on first use, then cached.",
        ),
    ] = None,
    tvm: TvmOpt = None,
) -> None:
    """Start a local tracker and N board agents that stay up until `farm down`."""
    if port is not None:
        check_range("--port", port, 0, 65536)  # 0: a free one, like the default
    native, emulated = _split_board_kinds(board or [], key)
    toolchains = _toolchains(tvm) if tvm else None
    count = max(boards, 1) if native else boards
    local = call(farm.up, home(), {key: count}, emulated, host=host, port=port, note=note, toolchains=toolchains)
    wanted: dict[str, int] = {}
    for b in local.boards:
        wanted[b.key] = wanted.get(b.key, 0) + 1
    described = ", ".join(f"{n} with key {k!r}" for k, n in wanted.items())
    console.print(f"farm up: tracker {local.tracker}, boards: {described}")


@app.command("status")
def farm_status(as_json: JsonOpt = False) -> None:
    """The farm `farm up` started: its tracker, and each board with its key, TVM release, port and process."""
    import os

    from workers.toolchains.boards import installed_version

    state = farm.read_state(home())
    if state is None:
        fail("no farm configured: `tvmbench farm up` starts a local one, `tvmbench farm connect HOST:PORT` uses yours")
        return
    rows = []
    for b in state.get("boards", []):
        try:
            os.kill(int(b["pid"]), 0)
            alive = True
        except (ProcessLookupError, PermissionError, ValueError):
            alive = False
        rows.append(
            {
                "key": b["key"],
                "tvm": b.get("tvm_version") or installed_version(),
                "toolchain": b.get("toolchain") or "installed",
                "port": b["port"],
                "pid": b["pid"],
                "running": alive,
            }
        )
    if as_json:
        print_json({"tracker": state["tracker"], "managed": bool(state.get("managed")), "boards": rows})
        return
    kind = "started by `farm up`" if state.get("managed") else "connected (`farm connect`): boards not managed here"
    console.print(f"farm at {state['tracker']} ({kind})")
    for row in rows:
        console.print(
            f"  {row['key']:<24} TVM {row['tvm']:<14} toolchain {row['toolchain']:<10} port {row['port']:<6} "
            f"pid {row['pid']:<8} {'running' if row['running'] else 'not running'}"
        )


@app.command("down")
def farm_down() -> None:
    """Stop the farm `farm up` started, or forget the one `farm connect` recorded."""
    tracker = farm.down(home())
    console.print(f"farm at {tracker} stopped" if tracker else "no farm configured")


@app.command("connect")
def farm_connect(address: str) -> None:
    """Use an existing TVM RPC tracker (HOST:PORT) as the farm."""
    where = home()
    if farm.read_state(where):
        fail("a farm is already configured; run `tvmbench farm down` first")
    try:
        summary = farm.connect(where, address)
    except (farm.FarmError, ValueError) as exc:
        fail(str(exc))
    keys = (
        ", ".join(f"{k} ({v.get('free', 0)} free)" for k, v in summary.get("queue_info", {}).items()) or "no boards yet"
    )
    console.print(f"farm: tracker {address}; keys: {keys}")


@app.command("add")
def farm_add(
    key: Annotated[str, typer.Option(help="Tracker key of the new board.")] = "host",
    tvm: Annotated[
        str | None, typer.Option("--tvm", help="Run it under this TVM release's toolchain (default: installed TVM).")
    ] = None,
) -> None:
    """Add one host CPU board to the farm `farm up` started."""
    from orchestrator.spec.checks import checked_board_key

    call(checked_board_key, "--key", key)  # a SpecError: its one line, exit 2
    toolchain = _toolchains([tvm])[0] if tvm else None
    local, board = call(farm.add, home(), key, toolchain)
    console.print(f"board {board.key}@{local.host}:{board.port} registered")


@app.command("list")
def farm_list(
    tracker: TrackerOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    only: ColumnsOpt = None,
    tsv: TsvOpt = False,
    live: Annotated[
        bool, typer.Option("--live/--no-live", help="Ask each free board for its facts (else the database's).")
    ] = True,
) -> None:
    """Every board the tracker knows: key, state (free/busy), and its facts (live, else from the database)."""
    from tvmbench.answers import query

    tables(wide, only, tsv)
    address = tracker or farm.configured_tracker(home())
    if not address:
        fail("no farm configured: `tvmbench farm up` starts a local one, `tvmbench farm connect HOST:PORT` uses yours")
    known = {b.id: b for b in query.boards(open_store(db, read_only=True))}
    try:
        rows = farm.board_list(address, known, live=live)
    except OSError as exc:
        fail(f"tracker {address} does not answer ({exc}); is it running? (`tvmbench farm up`)")
    if as_json:
        print_json({"tracker": address, "boards": rows})
        return
    report.simple_table(console, rows, f"farm at {address}", columns.BOARDS)


@app.command("reset")
def farm_reset(board: str, db: DbOpt = None) -> None:
    """End a board's quarantine (BOARD: its id from `farm list`, or a prefix): it gets work again."""
    ids = call(open_store(db).reset_board, board)  # a prefix of several boards: one line, exit 2
    if not ids:
        fail(f"no board {board!r} in the results database; `tvmbench farm list` shows the board ids", code=NOT_FOUND)
    console.print(f"reset to ok (health check runs before its next job): {', '.join(ids)}")
