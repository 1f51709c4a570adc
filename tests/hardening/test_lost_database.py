"""The database or its WAL removed under the running daemon.

SQLite goes on writing to unlinked files, so without a check every write from then
on is acknowledged and gone at the next start, and fencing tokens start again at 1.
The daemon notices at its next commit: it refuses writes (UNAVAILABLE), says so
loudly in its log, and after a restart tokens resume above every token ever issued
(the high-water mark beside the database).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.hardening.support import Client, wait_for


def database(d: DaemonHandle) -> Path:
    return d.state_dir / f"{d.profile}.sqlite3"


@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_removed_database_refuses_writes_and_tokens_keep_growing(
    daemon: DaemonHandle, suffix: str
) -> None:
    """rm the database (or its WAL): writes UNAVAILABLE, logged; after a restart the
    next token is above the last one acknowledged before the loss."""
    key = f"file:{daemon.state_dir}/k"
    with Client(daemon.socket) as c:
        assert "result" in c.call("session.register", {"session_id": "a"})
        token = c.call("claim.acquire", {"session_id": "a", "resources": [key]})["result"]["token"]
        gone = Path(f"{database(daemon)}{suffix}")
        assert gone.exists()
        gone.unlink()
        tries = iter(range(1_000_000))

        def register_refused() -> dict[str, Any] | None:
            """Register until one is refused (the files are checked every 0.1 s)."""
            r = c.call("session.register", {"session_id": f"b{next(tries)}"})
            return r if "error" in r else None

        refused = wait_for(register_refused)
        release = c.call("claim.release", {"session_id": "a"})
        listed = c.call("session.list")
    daemon.kill()
    for stale in daemon.state_dir.glob(f"{daemon.profile}.sqlite3*"):
        stale.unlink()  # what is left of the old files: start afresh
    daemon.start()
    with Client(daemon.socket) as c:
        assert "result" in c.call("session.register", {"session_id": "c"})
        after = c.call("claim.acquire", {"session_id": "c", "resources": [key]})["result"]

    assert refused["error"]["data"]["code"] == "UNAVAILABLE", refused
    assert "removed or replaced" in refused["error"]["message"]
    assert release["error"]["data"]["code"] == "UNAVAILABLE", release
    assert "result" in listed  # reads keep working
    assert "DATABASE LOST" in daemon.logs()
    assert after["token"] > token


def test_high_water_mark_without_the_database(daemon: DaemonHandle) -> None:
    """The mark beside the database survives the database: a fresh database after a
    kill -9 still resumes above every issued token."""
    key = f"file:{daemon.state_dir}/k"
    tokens = []
    with Client(daemon.socket) as c:
        assert "result" in c.call("session.register", {"session_id": "a"})
        for _ in range(3):
            r = c.call("claim.acquire", {"session_id": "a", "resources": [key]})["result"]
            tokens.append(r["token"])
            c.call("claim.release", {"session_id": "a"})
    daemon.kill()
    for f in daemon.state_dir.glob(f"{daemon.profile}.sqlite3*"):
        f.unlink()
    daemon.start()
    with Client(daemon.socket) as c:
        assert "result" in c.call("session.register", {"session_id": "a"})
        r = c.call("claim.acquire", {"session_id": "a", "resources": [key]})["result"]

    assert r["token"] > max(tokens)
    assert (daemon.state_dir / f"{daemon.profile}.fencing").is_file()
