"""The tracker client speaks the tracker's wire format itself: the driver asks a real tracker without importing TVM."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from orchestrator.farm import LocalFarm
from workers import tracker_client
from workers.tracker_client import TRACKER_MAGIC, NotATracker, tracker_summary


def test_wire_constants_are_tvms() -> None:
    from tvm.rpc import base

    assert tracker_client.TRACKER_MAGIC == base.RPC_TRACKER_MAGIC
    assert tracker_client.CODE_SUCCESS == base.TrackerCode.SUCCESS
    assert tracker_client.CODE_REQUEST == base.TrackerCode.REQUEST
    assert tracker_client.CODE_SUMMARY == base.TrackerCode.SUMMARY


def test_summary_of_a_real_tracker_without_importing_tvm(local_farm: LocalFarm) -> None:
    code = (
        "import sys, json\n"
        "from workers.tracker_client import registered_keys, tracker_summary\n"
        f"keys = registered_keys(tracker_summary({local_farm.tracker!r}))\n"
        "print(json.dumps({'keys': keys, 'tvm': 'tvm' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    answer = json.loads(out.stdout)
    assert answer["keys"].get("host", 0) >= 1
    assert answer["tvm"] is False


@contextmanager
def fake_tracker(serve: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback listener that hands its one connection to ``serve``; yields its HOST:PORT."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            serve(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        thread.join(timeout=10)
        listener.close()


def _handshake(conn: socket.socket, magic: int = TRACKER_MAGIC) -> None:
    assert struct.unpack("<i", conn.recv(4))[0] == TRACKER_MAGIC
    conn.sendall(struct.pack("<i", magic))


def test_a_summary_larger_than_one_read_arrives_whole() -> None:
    servers = [{"key": f"server:board-{i}", "addr": ["127.0.0.1", 9000 + i]} for i in range(3000)]
    body = json.dumps([tracker_client.CODE_SUCCESS, {"queue_info": {}, "server_info": servers}]).encode()

    def serve(conn: socket.socket) -> None:
        _handshake(conn)
        size = struct.unpack("<i", conn.recv(4))[0]
        assert json.loads(conn.recv(size)) == [tracker_client.CODE_SUMMARY]
        conn.sendall(struct.pack("<i", len(body)) + body)

    assert len(body) > 65536
    with fake_tracker(serve) as addr:
        summary = tracker_summary(addr)
    assert len(summary["server_info"]) == 3000


def test_a_tracker_closing_midway_is_an_oserror() -> None:
    def serve(conn: socket.socket) -> None:
        _handshake(conn)
        conn.recv(64)
        conn.sendall(struct.pack("<i", 1000) + b"[0, {")  # promises 1000 bytes, sends 5, closes

    with fake_tracker(serve) as addr, pytest.raises(OSError, match="closed the connection"):
        tracker_summary(addr)


@pytest.mark.parametrize(
    "answer",
    [struct.pack("<i", -5), struct.pack("<i", 1 << 30), struct.pack("<i", 4) + b"\xff\xfe{]"],
    ids=["negative size", "a gigabyte", "not json"],
)
def test_a_garbled_answer_is_named(answer: bytes) -> None:
    def serve(conn: socket.socket) -> None:
        _handshake(conn)
        conn.recv(64)
        conn.sendall(answer)

    with fake_tracker(serve) as addr, pytest.raises(NotATracker, match="not a TVM RPC tracker's answer"):
        tracker_summary(addr)


def test_something_else_on_the_port_is_named() -> None:
    wrong_magic = fake_tracker(lambda conn: _handshake(conn, magic=0x1234))
    with wrong_magic as addr, pytest.raises(NotATracker, match="is not a TVM RPC tracker"):
        tracker_summary(addr)


def test_a_sweep_against_a_tracker_that_does_not_answer_ends_in_one_line() -> None:
    """The scheduler's first question to the farm (which keys share this machine's cores) on a closed port and
    on a port where something else answers: a FarmError naming the address, not a ConnectionRefusedError's
    traceback (`sweep run --tracker 127.0.0.1:5432` printed one)."""
    from orchestrator.farm import FarmError, free_port
    from orchestrator.scheduling.measurements import TrackerBoards

    closed = f"127.0.0.1:{free_port()}"
    with pytest.raises(FarmError, match=rf"tracker {closed} does not answer .*is it running"):
        TrackerBoards(closed).sharing_keys()
    with fake_tracker(lambda conn: _handshake(conn, magic=0x1234)) as addr:
        try:
            TrackerBoards(addr).sharing_keys()
            said = ""
        except FarmError as exc:
            said = str(exc)
    assert f"tracker {addr} does not answer ({addr} is not a TVM RPC tracker)" in said, said
