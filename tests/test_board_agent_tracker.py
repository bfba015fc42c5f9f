"""A board agent outlives its tracker's absence, however long (TVM's own server gave up after 60 s).

The hostile user stopped the tracker for over a minute: every board agent died of TVM's
"RuntimeError: Failed to connect to server", so a restarted tracker got no boards. TVM's clock is moved
here rather than waited for: a deterministic minute and more in a fraction of a second.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from orchestrator.farm import free_port
from workers.board_agent import keep_looking_for_the_tracker


@pytest.fixture
def rpc_base(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """tvm.rpc.base with its connect_with_retry restored after the test, and a clock that runs 30 s a call."""
    from tvm.rpc import base

    monkeypatch.setattr(base, "connect_with_retry", base.connect_with_retry)
    now = [0.0]

    def clock() -> float:
        now[0] += 30.0
        return now[0]

    monkeypatch.setattr(base.time, "time", clock)
    monkeypatch.setattr(base.time, "sleep", lambda _s: None)
    monkeypatch.setattr(base.logger, "warning", lambda *_a, **_k: None)
    yield base


def test_tvm_alone_gives_up_on_a_tracker_gone_a_minute(rpc_base) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    with pytest.raises(RuntimeError, match="Failed to connect to server"):
        rpc_base.connect_with_retry(("127.0.0.1", port))  # what ended the agent


def test_the_agent_keeps_looking_until_the_tracker_is_back(rpc_base, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    keep_looking_for_the_tracker()
    keep_looking_for_the_tracker()  # twice is once
    port = free_port()
    tries = [0]
    back = threading.Event()

    class Socket(socket.socket):
        def connect(self, addr: object) -> None:  # type: ignore[override]
            tries[0] += 1
            if tries[0] == 10:  # five minutes of TVM's clock later, the tracker is back
                listener.listen(1)
                back.set()
            super().connect(addr)

    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    monkeypatch.setattr(rpc_base.socket, "socket", Socket)  # what connect_with_retry opens
    try:
        conn = rpc_base.connect_with_retry(("127.0.0.1", port))
        conn.close()
    finally:
        monkeypatch.undo()
        listener.close()
    assert back.is_set() and tries[0] == 10
