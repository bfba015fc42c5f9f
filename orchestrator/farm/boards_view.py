"""`farm list`: the boards a tracker knows, asked for their facts and merged with what the database knows."""

from __future__ import annotations

from typing import Any

from workers.board_session import board_facts, key_release
from workers.tracker_client import BoardNotAnswering, DeviceUnavailable, request_session, tracker_summary


def board_rows(tracker: str) -> list[dict[str, Any]]:
    """Boards registered with the tracker, one dict each (key, address), plus per-key queue counts."""
    summary = tracker_summary(tracker)
    queues = summary.get("queue_info", {})
    rows = []
    for server in summary.get("server_info", []):
        key = str(server.get("key", "")).removeprefix("server:")
        host, port = server.get("addr", ["?", "?"])
        q = queues.get(key, {})
        rows.append(
            {
                "board": f"{key}@{host}:{port}",
                "key": key,
                "free_in_key": q.get("free", 0),
                "pending_in_key": q.get("pending", 0),
            }
        )
    return rows


def live_board_facts(
    tracker: str, deadline_s: float = 5.0, silent: set[str] | None = None
) -> dict[str, dict[str, Any] | None]:
    """Ask every free board for its facts: {board id: facts, or None for a stock RPC server}.

    The tracker hands out a board per request, not a named one, so for a key with N free boards N
    sessions are held open at once, which reaches each board once. A board busy with a sweep is not
    waited for (it is simply missing from the answer). A board offered that does not answer the handshake
    within ``deadline_s`` (stopped: SIGSTOP, hung) is added to ``silent`` (before, `farm list` waited for
    it forever).
    """
    summary = tracker_summary(tracker)
    facts: dict[str, dict[str, Any] | None] = {}
    for key, queue in summary.get("queue_info", {}).items():
        sessions = []
        try:
            for _ in range(int(queue.get("free", 0))):
                try:
                    session = request_session(tracker, key, deadline_s, session_timeout_s=30, handshake_s=deadline_s)
                except BoardNotAnswering as exc:
                    if silent is not None:
                        silent.add(exc.board_id)
                    continue  # the tracker took it out of the queue: the next request gets another board
                except (DeviceUnavailable, OSError, RuntimeError):
                    break
                sessions.append(session)
                facts[session.board_id] = board_facts(session.remote)
        finally:
            sessions.clear()  # dropping the sessions frees the boards
    return facts


def board_list(tracker: str, known: dict[str, Any], live: bool = True) -> list[dict[str, Any]]:
    """`farm list`: every board the tracker knows, merged with what the database knows of it.

    ``known`` maps board id -> its database row (state, facts, arch, emulated). With ``live``, free
    boards are asked for their facts now; a board that does not answer is in use (busy).
    """
    rows = board_rows(tracker)
    silent: set[str] = set()
    try:
        fresh = live_board_facts(tracker, silent=silent) if live else {}
    except OSError:
        fresh = {}
    for row in rows:
        board = known.get(row["board"])
        facts = fresh.get(row["board"]) or (board.facts if board else None) or {}
        health = board.state if board else "new"
        # Answered now: free (or its recorded health if that is bad); not answered: in use.
        answered = "free" if health in ("new", "ok") else health
        state = answered if row["board"] in fresh else ("busy" if live else health)
        if row["board"] in silent:  # offered as free, then no answer: not "busy", which reads as working
            state = "not answering"
        row.update(
            {
                "state": state,
                "agent": "tvmbench" if facts else ("stock" if row["board"] in fresh else None),
                "arch": facts.get("arch") or (board.arch if board else None),
                "emulated": facts.get("emulated", board.emulated if board else None),
                "cpu": facts.get("cpu_model"),
                "cores": facts.get("cores"),
                "threads": facts.get("runtime_threads"),  # TVM's runtime threads it times with
                "mem_mb": facts.get("mem_total_mb"),
                "os": facts.get("os"),
                # What the board runs (its agent says), else what its key declares (a stock server).
                "tvm": facts.get("tvm_version") or key_release(row["board"]),
                "release": key_release(row["board"]),  # the release its key is for: where jobs of it go
                "failures_in_a_row": board.consecutive_failures if board else 0,  # toward quarantine
                "facts": facts or None,
            }
        )
    return rows


def known_board_rows(known_boards: list[Any]) -> list[dict[str, Any]]:
    """Every board the results database has seen (``answers.query.boards``): key, health, facts."""
    rows = []
    for board in known_boards:
        facts = board.facts or {}
        rows.append(
            {
                "board": board.id,
                "key": board.key,
                "arch": board.arch,
                "emulated": board.emulated,
                "health": board.state,
                "failures_in_a_row": board.consecutive_failures,  # QUARANTINE_AFTER in a row quarantine it
                "last_seen": board.last_seen.isoformat() if board.last_seen else None,
                "cpu": facts.get("cpu_model"),
                "cores": facts.get("cores"),
                "threads": facts.get("runtime_threads"),  # TVM's runtime threads it times with
                "mem_mb": facts.get("mem_total_mb"),
                "os": facts.get("os"),
                "tvm": facts.get("tvm_version"),
                "facts": facts or None,
            }
        )
    return rows
