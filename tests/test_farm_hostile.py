"""What a hostile user did to `tvmbench farm`: keys that are no tracker key (a path, a blank, an escape), a
port something else listens on, a tracker killed under `farm status`, addresses `farm connect` must refuse
as bad input, and IPv6 trackers written in brackets. Real trackers and boards on loopback; no Ray."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.farm import FarmError, LocalFarm, stop_pid, wait_until
from orchestrator.farm.local import _board_log_name
from orchestrator.farm.processes import _spawn, _tracker_cmd
from tests.conftest import one_error_line
from tests.test_hostile_user import invoke
from workers.tracker_client import parse_addr, tracker_summary

BAD_KEYS = ["../../../../tmp/x/escaped", "../../escaped", "a b", "", "a:b", "a\x1bb", "k" * 300]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port something that is not a tracker listens on (never accepting, never answering)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def _files_under(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


# --- 1. `farm up --key` is checked like `farm add --key` -----------------------------------------------


@pytest.mark.parametrize("key", BAD_KEYS, ids=["deep-path", "path", "space", "blank", "colon", "escape", "300-long"])
def test_farm_up_refuses_a_key_that_cannot_be_a_tracker_key(tmp_path: Path, home: Path, key: str) -> None:
    result = invoke("farm", "up", "--key", key)
    line = one_error_line(result, exit_code=2)
    assert "cannot be a tracker key: use letters, digits and . _ + -" in line and line.startswith("error: --key = ")
    assert line == one_error_line(invoke("farm", "add", "--key", key))  # the same line as `farm add --key`
    assert _files_under(home) == []  # nothing started, nothing written: no farm.json, no log folder
    assert not [p for p in tmp_path.rglob("escaped*")], "a board log escaped the log folder"


@pytest.mark.parametrize("key", [*BAD_KEYS, "..", ".", "/", "a/../../b", "\n", "é" * 200])
def test_a_board_log_name_stays_in_the_log_folder_whatever_the_key(tmp_path: Path, key: str) -> None:
    """Defence in depth: whoever calls LocalFarm.add_board with whatever key, the log is one plain file name."""
    name = _board_log_name(key, 65535)
    assert "/" not in name and "\x1b" not in name and "\n" not in name and len(name.encode()) < 255, name
    assert name.startswith("board-") and name.endswith("-65535.log")
    assert (tmp_path / name).resolve().parent == tmp_path.resolve()
    assert _board_log_name("host", 9190) == "board-host-9190.log"  # a good key's log keeps its name


# --- 2. a port that is taken fails at once --------------------------------------------------------------


def test_farm_up_on_a_port_in_use_fails_at_once_as_bad_input(home: Path, busy_port: int) -> None:
    result = invoke("farm", "up", "--port", str(busy_port))
    line = one_error_line(result, exit_code=2)
    assert line == f"error: cannot listen on 127.0.0.1:{busy_port}: Address already in use; choose another --port"
    assert not (home / "farm.json").exists()


@pytest.mark.parametrize(("host", "culprit"), [("nosuch.invalid", "cannot listen on nosuch.invalid"), ("::1", "IPv4")])
def test_farm_up_on_a_host_it_cannot_listen_on_is_one_line(home: Path, host: str, culprit: str) -> None:
    line = one_error_line(invoke("farm", "up", "--host", host), exit_code=2)
    assert culprit in line and "--host" in line, line
    assert not (home / "farm.json").exists()


def test_a_tracker_that_cannot_bind_is_reported_at_once_not_polled_until_the_deadline(
    tmp_path: Path, busy_port: int
) -> None:
    """Past the CLI's check (the port taken in between): the tracker child exits, and the farm says so with
    its log's last line instead of polling what else answers there until the deadline."""
    with pytest.raises(FarmError) as caught:
        LocalFarm.start(tmp_path / "logs", {"host": 1}, tracker_port=busy_port, timeout_s=600)
    message = str(caught.value)
    assert "exited at once" in message and "cannot bind" in message and "timed out" not in message, message


# --- 3. `farm status` of a farm whose tracker died ----------------------------------------------------


def test_farm_status_reports_a_killed_tracker_and_exits_non_zero(home: Path) -> None:
    up = invoke("farm", "up")
    assert up.exit_code == 0, up.output
    state = json.loads((home / "farm.json").read_text())
    try:
        healthy = invoke("farm", "status")
        assert healthy.exit_code == 0 and "tracker answers" in healthy.output, healthy.output
        assert json.loads(invoke("farm", "status", "--json").stdout)["tracker_running"] is True
        stop_pid(int(state["tracker_pid"]))  # what `kill $(pgrep -f tvm.rpc.tracker)` does
        status = invoke("farm", "status")
        line = one_error_line(status, exit_code=1)
        assert state["tracker"] in line and "`tvmbench farm down` then `tvmbench farm up`" in line, line
        assert "not running" in line or "does not answer" in line, line
        as_json = invoke("farm", "status", "--json")
        assert as_json.exit_code == 1 and json.loads(as_json.stdout)["tracker_running"] is False
        (board,) = state["boards"]
        stop_pid(int(board["pid"]))
        assert json.loads(invoke("farm", "status", "--json").stdout)["boards"][0]["running"] is False
    finally:
        down = invoke("farm", "down")
    assert down.exit_code == 0, down.output


# --- 4. `farm connect` validates like --tracker, and IPv6 in brackets ---------------------------------


BAD_ADDRESSES = ["bogus", "", "  ", "127.0.0.1:65536", "127.0.0.1:0", ":9190", "::1:9190", "[zz]:1"]


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_farm_connect_refuses_a_malformed_address_as_bad_input(home: Path, address: str) -> None:
    result = invoke("farm", "connect", address)
    line = one_error_line(result, exit_code=2)  # as `farm list --tracker bogus`; 1 is "no tracker answers"
    assert "HOST:PORT" in line, line
    assert not (home / "farm.json").exists()


def test_farm_connect_to_nothing_listening_is_still_exit_1(home: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    assert "no TVM RPC tracker answers" in one_error_line(invoke("farm", "connect", f"127.0.0.1:{free}"), exit_code=1)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("[::1]:9190", ("::1", 9190)),
        ("[fe80::1%eth0]:1", ("fe80::1%eth0", 1)),
        ("127.0.0.1:9190", ("127.0.0.1", 9190)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_parse_addr_strips_the_brackets_of_an_ipv6_host(address: str, expected: tuple[str, int]) -> None:
    assert parse_addr(address) == expected


@pytest.mark.parametrize("address", ["::1:9190", "[::1]", "[::1]:", "[zz]:1", "[127.0.0.1]:1", "[::1:1", "h:٩"])
def test_parse_addr_refuses_what_is_no_host_and_port(address: str) -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_addr(address)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_farm_connect_list_and_status_with_an_ipv6_tracker(tmp_path: Path, home: Path) -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        sock.bind(("::1", 0))
        port = sock.getsockname()[1]
    address = f"[::1]:{port}"
    tracker = _spawn(_tracker_cmd("::1", port), tmp_path / "tracker.log")
    try:
        wait_until(lambda: tracker_summary(address, timeout_s=2), 60, f"the tracker on {address}")
        connected = invoke("farm", "connect", address)
        assert connected.exit_code == 0 and f"farm: tracker {address}; keys: no boards yet" in connected.output
        listed = invoke("farm", "list", "--json")
        assert listed.exit_code == 0 and json.loads(listed.stdout) == {"tracker": address, "boards": []}
        assert invoke("farm", "list", "--tracker", address).exit_code == 0
        assert invoke("farm", "status").exit_code == 0
        stop_pid(tracker.pid)
        gone = one_error_line(invoke("farm", "status"), exit_code=1)  # a connected tracker that went away
        assert address in gone and "does not answer" in gone, gone
    finally:
        stop_pid(tracker.pid)
        invoke("farm", "down")


def test_free_ports_are_different_and_free_on_loopback() -> None:
    """Several ports at once (the multinode fixture gives Ray 11): none twice, each one bindable afterwards."""
    from orchestrator.farm import free_ports

    ports = free_ports(11)
    assert len(set(ports)) == 11, ports
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))
