"""SQL for the message domain: tables, the writers of its write kinds, blocking reads.

The pure :mod:`meshd.core.mail.mailbox` produces writes ``(kind, *args)``; the store's
static table (:data:`meshd.store.schema.WRITERS`) maps each kind to a writer here,
so they go through the group commit with everything else. The read helpers are
blocking and take a :class:`sqlite3.Connection`: the store runs them on its read
connection (:meth:`meshd.store.Store.read`).

Reads return domain records (:class:`Message`, :class:`Handoff`); the handlers
make the wire shapes. History lives here, not in memory: once an item is read the daemon forgets its
text, and ``inbox --all``, ``handoff list`` and ``handoff show`` read it back.
Message and handoff text is stored as given; files and next steps of a handoff
as JSON arrays.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from meshd.core.mail.records import REPLY_WINDOW, Handoff, Message
from meshd.protocol.messages import ItemState

DDL = """
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    to_session TEXT NOT NULL,
    from_session TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at REAL NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'delivered', 'read')),
    reply_to INTEGER,
    depth INTEGER NOT NULL DEFAULT 1,
    delivered_at REAL,
    read_at REAL
) STRICT;
CREATE INDEX messages_inbox ON messages(to_session, id);
CREATE INDEX messages_unread ON messages(to_session, id) WHERE state != 'read';
CREATE INDEX messages_sent ON messages(from_session, id);
CREATE INDEX messages_created ON messages(created_at);
CREATE TABLE handoffs (
    id INTEGER PRIMARY KEY,
    from_session TEXT NOT NULL,
    to_session TEXT,
    summary TEXT NOT NULL,
    files TEXT NOT NULL DEFAULT '[]',
    branch TEXT,
    next_steps TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL
) STRICT;
CREATE INDEX handoffs_from ON handoffs(from_session, id);
CREATE INDEX handoffs_to ON handoffs(to_session, id);
"""

DDL_BY_STATUS = """
ALTER TABLE handoffs ADD COLUMN by_status INTEGER NOT NULL DEFAULT 0;
"""
"""Migration 11: a requested handoff the status responder wrote (not the session)."""

_encode = msgspec.json.Encoder().encode
_decode_strings = msgspec.json.Decoder(list[str]).decode

_MESSAGE_COLUMNS = (
    "id, to_session, from_session, kind, text, created_at, state, reply_to, depth, "
    "delivered_at, read_at"
)
_RESTORE_COLUMNS = _MESSAGE_COLUMNS.replace(
    "text", "CASE WHEN state = 'read' THEN '' ELSE text END"
)
_HANDOFF_COLUMNS = (
    "id, from_session, to_session, summary, files, branch, next_steps, created_at, by_status"
)


# --- writers -------------------------------------------------------------------------


def write_message(db: sqlite3.Connection, m: Message) -> None:
    db.execute(
        f"INSERT OR REPLACE INTO messages({_MESSAGE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            m.id, m.to, m.sender, m.kind, m.text, m.created_at, m.state, m.reply_to, m.depth,
            m.delivered_at, m.read_at,
        ),
    )  # fmt: skip


_PUT_MANY = (
    f"INSERT OR REPLACE INTO messages({_MESSAGE_COLUMNS}) "
    "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), ?1, ?2, ?3, ?4, "
    "json_extract(value, '$[2]'), ?5, ?6, "
    "CASE WHEN json_extract(value, '$[2]') = 'queued' THEN NULL ELSE ?4 END, NULL "
    "FROM json_each(?7)"
)


class _Sqlite:
    """What this SQLite can do, learnt on first use."""

    json_each = True
    """Whether it has ``json_each`` (JSON1: built in since 3.38, and in the builds Python
    ships); without it :func:`write_messages` writes row by row."""


SQLITE = _Sqlite()


def write_messages(db: sqlite3.Connection, ms: Sequence[Message]) -> None:
    """New items that share their sender, kind, text and time (a broadcast's): the same
    rows as :func:`write_message` each, in one statement.

    What differs between them (id, addressee, state) goes in as one JSON array and
    the rest is bound once: a broadcast to 1,000 sessions bound 11,000 parameters
    one row at a time, half of the writer's time for it (bench: broadcast). Times
    stay bound floats, never JSON text, so they are stored bit for bit. An item that
    does not fit the shared shape (changed since it was made: read, say) is written
    on its own, as before.
    """
    if len(ms) < 2 or not SQLITE.json_each:
        for m in ms:
            write_message(db, m)
        return
    first = ms[0]
    sender, kind, text, created = first.sender, first.kind, first.text, first.created_at
    reply_to, depth = first.reply_to, first.depth
    rows: list[tuple[int, str, str]] = []
    odd: list[Message] = []
    for m in ms:
        if (
            m.sender == sender and m.kind == kind and m.text == text
            and m.created_at == created and m.reply_to == reply_to and m.depth == depth
            and m.read_at is None
            and m.delivered_at == (None if m.state == "queued" else created)
        ):  # fmt: skip
            rows.append((m.id, m.to, m.state))
        else:
            odd.append(m)
    try:
        if rows:
            db.execute(_PUT_MANY, (sender, kind, text, created, reply_to, depth, _json(rows)))
    except sqlite3.OperationalError as exc:
        if "json" not in str(exc):  # a full disk, not a missing JSON1: the commit fails
            raise
        SQLITE.json_each = False
        odd = list(ms)
    for m in odd:
        write_message(db, m)


def _json(rows: list[tuple[int, str, str]]) -> str:
    return _encode(rows).decode()


def write_state(db: sqlite3.Connection, msg_id: int, state: ItemState, at: float) -> None:
    # A state never goes back: once read, later "delivered" writes change nothing.
    db.execute(
        "UPDATE messages SET state = ?, delivered_at = COALESCE(delivered_at, ?), "
        "read_at = CASE WHEN ? = 'read' THEN ? ELSE read_at END "
        "WHERE id = ? AND state != 'read'",
        (state, at, state, at, msg_id),
    )


def write_handoff(db: sqlite3.Connection, h: Handoff) -> None:
    db.execute(
        f"INSERT OR REPLACE INTO handoffs({_HANDOFF_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
        (
            h.id, h.sender, h.to, h.summary, _encode(list(h.files)).decode(), h.branch,
            _encode(list(h.next_steps)).decode(), h.created_at, int(h.by_status),
        ),
    )  # fmt: skip


def write_prune(db: sqlite3.Connection, cutoff: float) -> None:
    # Read items, and anything addressed to a session that is no longer live.
    db.execute(
        "DELETE FROM messages WHERE created_at < ? AND (state = 'read' OR to_session NOT IN "
        "(SELECT session_id FROM sessions WHERE ended_at IS NULL))",
        (cutoff,),
    )


# --- reads ---------------------------------------------------------------------------


def _message(row: Sequence[Any]) -> Message:
    return Message(
        id=row[0], to=row[1], sender=row[2], kind=row[3], text=row[4], created_at=row[5],
        state=row[6], reply_to=row[7], depth=row[8], delivered_at=row[9], read_at=row[10],
    )  # fmt: skip


def _handoff(row: Sequence[Any]) -> Handoff:
    return Handoff(
        id=row[0], sender=row[1], to=row[2], summary=row[3],
        files=tuple(_decode_strings(row[4])), branch=row[5],
        next_steps=tuple(_decode_strings(row[6])), created_at=row[7], by_status=bool(row[8]),
    )  # fmt: skip


def inbox_page(
    db: sqlite3.Connection, sid: str, *, limit: int = 100, before: int | None = None
) -> list[Message]:
    """Every item of ``sid``'s inbox (read or not), newest first, ``limit`` at a time."""
    rows = db.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE to_session = ? AND id < ? "
        "ORDER BY id DESC LIMIT ?",
        (sid, before if before is not None else 2**63 - 1, limit),
    ).fetchall()
    return [_message(r) for r in rows]


def message_states(db: sqlite3.Connection, sender: str, ids: Sequence[int]) -> dict[int, str]:
    """The states of messages ``sender`` sent (others' messages are not reported)."""
    marks = ",".join("?" * len(ids))
    rows = db.execute(
        f"SELECT id, state FROM messages WHERE from_session = ? AND id IN ({marks})",
        (sender, *ids),
    ).fetchall()
    return dict(rows)


def message_parties(db: sqlite3.Connection, msg_id: int) -> tuple[str, str] | None:
    """``(sender, to)`` of a stored message (to address a reply), or None."""
    row = db.execute(
        "SELECT from_session, to_session FROM messages WHERE id = ?", (msg_id,)
    ).fetchone()
    return (row[0], row[1]) if row else None


def handoff_list(
    db: sqlite3.Connection,
    sid: str | None,
    *,
    every: bool = False,
    limit: int = 50,
    before: int | None = None,
) -> list[Handoff]:
    """Handoffs to ``sid``, by ``sid`` and unaddressed ones (``every``: all), newest first;
    ``before``: only those with a smaller id (the next page back)."""
    args: tuple[str | int, ...] = ()
    if every or sid is None:
        where = "1" if every else "to_session IS NULL"
    else:
        where = "(to_session = ? OR from_session = ? OR to_session IS NULL)"
        args = (sid, sid)
    if before is not None:
        where += " AND id < ?"
        args = (*args, before)
    rows = db.execute(
        f"SELECT {_HANDOFF_COLUMNS} FROM handoffs WHERE {where} ORDER BY id DESC LIMIT ?",
        (*args, limit),
    ).fetchall()
    return [_handoff(r) for r in rows]


def handoff_show(db: sqlite3.Connection, handoff_id: int) -> Handoff | None:
    """One handoff by id, or None."""
    row = db.execute(
        f"SELECT {_HANDOFF_COLUMNS} FROM handoffs WHERE id = ?", (handoff_id,)
    ).fetchone()
    return _handoff(row) if row else None


class RestoredMail(msgspec.Struct):
    """What :meth:`meshd.core.mail.mailbox.Mailbox.restore` takes back after a restart."""

    messages: list[Message]
    handoffs: list[Handoff]
    max_message_id: int
    max_handoff_id: int


def restore(db: sqlite3.Connection, now_wall: float) -> RestoredMail:
    """Unread items, recent messages (text left out once read), latest handoff per pair
    that its sender wrote (not the status responder: :class:`Handoff` ``by_status``)."""
    rows = db.execute(
        f"SELECT {_RESTORE_COLUMNS} "
        "FROM messages WHERE state != 'read' OR created_at >= ? ORDER BY id",
        (now_wall - REPLY_WINDOW,),
    ).fetchall()
    handoffs = db.execute(
        f"SELECT {_HANDOFF_COLUMNS} FROM handoffs WHERE id IN "
        "(SELECT MAX(id) FROM handoffs WHERE by_status = 0 GROUP BY from_session, to_session) "
        "ORDER BY id"
    ).fetchall()
    max_m = db.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
    max_h = db.execute("SELECT COALESCE(MAX(id), 0) FROM handoffs").fetchone()[0]
    return RestoredMail(
        messages=[_message(r) for r in rows],
        handoffs=[_handoff(r) for r in handoffs],
        max_message_id=max_m,
        max_handoff_id=max_h,
    )
