"""Where the farm's services listen: loopback by default, a free port, one warning when exposed."""

from __future__ import annotations

import contextlib
import socket
import sys

LOOPBACK = "127.0.0.1"
RPC_WARNING = (
    "TVM RPC runs uploaded code for anyone who can connect, in plain text: expose it only on a trusted network"
)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a service on this machine (127.0.0.0/8, ::1, "localhost")."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def warn_exposed(what: str, host: str, risk: str = RPC_WARNING) -> None:
    """The one warning every service tvmbench starts prints when it listens beyond loopback."""
    print(f"warning: {what} listening on {host}: {risk}", file=sys.stderr)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: a free port) and listening, so a taken port is one clear OSError
    here (the dashboard serves on it; `farm up` closes it again, having checked the tracker can bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # As the tracker binds (tvm.rpc.tracker): a port left in TIME_WAIT passes, one something listens on fails.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connections queue from now on, before uvicorn's loop accepts them
    except OSError:
        sock.close()
        raise
    return sock


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free on ``host`` right now."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` different ports that are free on ``host`` right now.

    Each one is held until all are picked: ``free_port()`` twice in a row may return the same port (the
    kernel hands a just-closed one out again), and Ray refuses to start when two of its ports are one.
    """
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(n):
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((host, 0))
            ports.append(s.getsockname()[1])
        return ports
