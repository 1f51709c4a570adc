"""Signals and the at-most-once ledger through the real daemon (SPEC §7, §8)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.test_board import Client, register

DaemonHandle = Any


@pytest.fixture
def c(daemon: DaemonHandle) -> Iterator[Client]:
    client = Client(daemon)
    yield client
    client.close()


class Parked:
    """A ``signal.wait`` sent on a connection of its own, known to be parked in the daemon.

    The wait is followed by a ``mesh.ping`` on the same connection: requests on one
    connection are handled in order until a handler has to wait, so the ping's reply
    comes only once the wait has parked itself (no sleeping, no guessing).
    """

    def __init__(self, d: DaemonHandle, **params: Any) -> None:
        self.client = Client(d)
        frame = {"jsonrpc": "2.0", "id": "wait", "method": "signal.wait", "params": params}
        self.client.sock.sendall(json.dumps(frame).encode() + b"\n")
        assert self.client.call("mesh.ping")["pong"] is True

    def result(self) -> Any:
        while True:
            msg = json.loads(self.client.file.readline())
            if msg.get("id") == "wait":
                self.client.close()
                return msg["result"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process to anchor a session to; killed to make its session die."""
    p = subprocess.Popen(["sleep", "600"])
    yield p
    p.kill()
    p.wait()


class TestSignals:
    def test_a_late_waiter_sees_an_earlier_emit(self, c: Client) -> None:
        sent = c.call("signal.emit", name="research-done", payload={"rows": 10})

        got = c.call("signal.wait", name="research-done", timeout=0)

        assert (sent["seq"], got["seq"], got["payload"]) == (1, 1, {"rows": 10})
        assert got["received"] is True

    def test_a_waiter_is_woken_by_the_emit(self, daemon: DaemonHandle, c: Client) -> None:
        wait = Parked(daemon, name="go", timeout=15)
        c.call("signal.emit", name="go", payload="now")

        got = wait.result()

        assert got["received"] is True
        assert (got["seq"], got["payload"]) == (1, "now")

    def test_after_waits_for_a_newer_one_and_times_out_without(self, c: Client) -> None:
        c.call("signal.emit", name="x")

        late = c.call("signal.wait", name="x", after=1, timeout=0.1)
        c.call("signal.emit", name="x", payload=2)
        newer = c.call("signal.wait", name="x", after=1, timeout=0.1)

        assert (late["received"], late["last_seq"]) == (False, 1)
        assert (newer["received"], newer["seq"], newer["payload"]) == (True, 2, 2)

    def test_signals_and_their_numbers_survive_kill_9(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        c.call("signal.emit", name="n", payload="one")
        c.close()
        daemon.kill()
        daemon.start()
        again = Client(daemon)

        old = again.call("signal.wait", name="n", timeout=0)
        new = again.call("signal.emit", name="n")
        again.close()

        assert (old["seq"], old["payload"]) == (1, "one")
        assert new["seq"] == 2

    def test_a_wait_without_a_session_is_capped_by_max_query_timeout(
        self, mesh_env: Any, daemon: DaemonHandle
    ) -> None:
        mesh_env.write_config("[defaults]\nmax_query_timeout = 0.2\n")
        daemon.call("mesh.reload")
        c = Client(daemon)

        got = c.call("signal.wait", name="never", timeout=3600)
        c.close()

        assert got["received"] is False

    def test_a_wait_for_a_session_ends_with_the_session(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        register(c, "W")
        wait = Parked(daemon, name="never", timeout=3600, session_id="W")
        c.call("session.end", session_id="W")

        assert wait.result()["received"] is False

    def test_a_signal_command_s_own_session_emits_for_its_parent(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        """`meshctl signal emit` registers a short-lived child of --session (SPEC §9); the
        waiter is told the parent, the session the user knows (before: the child's id)."""
        register(c, "A")
        c.call(
            "session.register", session_id="signal:1", source="signal", parent="A",
            pid=os.getpid(), liveness="process",
        )  # fmt: skip
        c.call(
            "session.register", session_id="signal:2", source="signal", pid=os.getpid(),
            liveness="process",
        )  # fmt: skip
        wait = Parked(daemon, name="go", timeout=15)

        sent = c.call("signal.emit", name="go", session_id="signal:1")
        got = wait.result()
        by_a = c.call("signal.emit", name="a", session_id="A")
        alone = c.call("signal.emit", name="b", session_id="signal:2")

        assert (sent["emitted_by"], got["emitted_by"]) == ("A", "A")
        assert (by_a["emitted_by"], alone["emitted_by"]) == ("A", "signal:2")

    def test_a_signal_session_whose_parent_is_unknown_emits_as_itself(self, c: Client) -> None:
        """``--session`` naming no session here (a typo, one that ended): the emit is not
        recorded as that id, which no session had (before: ``emitted_by`` "no-such")."""
        c.call(
            "session.register", session_id="signal:3", source="signal", parent="no-such",
            pid=os.getpid(), liveness="process",
        )  # fmt: skip

        sent = c.call("signal.emit", name="go", session_id="signal:3")

        assert sent["emitted_by"] == "signal:3"

    def test_a_payload_over_max_body_bytes_is_refused(self, c: Client) -> None:
        reply = c.raw("signal.emit", name="big", payload="x" * 9000)

        assert reply["error"]["data"]["code"] == "TOO_LARGE"
        assert c.call("signal.wait", name="big", timeout=0)["last_seq"] == 0


class TestLedger:
    def test_exactly_one_reserves_the_others_see_who(self, c: Client) -> None:
        for sid in ("A", "B"):
            register(c, sid)

        first = c.call("once.reserve", session_id="A", key="daily:2026-11-30", note="report")
        second = c.call("once.reserve", session_id="B", key="daily:2026-11-30")
        c.call("once.finish", session_id="A", key="daily:2026-11-30", outcome="done")
        third = c.call("once.reserve", session_id="B", key="daily:2026-11-30")

        assert first["status"] == "reserved"
        assert (second["status"], second["entry"]["session_id"]) == ("running", "A")
        assert (third["status"], third["entry"]["note"]) == ("done", "report")

    def test_free_lets_the_next_caller_run(self, c: Client) -> None:
        for sid in ("A", "B"):
            register(c, sid)
        c.call("once.reserve", session_id="A", key="k")

        finished = c.call("once.finish", session_id="A", key="k", outcome="free")

        assert (finished["ok"], finished["state"]) == (True, "free")
        assert c.call("once.reserve", session_id="B", key="k")["status"] == "reserved"

    def test_a_dead_runner_leaves_unknown_until_a_person_resolves_it(
        self, c: Client, sleeper: subprocess.Popen[bytes]
    ) -> None:
        c.call("session.register", session_id="R", pid=sleeper.pid, liveness="process")
        register(c, "B")
        c.call("once.reserve", session_id="R", key="pay")
        sleeper.kill()
        sleeper.wait()

        states = wait_state(c, "pay", "unknown")
        blocked = c.call("once.reserve", session_id="B", key="pay")
        c.call("once.resolve", key="pay", state="free")

        assert states == "unknown"
        assert blocked["status"] == "unknown"
        assert c.call("once.reserve", session_id="B", key="pay")["status"] == "reserved"

    def test_a_live_running_key_cannot_be_resolved(self, c: Client) -> None:
        register(c, "A")
        c.call("once.reserve", session_id="A", key="k")

        reply = c.call("once.resolve", key="k", state="free")

        assert (reply["refused"], reply["state"]) == (True, "running")
        assert c.call("once.list")["entries"][0]["state"] == "running"

    def test_entries_survive_kill_9_and_a_dead_runner_is_found_after_it(
        self, daemon: DaemonHandle, c: Client, sleeper: subprocess.Popen[bytes]
    ) -> None:
        c.call("session.register", session_id="R", pid=sleeper.pid, liveness="process")
        register(c, "A")
        c.call("once.reserve", session_id="A", key="done-one")
        c.call("once.finish", session_id="A", key="done-one", outcome="done")
        c.call("once.reserve", session_id="R", key="running-one")
        c.close()
        daemon.kill()
        sleeper.kill()
        sleeper.wait()
        daemon.start()
        again = Client(daemon)

        states = {e["key"]: e["state"] for e in again.call("once.list")["entries"]}
        again.close()

        assert states == {"done-one": "done", "running-one": "unknown"}


def wait_state(c: Client, key: str, state: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        entries = {e["key"]: e["state"] for e in c.call("once.list")["entries"]}
        seen = entries.get(key, "free")
        if seen == state:
            break
        time.sleep(0.05)
    return seen
