"""SQL for claims: the live claim set, the audit log and the fencing block.

The lock table (:mod:`meshd.core.claims`) reports every change as an
:class:`~meshd.core.claims.AuditRecord`; one writer turns each record into an
audit row *and* the matching change to the live ``claims`` table (grant and
refresh upsert, every other action deletes), so the two can never disagree.
The fencing block ("tokens up to N may have been issued") is written with
``synchronous=FULL`` so it survives power loss (see ``schema.SYNC_KINDS``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from meshd.core.claim_records import ENDING, AuditRecord
from meshd.store.query import newest_rows

DDL = """
CREATE TABLE claims (
    session_id TEXT NOT NULL,
    resource TEXT NOT NULL,
    mode TEXT NOT NULL,
    token INTEGER NOT NULL,
    reason TEXT NOT NULL,
    since REAL NOT NULL,
    expires_at REAL,
    PRIMARY KEY (session_id, resource)
) STRICT;
CREATE TABLE audit (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    action TEXT NOT NULL,
    session_id TEXT NOT NULL,
    resource TEXT NOT NULL,
    mode TEXT NOT NULL,
    token INTEGER NOT NULL,
    reason TEXT NOT NULL,
    how TEXT NOT NULL,
    by TEXT
) STRICT;
CREATE INDEX audit_at ON audit(at);
"""

FENCING_KEY = "fencing_reserve_until"
_AUDIT_COLUMNS = ("at", "action", "session_id", "resource", "mode", "token", "reason", "how", "by")


def write_audit(db: sqlite3.Connection, r: AuditRecord) -> None:
    db.execute(
        "INSERT INTO audit(at, action, session_id, resource, mode, token, reason, how, by) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (r.at, r.action, r.session_id, r.resource, r.mode, r.token, r.reason, r.how, r.by),
    )
    expires = None if r.ttl is None else r.at + r.ttl
    if r.action == "grant":
        db.execute(
            "INSERT OR REPLACE INTO claims(session_id, resource, mode, token, reason, since, "
            "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (r.session_id, r.resource, r.mode, r.token, r.reason, r.at, expires),
        )
    elif r.action == "refresh":
        db.execute(
            "UPDATE claims SET reason=?, expires_at=? WHERE session_id=? AND resource=?",
            (r.reason, expires, r.session_id, r.resource),
        )
    elif r.action in ENDING:
        db.execute(
            "DELETE FROM claims WHERE session_id=? AND resource=? AND token=?",
            (r.session_id, r.resource, r.token),
        )


def write_fencing(db: sqlite3.Connection, reserve_until: int) -> None:
    db.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value=max(value, excluded.value)",
        (FENCING_KEY, reserve_until),
    )


@dataclass(frozen=True, slots=True)
class StoredClaim:
    session_id: str
    resource: str
    mode: str
    token: int
    reason: str
    since: float
    expires_at: float | None


def load_fencing(db: sqlite3.Connection) -> int:
    """The stored fencing block: tokens up to it may have been issued (0 on a new file)."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (FENCING_KEY,)).fetchone()
    return int(row[0] or 0) if row else 0


def load_claims(db: sqlite3.Connection) -> list[StoredClaim]:
    """Live claims of sessions that have not ended."""
    rows = db.execute(
        "SELECT c.session_id, c.resource, c.mode, c.token, c.reason, c.since, c.expires_at "
        "FROM claims c JOIN sessions s ON s.session_id = c.session_id "
        "WHERE s.ended_at IS NULL ORDER BY c.token"
    ).fetchall()
    return [StoredClaim(*row) for row in rows]


def audit_page(
    db: sqlite3.Connection,
    *,
    since: float | None,
    limit: int,
    session_id: str | None,
    resource: str | None = None,
) -> list[dict[str, Any]]:
    """The newest ``limit`` audit rows at or after ``since``, oldest first."""
    filters = [("at >= ?", since), ("session_id = ?", session_id), ("resource = ?", resource)]
    return newest_rows(db, "audit", _AUDIT_COLUMNS, filters, limit)


def prune_audit(db: sqlite3.Connection, before: float) -> None:
    db.execute("DELETE FROM audit WHERE at < ?", (before,))
