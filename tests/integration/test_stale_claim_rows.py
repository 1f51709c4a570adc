"""Databases written before an end took its claim rows with it (SPEC §8).

Until then ``session.end`` stored the end alone and its releases later, in the
background: a kill -9 between left the ended session's rows in ``claims``. Restore
skips them while the session is ended, but ``write_put`` clears ``ended_at`` when
the same id registers again, and the rows came back to life at the next start,
beside whoever took the key meanwhile. A migration drops them.
"""

from __future__ import annotations

import sqlite3

from tests.conftest import DaemonHandle, MeshEnv

from meshd.store.claims import DDL_DROP_ENDED
from meshd.store.schema import MIGRATIONS


def _holders(d: DaemonHandle, resource: str) -> set[str]:
    claims = d.call("claim.list")["result"]["claims"]
    return {c["session_id"] for c in claims if c["resource"] == resource}


def _old_file_with_an_ended_holder(d: DaemonHandle, db_path: str) -> None:
    """cli:a holds res:x, then its end is stored the old way: the session row says
    ended, the claim row stays (the releases never made it to disk); the file is
    at the schema version before the migration."""
    for sid in ("cli:a", "cli:b"):
        assert "result" in d.call("session.register", {"session_id": sid, "source": "cli"})
    assert d.call("claim.acquire", {"session_id": "cli:a", "resources": ["res:x"]})["result"]
    d.stop()
    with sqlite3.connect(db_path) as db:
        db.execute("UPDATE sessions SET ended_at = 1.0, end_reason = 'ended' "
                   "WHERE session_id = 'cli:a'")  # fmt: skip
        db.execute(f"PRAGMA user_version = {MIGRATIONS.index(DDL_DROP_ENDED)}")
        db.execute("ALTER TABLE notes DROP COLUMN reg")  # a later migration's column
        db.execute("ALTER TABLE handoffs DROP COLUMN by_status")  # and migration 11's


def test_an_ended_sessions_claim_rows_do_not_come_back(mesh_env: MeshEnv) -> None:
    """The rows of an end stored before the fix are gone after the upgrade: the same
    id registered again holds nothing after a restart, and the key stays with the
    session that took it meanwhile."""
    db_path = str(mesh_env.state_dir / "test.sqlite3")
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:
        _old_file_with_an_ended_holder(d, db_path)
        d.start()  # migrates the old file
        taken = d.call("claim.acquire", {"session_id": "cli:b", "resources": ["res:x"]})
        assert "result" in d.call("session.register", {"session_id": "cli:a", "source": "cli"})
        d.restart()
        holders = _holders(d, "res:x")
        with sqlite3.connect(db_path) as db:
            rows = db.execute("SELECT session_id FROM claims WHERE resource = 'res:x'").fetchall()
    finally:
        d.stop()

    assert taken["result"]["status"] == "granted"
    assert holders == {"cli:b"}
    assert rows == [("cli:b",)]
