"""Wall-clock steps across a restart, with the real daemon and database.

The machine's clock cannot be stepped from a test, so the step is made in the
database instead: every stored wall stamp moved a day ahead is exactly what the
daemon sees when the wall clock stepped back a day while it was down.
"""

from __future__ import annotations

import sqlite3

from tests.conftest import DaemonHandle
from tests.hardening.support import Client

from meshd.store.claims import StoredClaim

DAY = 86400.0


def test_step_back_across_a_restart_does_not_stretch_a_ttl(daemon: DaemonHandle) -> None:
    """A 30 s ttl stays at most 30 s after a restart whose clock is a day behind."""
    key = f"file:{daemon.state_dir}/k"
    with Client(daemon.socket) as c:
        assert "result" in c.call("session.register", {"session_id": "a"})
        assert "result" in c.call(
            "claim.acquire", {"session_id": "a", "resources": [key], "ttl": 30}
        )
    daemon.kill()
    db = sqlite3.connect(daemon.state_dir / f"{daemon.profile}.sqlite3")
    with db:
        db.execute("UPDATE claims SET since = since + ?, expires_at = expires_at + ?", (DAY, DAY))
    db.close()
    daemon.start()
    with Client(daemon.socket) as c:
        claims = c.call("claim.list")["result"]["claims"]

    assert [x["resource"] for x in claims] == [key]
    assert 0 < claims[0]["expires_in_s"] <= 30


def test_ttl_left_is_capped_by_the_whole_ttl() -> None:
    """What a restart gives back: the stored remainder, never more than the ttl (rows
    stored before the ttl column cap at expires_at - since)."""
    c = StoredClaim("a", "file:/k", "exclusive", 1, "", since=1000.0, expires_at=1030.0, ttl=30)
    old = StoredClaim("a", "file:/k", "exclusive", 1, "", since=1000.0, expires_at=1030.0)

    assert c.ttl_left(1010.0) == 20.0
    assert c.ttl_left(1000.0 - DAY) == 30.0
    assert old.ttl_left(1000.0 - DAY) == 30.0
    assert c.ttl_left(2000.0) == 0.0
    assert StoredClaim("a", "k", "shared", 1, "", 1.0, None).ttl_left(5.0) is None
