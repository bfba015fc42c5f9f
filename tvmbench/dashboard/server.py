"""Open the results database read-only and serve the dashboard on it with uvicorn."""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING

from orchestrator.farm import LOOPBACK, is_loopback, listen, warn_exposed

if TYPE_CHECKING:
    import uvicorn

    from db.store import ResultStore

EXPOSED_RISK = (
    "the dashboard has no login: anyone who can connect reads every result, sweep file, path and error "
    "in the database; expose it only on a trusted network"
)


class ServeError(RuntimeError):
    """The dashboard cannot start; the message is one line saying what to do."""


def check_host(host: str, allow_remote: bool) -> None:
    """Loopback is always fine; anything wider only with ``allow_remote``, and then with the farm's warning."""
    if is_loopback(host):
        return
    if not allow_remote:
        raise ServeError(
            f"--host {host} is not a loopback address: {EXPOSED_RISK}. Add --allow-remote to serve there anyway"
        )
    warn_exposed("dashboard", host, EXPOSED_RISK)


def open_readonly(url: str | None) -> ResultStore:
    """The results database opened so that it can never be written (``ResultStore(never_write=True)``),
    its schema checked; ServeError names what is wrong (a missing file, an older schema, no server)."""
    from db.engine import refuse_in_memory
    from db.store import ResultStore, StoreError, default_url
    from db.urls import shown_url
    from tvmbench.core.errors import one_line

    try:
        refuse_in_memory(url)  # an empty page to serve; as a path, ":memory:" read as a missing file of that name
    except StoreError as exc:
        raise ServeError(str(exc)) from None
    url = url or default_url()
    try:
        return ResultStore(url, never_write=True)
    except StoreError as exc:
        raise ServeError(str(exc)) from None
    except Exception as exc:
        shown = shown_url(url)
        raise ServeError(f"cannot open results database {shown} read-only: {one_line(exc)}") from None


def make_server(
    store: ResultStore, sock: socket.socket, *, tracker: str | None = None, poll_ms: int | None = None
) -> uvicorn.Server:
    """A uvicorn server of the dashboard over ``store``, to be run on ``sock`` (``server.run(sockets=[sock])``)."""
    import uvicorn

    from tvmbench.dashboard.app import POLL_MS, create_app

    host = sock.getsockname()[0]
    # A loopback dashboard answers only to its own names (no DNS rebinding); a wider one to any name.
    # An IPv6 address is written in brackets in the Host header ([::1]:8321).
    named = f"[{host}]" if sock.family == socket.AF_INET6 else host
    allowed = ["127.0.0.1", "localhost", named] if is_loopback(host) else None
    app = create_app(store, tracker=tracker, poll_ms=poll_ms or POLL_MS, allowed_hosts=allowed)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    return uvicorn.Server(config)


def serve(
    url: str | None,
    host: str = LOOPBACK,
    port: int = 8321,
    *,
    allow_remote: bool = False,
    tracker: str | None = None,
) -> None:
    """Run the dashboard until interrupted (Ctrl-C). ServeError for a refused host or database, OSError
    when the address cannot be bound."""
    from tvmbench.dashboard.app import shown_url

    check_host(host, allow_remote)
    store = open_readonly(url)
    try:
        sock = listen(host, port)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        url_shown = shown_url(store)
        print(f"tvmbench dashboard on http://{shown}:{bound}/ (read-only {url_shown}); Ctrl-C stops it",
              file=sys.stderr, flush=True)  # fmt: skip
        make_server(store, sock, tracker=tracker).run(sockets=[sock])
    finally:
        store.close()
