"""The neutral core: the one error summariser and the board-health rule."""

from __future__ import annotations

from tvmbench.core.errors import one_line
from tvmbench.core.health import QUARANTINE_AFTER, next_state


def test_one_line_picks_the_telling_line_of_a_tvm_error() -> None:
    exc = RuntimeError("Traceback (most recent call last):\n  0: foo\n  File x.cc\nInternalError: Check failed: a\n")
    assert one_line(exc) == "RuntimeError: InternalError: Check failed: a"


def test_one_line_skips_sqlalchemy_links_and_truncates() -> None:
    exc = OSError("(sqlite3.OperationalError) unable to open database file\n(Background on this error at: https://x)")
    assert one_line(exc) == "OSError: (sqlite3.OperationalError) unable to open database file"
    long = one_line(ValueError("x" * 1000), limit=50)
    assert long.endswith("...") and len(long) == 50
    assert one_line(KeyError()) == "KeyError"


def test_board_health_rule() -> None:
    state, failures = "ok", 0
    for n in range(1, QUARANTINE_AFTER):
        state, failures = next_state(state, failures, "infra")
        assert (state, failures) == ("suspect", n)
    assert next_state(state, failures, "ok") == ("ok", 0), "a run that worked clears the count"
    assert next_state("suspect", 2, "timeout", health="ok") == ("suspect", 1), "a passing golden run resets first"
    state, failures = "ok", 0
    for _ in range(QUARANTINE_AFTER):
        state, failures = next_state(state, failures, "timeout")
    assert state == "quarantined"
    assert next_state("quarantined", failures, "ok")[0] == "quarantined", "only `farm reset` ends a quarantine"
    assert next_state("ok", 0, "build") == ("ok", 0), "a build error is not the board's fault"
