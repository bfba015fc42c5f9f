"""The TVM RPC tracker client: summaries, and board requests bounded by a deadline.

TVM's own tracker client blocks forever when no board is free; every wait here is bounded by socket
timeouts against one deadline. Used by the runners (workers/board_session.py), the farm and the
scheduler (which keys have a board on this machine).

The tracker's wire format (a magic number, then length-prefixed JSON) is spoken here without TVM:
importing tvm costs the driver a second or more, and the driver talks to the tracker only to ask what it
has. Only the RPC session itself (``tvm.rpc.connect``) needs TVM. tests/test_tracker_client.py checks these
constants against tvm.rpc.base.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

TRACKER_MAGIC = 0x2F271  # tvm.rpc.base.RPC_TRACKER_MAGIC
CODE_SUCCESS, CODE_REQUEST, CODE_SUMMARY = 0, 4, 6  # tvm.rpc.base.TrackerCode
MAX_MESSAGE_BYTES = 64 << 20  # a summary of thousands of boards is a few hundred KB
# A live board answers the RPC handshake in its accept loop within milliseconds (an emulated one too); TVM's
# own rpc.connect waits for it forever.
HANDSHAKE_S = 20.0
LAST_LOOK_S = 2.0  # a live tracker answers a summary in milliseconds
# How long past its session_timeout_s a session may go before the client ends it (SessionWatchdog): the
# board's own server ends it at the deadline, and the client sees that within a moment unless the board is
# stopped or hung.
SESSION_GRACE_S = 15.0


class NotATracker(ConnectionError):
    """What answers at the address is not a TVM RPC tracker (a database, a web server): an OSError, like a
    refused connection, so that every caller that says "no tracker answers" says it for this too."""


class DeviceUnavailable(RuntimeError):
    """No board of the key became free before the deadline."""


class BoardNotAnswering(RuntimeError):
    """A board the tracker offered took the connection but did not answer the RPC handshake in time: stopped
    (SIGSTOP, a debugger), hung or cut off while still registered. ``board_id`` names it, so that the attempt
    counts against that board and its retry goes to another."""

    def __init__(self, board_id: str, waited_s: float) -> None:
        super().__init__(
            f"board {board_id} took the connection but did not answer the RPC handshake within {waited_s:g} s "
            "(stopped, hung or cut off while still registered with the tracker)"
        )
        self.board_id = board_id


class NoBoardRegistered(RuntimeError):
    """The tracker knows no board of the key at all."""


class TrackerUnreachable(NoBoardRegistered):
    """No tracker answered at the address when the wait ended (refused, killed, `farm down`): the message says
    so and what to run. A NoBoardRegistered, so that callers that park a job as pending-device (resumed once a
    tracker with boards answers) keep doing so; those that word their own message can tell it apart."""

    def __init__(self, tracker: str, error: BaseException) -> None:
        super().__init__(
            f"the tracker at {tracker} is not answering ({error}): start it (`tvmbench farm up` for a local farm) "
            f"or check that it runs (`tvmbench farm list --tracker {tracker}`)"
        )


@dataclass(frozen=True)
class Session:
    """An RPC session on one board; the board is busy until the last reference to ``remote`` goes."""

    remote: Any  # tvm.rpc.RPCSession
    board_id: str
    # time.monotonic() just before connecting: the board's session deadline runs from a moment later, so
    # an error this long after it or more came at or past the deadline (board_session.classify).
    opened_at: float


def parse_addr(addr: str) -> tuple[str, int]:
    """(host, port) of a ``HOST:PORT`` or ``[IPV6]:PORT`` tracker address; ValueError naming it otherwise."""
    import ipaddress

    host, _, port = addr.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"tracker address {addr!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):  # the socket wants the IPv6 address without its brackets
        try:
            return str(ipaddress.IPv6Address(host[1:-1])), int(port)
        except ValueError:
            raise ValueError(f"tracker address {addr!r} is not HOST:PORT ({host} is no IPv6 address)") from None
    if ":" in host or "[" in host or "]" in host:  # "::1:9190" could be an address with no port: ask for brackets
        raise ValueError(f"tracker address {addr!r} is not HOST:PORT (an IPv6 host goes in brackets: [::1]:9190)")
    try:  # what the resolver will do with it: a label over 63 characters, or an empty one, is no host name
        host.encode("idna")
    except UnicodeError:
        raise ValueError(f"tracker address {addr!r} is not HOST:PORT ({host[:40]!r}... is no host name)") from None
    return host, int(port)


def tracker_summary(tracker: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The tracker's summary: {"queue_info": {key: {free, pending}}, "server_info": [...]}."""
    sock = _tracker_socket(tracker, timeout_s)
    try:
        send_json(sock, [CODE_SUMMARY])
        value = recv_json(sock)
    finally:
        sock.close()
    if value[0] != CODE_SUCCESS:
        raise RuntimeError(f"tracker {tracker} answered {value!r} to a summary request")
    return value[1]


def registered_keys(summary: dict[str, Any]) -> dict[str, int]:
    """Board count per key, from a tracker summary."""
    counts: dict[str, int] = {}
    for server in summary.get("server_info", []):
        key = str(server.get("key", "")).removeprefix("server:")
        counts[key] = counts.get(key, 0) + 1
    return counts


def send_json(sock: socket.socket, value: Any) -> None:
    """One tracker message: its length as a little-endian int32, then the JSON."""
    data = json.dumps(value).encode("utf-8")
    sock.sendall(struct.pack("<i", len(data)) + data)


def recv_json(sock: socket.socket) -> Any:
    """The next tracker message (OSError when the tracker closes the connection midway, NotATracker when
    what arrives is not a tracker message)."""
    size = struct.unpack("<i", _recv_exactly(sock, 4))[0]
    if not 0 <= size <= MAX_MESSAGE_BYTES:
        raise NotATracker(f"a tracker message of {size} bytes: not a TVM RPC tracker's answer")
    try:
        return json.loads(_recv_exactly(sock, size).decode("utf-8"))
    except ValueError as exc:  # undecodable bytes or not JSON
        raise NotATracker(f"not a TVM RPC tracker's answer ({exc})") from None


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = sock.recv(min(left, 65536))
        if not chunk:
            raise ConnectionResetError("the tracker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _tracker_socket(tracker: str, timeout_s: float) -> socket.socket:
    host, port = parse_addr(tracker)
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.sendall(struct.pack("<i", TRACKER_MAGIC))
    magic = struct.unpack("<i", _recv_exactly(sock, 4))[0]
    if magic != TRACKER_MAGIC:
        sock.close()
        raise NotATracker(f"{tracker} is not a TVM RPC tracker")
    return sock


def _request_once(
    tracker: str, key: str, wait_s: float, session_timeout_s: float, handshake_s: float | None = None
) -> Session:
    """One REQUEST to the tracker, bounded by ``wait_s`` (TimeoutError -> DeviceUnavailable)."""
    from tvm import rpc

    sock = _tracker_socket(tracker, timeout_s=min(10.0, wait_s))
    try:
        sock.settimeout(wait_s)
        send_json(sock, [CODE_REQUEST, key, "", 1])
        try:
            value = recv_json(sock)
        except TimeoutError:
            raise DeviceUnavailable(key) from None
    finally:
        # Closing does not withdraw a pending request from the tracker; a board offered to it later
        # regenerates its match key after a few seconds and is free again.
        sock.close()
    if value[0] != CODE_SUCCESS:
        raise RuntimeError(f"tracker {tracker} answered {value!r} to a request for {key}")
    url, port, matchkey = value[1]
    opened_at = time.monotonic()
    board_id = f"{key}@{url}:{port}"
    remote = connect_bounded(
        lambda: rpc.connect(url, port, matchkey, session_timeout_s), url, port, board_id, handshake_s
    )
    return Session(remote=remote, board_id=board_id, opened_at=opened_at)


def _peer_sockets(addresses: set[tuple[str, int]]) -> set[int]:
    """File descriptors of this process's sockets connected to one of ``addresses``."""
    import os

    found = set()
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc (not Linux): nothing can be woken, the caller's thread is left to the board
        return found
    for fd in fds:
        try:
            sock = socket.socket(fileno=fd)  # wraps the descriptor without a copy: detached below, never closed
        except OSError:  # not a socket (or closed meanwhile)
            continue
        try:
            if sock.getpeername()[:2] in addresses:
                found.add(fd)
        except (OSError, TypeError, IndexError):  # unconnected, or a Unix socket (its peer is a string)
            pass
        finally:
            sock.detach()
    return found


def _addresses(host: str, port: int) -> set[tuple[str, int]]:
    """The (address, port) pairs a socket connected to ``host:port`` reports as its peer."""
    try:
        return {(info[4][0], port) for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
    except OSError:
        return {(host, port)}


def _shut_down(fds: set[int]) -> None:
    """Shut these sockets down (not closed: their owner, TVM, closes them), waking whoever waits on them."""
    for fd in fds:
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # closed meanwhile
            continue
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.detach()


class SessionWatchdog:
    """Ends this process's connections to a session's board once ``limit_s`` pass (``fired`` then says so).

    The board's server ends a session at ``session_timeout_s`` itself; a board that is stopped (SIGSTOP), hung
    or cut off mid-session ends nothing, and the client's RPC call waits for its answer forever, in C++,
    holding the sweep. Past the limit the connection is shut down here, so that the call fails and the
    attempt ends. Used as ``with SessionWatchdog(session.board_id, limit_s) as dog: ...``.
    """

    def __init__(self, board_id: str, limit_s: float) -> None:
        import threading

        self.board_id, self.limit_s, self.fired = board_id, limit_s, False
        try:
            host, port = parse_addr(board_id.rpartition("@")[2])
            self._addresses: set[tuple[str, int]] | None = _addresses(host, port)
        except ValueError:  # not host:port (a test's fake board): nothing to watch
            self._addresses = None
        self._timer = threading.Timer(limit_s, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        if self._addresses is not None:
            self.fired = True
            _shut_down(_peer_sockets(self._addresses))

    def __enter__(self) -> SessionWatchdog:
        self._timer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._timer.cancel()


def connect_bounded(connect: Any, host: str, port: int, board_id: str, handshake_s: float | None = None) -> Any:
    """``connect()`` (TVM's rpc.connect to ``host:port``) given ``handshake_s`` (default HANDSHAKE_S) to return,
    else BoardNotAnswering.

    A board that is registered but stopped still has its listening socket, so the kernel accepts the
    connection and TVM then waits for the handshake forever, in C++ (the GIL released), holding the sweep's
    measurement slot. The connect runs in a thread; past the limit, the socket it opened is shut down so
    that the thread ends (TVM sees the connection closed) instead of waiting for a board that may never wake.
    """
    import threading

    handshake_s = HANDSHAKE_S if handshake_s is None else handshake_s
    addresses = _addresses(host, port)
    before = _peer_sockets(addresses)
    outcome: list[Any] = []

    def attempt() -> None:
        try:
            outcome.append(("ok", connect()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(("error", exc))

    thread = threading.Thread(target=attempt, name=f"rpc-connect {board_id}", daemon=True)
    thread.start()
    thread.join(handshake_s)
    if thread.is_alive():
        _shut_down(_peer_sockets(addresses) - before)
        # A session the thread opens after all (the board woke just now) is dropped with ``outcome``, which
        # closes it and frees the board.
        raise BoardNotAnswering(board_id, handshake_s)
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value


def key_boards(summary: dict[str, Any], key: str) -> set[str]:
    """Board ids (key@host:port) of ``key`` in a tracker summary."""
    ids = set()
    for server in summary.get("server_info", []):
        if str(server.get("key", "")).removeprefix("server:") == key:
            host, port = (server.get("addr") or ["?", "?"])[:2]
            ids.add(f"{key}@{host}:{port}")
    return ids


def request_session(
    tracker: str,
    key: str,
    deadline_s: float,
    session_timeout_s: float,
    *,
    avoid: frozenset[str] = frozenset(),
    prefer_not: frozenset[str] = frozenset(),
    registration_wait_s: float | None = None,
    handshake_s: float | None = None,
) -> Session:
    """Ask the tracker for a board of ``key``, giving up after ``deadline_s``.

    The tracker picks the board, and its own request blocks forever when none is free, so:
    - every wait is bounded here by socket timeouts against one deadline;
    - a tracker that drops the connection (restarted) is asked again, and a key with no board
      registered is polled, for ``registration_wait_s`` (boards re-register a few seconds after a
      tracker restart) before TrackerUnreachable or NoBoardRegistered;
    - boards in ``avoid`` (quarantined) are never used and boards in ``prefer_not`` (the board an
      attempt just failed on) only when no other board of the key is free at the deadline. A session
      on such a board is *held* while asking again, so that the tracker must offer a different board
      (a released board would go straight back into its queue); held sessions are closed before
      returning. When every registered board of the key is avoided, DeviceUnavailable says so.
    - a board the tracker offers has ``handshake_s`` (default HANDSHAKE_S) to answer the RPC handshake, else
      BoardNotAnswering names it.
    """
    start = time.monotonic()
    deadline = start + deadline_s
    wait_registration = deadline_s if registration_wait_s is None else min(registration_wait_s, deadline_s)
    held: list[Session] = []
    seen_board = False
    # Why the last attempt to reach the tracker failed, None once it answers: what the deadline reports.
    unreachable: OSError | None = None
    try:
        while True:
            remaining = deadline - time.monotonic()
            fallback = next((h for h in held if h.board_id not in avoid), None)
            if remaining <= 0:
                if fallback is not None:
                    held.remove(fallback)
                    return fallback
                if unreachable is not None:  # not "no board registered": nothing answered to ask
                    raise TrackerUnreachable(tracker, unreachable)
                raise DeviceUnavailable(key) if seen_board else NoBoardRegistered(key)
            try:
                # Past the registration wait (a key already found without a board or tracker) this is one
                # last look, not a wait: a stopped tracker (SIGSTOP, a hung host) takes the connection and
                # never answers, and each later job would spend 10 s finding that out again.
                waiting = time.monotonic() - start < wait_registration
                probe_s = min(10.0 if waiting else LAST_LOOK_S, remaining)
                boards = key_boards(tracker_summary(tracker, timeout_s=probe_s), key)
                unreachable = None
            except OSError as exc:  # the tracker is restarting: ask again until the deadline
                unreachable = exc
                if time.monotonic() - start >= wait_registration:
                    # As with a key with no board: a job after one that found the tracker gone (its
                    # registration_wait_s is 0) does not wait device_wait_s again, so the sweep's wait for
                    # a dead tracker is one device_wait_s per key, not one per job.
                    raise TrackerUnreachable(tracker, exc) from None
                time.sleep(min(0.5, max(remaining, 0)))
                continue
            if not boards:
                if time.monotonic() - start >= wait_registration:
                    raise NoBoardRegistered(key)
                time.sleep(min(0.5, max(remaining, 0)))
                continue
            seen_board = True
            usable = boards - avoid - {h.board_id for h in held}
            if not usable:
                if fallback is not None:
                    held.remove(fallback)
                    return fallback
                if boards <= avoid:
                    raise DeviceUnavailable(f"every board of {key!r} is quarantined: {sorted(boards)}")
                time.sleep(min(0.5, max(remaining, 0)))
                continue
            try:
                session = _request_once(tracker, key, remaining, session_timeout_s, handshake_s)
            except DeviceUnavailable:
                continue  # the deadline has passed: the top of the loop decides
            except BoardNotAnswering:
                raise  # the attempt fails on that board (infra), and its retry prefers another
            except Exception:
                # Tracker dropped the request (restart) or matched a board that just died. Only a summary
                # says whether the tracker answers: a dead board's refusal must not read as the tracker's.
                time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
                continue
            if session.board_id in avoid or session.board_id in prefer_not:
                held.append(session)
                continue
            return session
    finally:
        held.clear()  # dropping the last reference closes a held session and frees its board
