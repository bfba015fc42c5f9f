"""`tvmbench farm ...`: the device farm, a TVM RPC tracker and its boards (orchestrator/farm/)."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator import farm
from tvmbench.answers import columns, report
from tvmbench.cli.common import (
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

app = typer.Typer(no_args_is_help=True, help="The device farm: a TVM RPC tracker and its boards.")


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
            help="Also start an emulated board of this kind (repeatable): "
            + ", ".join(farm.EMULATED_BOARDS)
            + ". Provisioned on first use, then cached.",
        ),
    ] = None,
) -> None:
    """Start a local tracker and N board agents that stay up until `farm down`."""
    if port is not None:
        check_range("--port", port, 0, 65536)  # 0: a free one, like the default
    local = call(farm.up, home(), {key: boards}, board or [], host=host, port=port, note=note)
    wanted: dict[str, int] = {}
    for b in local.boards:
        wanted[b.key] = wanted.get(b.key, 0) + 1
    described = ", ".join(f"{n} with key {k!r}" for k, n in wanted.items())
    console.print(f"farm up: tracker {local.tracker}, boards: {described}")


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
def farm_add(key: Annotated[str, typer.Option(help="Tracker key of the new board.")] = "host") -> None:
    """Add one host CPU board to the farm `farm up` started."""
    local, board = call(farm.add, home(), key)
    console.print(f"board {key}@{local.host}:{board.port} registered")


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
