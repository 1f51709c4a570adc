"""A claim acquired again by its holder when the disk refuses the commit.

Acquiring keys a session holds already refreshes them (a ``refresh`` audit record),
which must be stored before the reply like any grant. Refused, the request is
answered UNAVAILABLE and the session keeps what it held. The taking back of the
refused grant released "the keys it newly gave" -- none -- and ``release`` refuses an
empty list: the request was answered INTERNAL with a traceback in the log. The writer
is refused by a real SQLite write lock the test holds until the daemon's
``busy_timeout`` runs out.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from tests.conftest import DaemonHandle
from tests.hardening.support import Client


def _acquire_refused_by_the_disk(c: Client, daemon: DaemonHandle, params: dict[str, Any]) -> Any:
    """The reply to ``claim.acquire`` with ``params`` while the test holds the database's
    write lock, until the daemon's commit gives up (its ``busy_timeout``)."""
    lock = sqlite3.connect(daemon.state_dir / "test.sqlite3", isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        c.send(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "claim.acquire",
                           "params": params}).encode() + b"\n")  # fmt: skip
        return c.reply()
    finally:
        lock.execute("ROLLBACK")
        lock.close()


def test_a_refused_refresh_is_unavailable_and_the_claim_is_kept(daemon: DaemonHandle) -> None:
    key = "res:kept"
    params = {"session_id": "s", "resources": [key]}
    with Client(daemon.socket, timeout=60) as c:
        assert "result" in c.call("session.register", {"session_id": "s"})
        token = c.call("claim.acquire", params)["result"]["token"]
        again = _acquire_refused_by_the_disk(c, daemon, params)
        claims = c.call("claim.list")["result"]["claims"]

    assert again["error"]["data"]["code"] == "UNAVAILABLE", again
    assert [(x["session_id"], x["resource"], x["token"]) for x in claims] == [("s", key, token)]
    assert "Traceback" not in daemon.logs()


def test_a_refused_refresh_leaves_the_ttl_and_reason_it_had(daemon: DaemonHandle) -> None:
    """The refresh's new ttl and reason were never stored: memory keeps the old ones
    too (before, the claim ran on the refused ttl and reason until the next restart)."""
    key = "res:ttl"
    with Client(daemon.socket, timeout=60) as c:
        assert "result" in c.call("session.register", {"session_id": "s"})
        first = {"session_id": "s", "resources": [key], "ttl": 3600, "reason": "nightly"}
        assert "result" in c.call("claim.acquire", first)
        before = c.call("claim.list")["result"]["claims"]
        again = {"session_id": "s", "resources": [key], "ttl": 120, "reason": "changed"}
        refused = _acquire_refused_by_the_disk(c, daemon, again)
        after = c.call("claim.list")["result"]["claims"]

    assert refused["error"]["data"]["code"] == "UNAVAILABLE", refused
    assert [x["reason"] for x in before] == ["nightly"]
    assert [x["reason"] for x in after] == ["nightly"]
    assert after[0]["expires_in_s"] > 3000  # the hour it was given, not the refused 2 min
