"""`tvmbench farm ...`: the device farm, a TVM RPC tracker and its boards (orchestrator/farm/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

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
    from workers.toolchains import pins, registry
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
        meant = [name for name in pins.PINS if name.startswith(release + ".")]
        if toolchain is None and meant:  # "0.26": the pinned release it shortens is what `add` takes
            added = meant[-1] == installed_version() or registry.find(meant[-1]) is not None
            fail(
                f"--tvm {release}: write {meant[-1]}, the pinned release it matches"
                + ("" if added else f" (not added here: `tvmbench toolchains add {meant[-1]}` provisions it)"),
                code=INVALID,
            )
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


def _check_listen(host: str, port: int) -> None:
    """One line, exit 2, unless the tracker could listen on ``host``:``port`` (0: a free port) right now."""
    import errno

    from workers.tracker_client import parse_addr

    try:  # the farm is recorded and reached as HOST:PORT: a host that cannot be written so is refused now
        parse_addr(f"{host}:{port or 1}")
    except ValueError:
        fail(f"--host {host!r}: a local farm listens on an IPv4 address or host name, e.g. 127.0.0.1", code=INVALID)
    try:
        farm.listen(host, port).close()
    except OSError as exc:  # like `serve --port`: a port taken, or an address that is not this machine's
        where = f"{host}:{port}" if port else host
        fix = "choose another --port" if exc.errno == errno.EADDRINUSE else "give --host an address of this machine"
        fail(f"cannot listen on {where}: {exc.strerror or exc}; {fix}", code=INVALID)


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
    from orchestrator.spec.checks import checked_board_key

    if port is not None:
        check_range("--port", port, 0, 65536)  # 0: a free one, like the default
    call(checked_board_key, "--key", key)  # as `farm add --key` and sweep files: one line, exit 2
    native, emulated = _split_board_kinds(board or [], key)
    if boards == 0 and not native and not emulated:  # bad input like any option out of range: exit 2
        fail("--boards 0 starts no board: give --boards 1 or more, or --board KIND", code=INVALID)
    _check_listen(host, port or 0)
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

    state = call(farm.read_state, home())  # a damaged farm.json: one line naming it, exit 1
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
        process = _process_state(int(b["pid"])) if alive else "not running"
        alive = process != "not running"
        rows.append(
            {
                "key": b["key"],
                "tvm": b.get("tvm_version") or installed_version(),
                "toolchain": b.get("toolchain") or "installed",
                "port": b["port"],
                "pid": b["pid"],
                "running": alive,
                "process": process,
            }
        )
    problem = _tracker_problem(state)
    dead = [row for row in rows if not row["running"]]
    stopped = [row for row in rows if row["process"] == "stopped"]
    if as_json:
        print_json(
            {
                "tracker": state["tracker"],
                "managed": bool(state.get("managed")),
                "tracker_running": problem is None,
                "boards": rows,
            }
        )
    else:
        kind = "started by `farm up`" if state.get("managed") else "connected (`farm connect`): boards not managed here"
        console.print(f"farm at {state['tracker']} ({kind}): tracker {'answers' if problem is None else 'DOWN'}")
        for row in rows:
            console.print(
                f"  {row['key']:<24} TVM {row['tvm']:<14} toolchain {row['toolchain']:<10} port {row['port']:<6} "
                f"pid {row['pid']:<8} {row['process']}"
            )
    # Non-zero when the farm cannot serve as recorded, so that scripts can ask `farm status` whether it is up.
    if problem is not None:
        restart = "`tvmbench farm down` then `tvmbench farm up`"
        fix = restart if state.get("managed") else f"start it again, or {restart} for a local farm instead"
        fail(f"the farm's tracker {state['tracker']} {problem}; {fix}")
    if stopped:
        # A stopped agent stays registered and takes connections it never answers: each job offered it
        # waits for its handshake (tracker_client.HANDSHAKE_S), then retries elsewhere.
        pids = " ".join(str(r["pid"]) for r in stopped)
        fail(
            f"{len(stopped)} of {len(rows)} board(s) stopped (SIGSTOP, Ctrl-Z or a debugger: pid {pids}); "
            f"`kill -CONT {pids}` lets them serve again"
        )
    if dead:
        fail(
            f"{len(dead)} of {len(rows)} board(s) not running (pid {', '.join(str(r['pid']) for r in dead)}); "
            "`tvmbench farm down` then `tvmbench farm up` starts them again"
        )


def _process_state(pid: int) -> str:
    """ "running", "stopped" (SIGSTOP, traced) or "not running" (a zombie) for a process that exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc here: what os.kill said
        return "running"
    return {"T": "stopped", "t": "stopped", "Z": "not running", "X": "not running"}.get(state, "running")


def _tracker_problem(state: dict[str, Any]) -> str | None:
    """Why the recorded farm's tracker cannot serve (its process gone, or it does not answer), or None."""
    import os

    from workers.tracker_client import tracker_summary

    pid = state.get("tracker_pid")
    if state.get("managed") and pid is not None:
        try:
            os.kill(int(pid), 0)
        except (ProcessLookupError, ValueError):
            return f"is not running (its process {pid} is gone)"
        except PermissionError:  # a process of another user has that pid now: not ours
            return f"is not running (pid {pid} is another user's process now)"
    try:  # a pid alone could be a zombie or a reused pid: the tracker must also answer as a tracker
        tracker_summary(state["tracker"], timeout_s=5)
    except (OSError, ValueError, RuntimeError) as exc:
        return f"does not answer ({exc})"
    return None


@app.command("down")
def farm_down(
    force: Annotated[
        bool, typer.Option("--force", help="Remove a damaged farm.json (processes it recorded are not stopped).")
    ] = False,
) -> None:
    """Stop the farm `farm up` started, or forget the one `farm connect` recorded."""
    tracker = call(farm.down, home(), force)
    if tracker == "":  # --force removed a farm.json that could not say which processes to stop
        console.print(
            f"removed the damaged {farm.state_file(home())}; a tracker or boards it recorded were not stopped "
            f"(their logs are in {home() / 'logs' / 'farm'})"
        )
        return
    console.print(f"farm at {tracker} stopped" if tracker else "no farm configured")


@app.command("connect")
def farm_connect(address: str) -> None:
    """Use an existing TVM RPC tracker (HOST:PORT) as the farm."""
    from workers.tracker_client import parse_addr

    address = address.strip()
    try:  # bad input is exit 2, as `farm list --tracker`; 1 stays "no tracker answers there"
        parse_addr(address)
    except ValueError as exc:
        fail(f"{exc}: give a port in 1-65535, e.g. 127.0.0.1:9190 or [::1]:9190", code=INVALID)
    try:  # a farm already configured, or a damaged farm.json: refused under the farm lock, one line
        summary = farm.connect(home(), address)
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

    tables(wide, only, tsv, as_json)
    address = tracker or call(farm.configured_tracker, home())  # a damaged farm.json: one line, exit 1
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
