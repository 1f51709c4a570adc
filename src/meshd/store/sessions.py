"""SQL for sessions and the ``meta`` table: the first migration, its writers, the restore read.

:mod:`meshd.core.sessions.registry` leaves ``("session.put", s)``, ``("session.snapshot", s)``
and ``("session.end", sid, at, reason)`` writes; a session is stored whole as its
msgspec-encoded record (its default-valued fields left out, see
:class:`~meshd.core.sessions.records.Session`), so a new reported field needs no
migration.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from typing import Any

import msgspec

from meshd.core.sessions.registry import Session

log = logging.getLogger("meshd.store")

DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value ANY) STRICT;
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    record BLOB NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT
) STRICT;
CREATE INDEX sessions_live ON sessions(session_id) WHERE ended_at IS NULL;
"""

_encode = msgspec.json.Encoder().encode
_decode_session = msgspec.json.Decoder(Session).decode


def write_put(db: sqlite3.Connection, s: Session) -> None:
    db.execute(
        "INSERT INTO sessions(session_id, record, started_at) VALUES (?, ?, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET record=excluded.record, "
        "started_at=excluded.started_at, ended_at=NULL, end_reason=NULL",
        (s.session_id, _encode(s), s.started_at),
    )


def write_snapshot(db: sqlite3.Connection, s: Session) -> None:
    db.execute(
        "UPDATE sessions SET record=? WHERE session_id=? AND ended_at IS NULL",
        (_encode(s), s.session_id),
    )


def write_end(db: sqlite3.Connection, sid: str, at: float, reason: str) -> None:
    """The end, and its claims gone with it: the releases it sets off are stored later,
    in the background, and a kill -9 between would leave rows that come back to life
    if the same id is registered again (``write_put`` clears ``ended_at``)."""
    db.execute(
        "UPDATE sessions SET ended_at=?, end_reason=? WHERE session_id=? AND ended_at IS NULL",
        (at, reason, sid),
    )
    db.execute("DELETE FROM claims WHERE session_id=?", (sid,))


def write_meta(db: sqlite3.Connection, key: str, value: Any) -> None:
    db.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        (key, value),
    )


def load_meta(db: sqlite3.Connection, key: str) -> Any:
    """The ``meta`` value of ``key``; None when it was never written."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def load_sessions(db: sqlite3.Connection) -> Iterator[Session]:
    """Every session that has not ended (an unreadable record is skipped and logged).

    Decoded one row at a time, as the caller takes them: the registry interns each
    session's strings before the next is decoded, so the duplicates freed are reused
    at once instead of 10,000 sessions' worth being allocated first (bench: start).
    Oldest first, as they were registered: the registry lists them in the order it
    took them, and listings are oldest first (the primary key's order put them in id
    order after every restart).
    """
    decode = _decode_session
    query = "SELECT record FROM sessions WHERE ended_at IS NULL ORDER BY started_at, rowid"
    for (record,) in db.execute(query):
        try:
            yield decode(record)
        except msgspec.DecodeError:
            log.warning("skipping an unreadable session record")
