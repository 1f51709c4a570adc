"""SQL for claims: the live claim set, the audit log and the fencing block.

The lock table (:mod:`meshd.core.claims.table`) reports every change as an
:class:`~meshd.core.claims.records.AuditRecord`; one writer turns each record into an
audit row *and* the matching change to the live ``claims`` table (grant and
refresh upsert, every other action deletes), so the two can never disagree.
The fencing block ("tokens up to N may have been issued") is written with
``synchronous=FULL`` so it survives power loss (see ``schema.SYNC_KINDS``), and
also to a small file beside the database (``<profile>.fencing``, written and
synced *before* the block's transaction): a database deleted or replaced under
the daemon takes every acknowledged claim with it, but tokens still resume above
the highest ever issued.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from meshd.core.claims.records import ENDING, AuditRecord
from meshd.store.query import newest_rows
from meshd.store.sessions import load_meta

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

DDL_TTL = "ALTER TABLE claims ADD COLUMN ttl REAL;"

DDL_DROP_ENDED = (
    "DELETE FROM claims WHERE session_id IN "
    "(SELECT session_id FROM sessions WHERE ended_at IS NOT NULL);"
)
"""Claim rows of ended sessions, which an end stored before it took them with it
(``sessions.write_end``) left behind when a kill -9 came before its releases were
stored. Restore skips them while the session is ended, but the same id registered
again clears ``ended_at``, and they came back to life at the next start beside
whoever took the key meanwhile. No row of an ended session is live since: an end
and the deletion of its rows are one transaction, and an ended session is granted
nothing."""

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
            "expires_at, ttl) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (r.session_id, r.resource, r.mode, r.token, r.reason, r.at, expires, r.ttl),
        )
    elif r.action == "refresh":
        db.execute(
            "UPDATE claims SET reason=?, expires_at=?, ttl=? WHERE session_id=? AND resource=?",
            (r.reason, expires, r.ttl, r.session_id, r.resource),
        )
    elif r.action in ENDING:
        db.execute(
            "DELETE FROM claims WHERE session_id=? AND resource=? AND token=?",
            (r.session_id, r.resource, r.token),
        )


def highwater_path(database: Path) -> Path:
    """The fencing high-water file of the database at ``database``."""
    return database.with_suffix(".fencing")


def read_highwater(database: Path) -> int:
    """The high-water mark beside ``database`` (0 when there is none or it is unreadable)."""
    try:
        return int(highwater_path(database).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def write_highwater(database: Path, reserve_until: int) -> None:
    """Raise the high-water mark to ``reserve_until``, durably (written, synced, renamed)."""
    if read_highwater(database) >= reserve_until:
        return
    path = highwater_path(database)
    tmp = path.with_suffix(".fencing.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, f"{reserve_until}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _main_file(db: sqlite3.Connection) -> Path | None:
    """The file of ``db``'s main database (None in memory)."""
    name = db.execute("PRAGMA database_list").fetchone()[2]
    return Path(name) if name else None


def write_fencing(db: sqlite3.Connection, reserve_until: int) -> None:
    main = _main_file(db)
    if main is not None:  # an on-disk database: the mark beside it first
        try:
            write_highwater(main, reserve_until)
        except OSError as exc:  # full disk: the block, and the grant, are refused
            with contextlib.suppress(OSError):
                highwater_path(main).with_suffix(".fencing.tmp").unlink()
            raise sqlite3.OperationalError(f"cannot record the fencing block: {exc}") from exc
    db.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value=max(value, excluded.value)",
        (FENCING_KEY, reserve_until),
    )


class StoredClaim(msgspec.Struct, frozen=True):
    session_id: str
    resource: str
    mode: str
    token: int
    reason: str
    since: float
    expires_at: float | None
    ttl: float | None = None

    def ttl_left(self, now_wall: float) -> float | None:
        """What is left of the ttl at ``now_wall``, never more than the whole ttl:
        the wall clock may have stepped back while the daemon was down."""
        if self.expires_at is None:
            return None
        whole = self.ttl if self.ttl is not None else self.expires_at - self.since
        return max(0.0, min(self.expires_at - now_wall, whole))


def load_fencing(db: sqlite3.Connection) -> int:
    """The stored fencing block: tokens up to it may have been issued (0 on a new file)."""
    stored = int(load_meta(db, FENCING_KEY) or 0)
    main = _main_file(db)  # never resume below the high-water mark beside the file
    return max(stored, read_highwater(main)) if main is not None else stored


def load_claims(db: sqlite3.Connection) -> list[StoredClaim]:
    """Live claims of sessions that have not ended."""
    rows = db.execute(
        "SELECT c.session_id, c.resource, c.mode, c.token, c.reason, c.since, c.expires_at, c.ttl "
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
