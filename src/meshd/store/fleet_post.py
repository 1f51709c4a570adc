"""SQL for the fleet's post office (docs/FLEET.md): the outbox and the seen keys.

:mod:`meshd.core.mail.fleet_post` leaves write tuples; :data:`WRITERS` holds their SQL.
An outbox row is stored in the same commit as the call that made it (a send to a
session on another host), and a seen key in the same commit as the items an arriving
fleet item made: that pairing is what makes delivery exactly once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import msgspec

from meshd.core.mail.fleet_post import Outgoing

DDL = """
CREATE TABLE fleet_outbox (
    seq INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    subject TEXT NOT NULL,
    payload BLOB NOT NULL,
    created_at REAL NOT NULL
) STRICT;
CREATE TABLE fleet_seen (key TEXT PRIMARY KEY, at REAL NOT NULL) STRICT;
CREATE INDEX fleet_seen_at ON fleet_seen(at);
"""


def write_out(db: sqlite3.Connection, out: Outgoing) -> None:
    db.execute(
        "INSERT OR IGNORE INTO fleet_outbox(key, subject, payload, created_at) VALUES (?,?,?,?)",
        (out.key, out.subject, out.payload, out.created_at),
    )


def write_sent(db: sqlite3.Connection, key: str) -> None:
    db.execute("DELETE FROM fleet_outbox WHERE key = ?", (key,))


def write_seen(db: sqlite3.Connection, key: str, at: float) -> None:
    db.execute("INSERT OR IGNORE INTO fleet_seen(key, at) VALUES (?, ?)", (key, at))


def write_seen_prune(db: sqlite3.Connection, cutoff: float) -> None:
    db.execute("DELETE FROM fleet_seen WHERE at < ?", (cutoff,))


WRITERS: dict[str, Callable[..., None]] = {
    "fleet.out": write_out,
    "fleet.sent": write_sent,
    "fleet.seen": write_seen,
    "fleet.seen_prune": write_seen_prune,
}


class Loaded(msgspec.Struct):
    pending: list[Outgoing] = msgspec.field(default_factory=list)
    seen: list[tuple[str, float]] = msgspec.field(default_factory=list)


def load(db: sqlite3.Connection) -> Loaded:
    """The outbox not yet published (in order) and the keys taken in."""
    out = Loaded()
    for key, subject, payload, at in db.execute(
        "SELECT key, subject, payload, created_at FROM fleet_outbox ORDER BY seq"
    ):
        out.pending.append(Outgoing(key, subject, bytes(payload), at))
    out.seen = [(k, at) for k, at in db.execute("SELECT key, at FROM fleet_seen")]
    return out
