"""SQL for shared work (SPEC §7): notes, signals, the ledger, board posts and marks.

The pure cores (:mod:`meshd.core.work.notes`, ``signals``, ``ledger``, ``marks``)
leave write tuples; :data:`WRITERS` holds their SQL (in the store's static table)
and the ledger's kinds are synced (``synchronous=FULL`` for their batch: a ledger entry
survives power loss, SPEC §8). :func:`load` reads everything the daemon holds
in memory back at start; board posts stay on disk and are read on demand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from meshd.core.work.ledger import Entry
from meshd.core.work.notes import Note
from meshd.core.work.signals import Signal
from meshd.store.query import newest_rows

DDL = """
CREATE TABLE notes (
    id INTEGER PRIMARY KEY,
    author TEXT NOT NULL,
    text TEXT NOT NULL,
    private INTEGER NOT NULL,
    at REAL NOT NULL
) STRICT;
CREATE INDEX notes_at ON notes(at);
CREATE TABLE signals (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    seq INTEGER NOT NULL,
    payload TEXT NOT NULL,
    emitted_by TEXT,
    at REAL NOT NULL,
    UNIQUE(name, seq)
) STRICT;
CREATE INDEX signals_at ON signals(at);
CREATE TABLE signal_counters (name TEXT PRIMARY KEY, seq INTEGER NOT NULL) STRICT;
CREATE TABLE ledger (
    key TEXT PRIMARY KEY,
    record TEXT NOT NULL
) STRICT;
CREATE TABLE board_posts (
    id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    kind TEXT NOT NULL,
    session_id TEXT NOT NULL,
    text TEXT NOT NULL,
    at REAL NOT NULL
) STRICT;
CREATE INDEX board_posts_project ON board_posts(project, kind, id);
CREATE INDEX board_posts_at ON board_posts(at);
CREATE TABLE board_marks (
    session_id TEXT NOT NULL,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (session_id, path, kind)
) STRICT;
"""

DDL_NOTE_REG = """
ALTER TABLE notes ADD COLUMN reg TEXT NOT NULL DEFAULT '';
"""
"""A private note belongs to the registration that wrote it (SPEC §4), kept here. A
note written before this column existed has ``''``: only a session restored from the
same release (whose record has no registration either) under the same id reads it."""

LEDGER_KINDS = frozenset({"ledger.put", "ledger.delete"})


class Post(msgspec.Struct, frozen=True):
    """A progress line or a pitfall on a project's board."""

    project: str
    kind: str
    session_id: str
    text: str
    at: float


class Loaded(msgspec.Struct):
    notes: list[Note] = msgspec.field(default_factory=list)
    signals: list[Signal] = msgspec.field(default_factory=list)
    counters: dict[str, int] = msgspec.field(default_factory=dict)
    ledger: list[Entry] = msgspec.field(default_factory=list)
    marks: list[tuple[str, str, str, float]] = msgspec.field(default_factory=list)


# --- writers ------------------------------------------------------------------------


def _note_put(db: sqlite3.Connection, n: Note) -> None:
    db.execute(
        "INSERT OR REPLACE INTO notes(id, author, text, private, at, reg) VALUES (?,?,?,?,?,?)",
        (n.id, n.author, n.text, int(n.private), n.at, n.reg),
    )


def _note_rm(db: sqlite3.Connection, n: Note) -> None:
    db.execute("DELETE FROM notes WHERE id = ?", (n.id,))


def _signal_put(db: sqlite3.Connection, s: Signal) -> None:
    db.execute(
        "INSERT INTO signals(name, seq, payload, emitted_by, at) VALUES (?,?,?,?,?)",
        (s.name, s.seq, s.payload, s.emitted_by, s.emitted_at),
    )
    db.execute(
        "INSERT INTO signal_counters(name, seq) VALUES (?, ?) "
        "ON CONFLICT(name) DO UPDATE SET seq = max(seq, excluded.seq)",
        (s.name, s.seq),
    )


def _signal_prune(db: sqlite3.Connection, cutoff: float) -> None:
    db.execute("DELETE FROM signals WHERE at < ?", (cutoff,))


def _ledger_put(db: sqlite3.Connection, e: Entry) -> None:
    import json  # here, not at the top: most daemons start with an empty ledger (bench: start)

    record = json.dumps({f: getattr(e, f) for f in Entry.__struct_fields__}, separators=(",", ":"))
    db.execute(
        "INSERT INTO ledger(key, record) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET record = excluded.record",
        (e.key, record),
    )


def _ledger_delete(db: sqlite3.Connection, key: str) -> None:
    db.execute("DELETE FROM ledger WHERE key = ?", (key,))


def _post_put(db: sqlite3.Connection, p: Post) -> None:
    db.execute(
        "INSERT INTO board_posts(project, kind, session_id, text, at) VALUES (?,?,?,?,?)",
        (p.project, p.kind, p.session_id, p.text, p.at),
    )


def _post_prune(db: sqlite3.Connection, cutoff: float) -> None:
    db.execute("DELETE FROM board_posts WHERE at < ?", (cutoff,))


def _mark(db: sqlite3.Connection, sid: str, path: str, kind: str, at: float) -> None:
    db.execute(
        "INSERT INTO board_marks(session_id, path, kind, at) VALUES (?,?,?,?) "
        "ON CONFLICT(session_id, path, kind) DO UPDATE SET at = excluded.at",
        (sid, path, kind, at),
    )


def _unmark(db: sqlite3.Connection, sid: str) -> None:
    db.execute("DELETE FROM board_marks WHERE session_id = ?", (sid,))


def _unmark_path(db: sqlite3.Connection, sid: str, path: str, kind: str) -> None:
    db.execute(
        "DELETE FROM board_marks WHERE session_id = ? AND path = ? AND kind = ?",
        (sid, path, kind),
    )


WRITERS: dict[str, Callable[..., None]] = {
    "note.put": _note_put,
    "note.rm": _note_rm,
    "signal.put": _signal_put,
    "signal.prune": _signal_prune,
    "ledger.put": _ledger_put,
    "ledger.delete": _ledger_delete,
    "board.post": _post_put,
    "board.post_prune": _post_prune,
    "board.mark": _mark,
    "board.unmark": _unmark,
    "board.unmark_path": _unmark_path,
}
"""This module's write kinds (in :data:`meshd.store.schema.WRITERS`); the ledger's
are synced (:data:`LEDGER_KINDS` joins ``SYNC_KINDS``)."""


# --- reads --------------------------------------------------------------------------


def load(db: sqlite3.Connection) -> Loaded:
    """Everything the daemon keeps in memory: notes, newest signals, counters, ledger."""
    out = Loaded()
    for i, author, text, private, at, reg in db.execute(
        "SELECT id, author, text, private, at, reg FROM notes ORDER BY id"
    ):
        out.notes.append(Note(i, author, text, bool(private), at, reg))
    for name, seq, payload, by, at in db.execute(
        "SELECT name, seq, payload, emitted_by, at FROM signals s "
        "WHERE seq = (SELECT max(seq) FROM signals t WHERE t.name = s.name)"
    ):
        out.signals.append(Signal(name, seq, payload, by, at))
    out.counters = dict(db.execute("SELECT name, seq FROM signal_counters").fetchall())
    for (record,) in db.execute("SELECT record FROM ledger"):
        import json  # see _ledger_put

        out.ledger.append(Entry(**json.loads(record)))
    out.marks = list(db.execute("SELECT session_id, path, kind, at FROM board_marks"))
    return out


def posts_page(
    db: sqlite3.Connection, *, project: str, kind: str, limit: int
) -> list[dict[str, Any]]:
    """The newest ``limit`` posts of one kind on ``project``'s board, oldest first."""
    columns: Sequence[str] = ("id", "session_id", "text", "at")
    filters = [("project = ?", project), ("kind = ?", kind)]
    return newest_rows(db, "board_posts", columns, filters, limit)
