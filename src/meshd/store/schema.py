"""The whole schema in one place: the migrations, in order, and the table of writers.

Both are static: importing :mod:`meshd.store` knows every table and every write
kind, so nothing can be written before some handler has "installed" its SQL, and
a write kind no module maps fails at the first test that makes one.

A domain adds (see CONTRIBUTING.md, "How to add a domain"):

* its DDL as ONE new entry at the end of :data:`MIGRATIONS` (never edit a landed one);
* its ``WRITERS`` dict (write kind → function of ``(db, *args)``) to :data:`WRITERS`.
"""

from __future__ import annotations

from collections.abc import Callable

from meshd.store import board, claims, fleet_post, jobs, messages, sessions, shared

Writer = Callable[..., None]
"""Applies one write tuple's arguments to the open transaction: ``fn(db, *args)``."""

MIGRATIONS: list[str] = [
    sessions.DDL,  # 1: sessions and meta
    claims.DDL,  # 2: claims, audit log
    messages.DDL,  # 3: messages and handoffs
    board.DDL,  # 4: the board's changed files
    shared.DDL,  # 5: shared work: notes, signals, the ledger, board posts and marks
    jobs.DDL,  # 6: declared jobs' runs and deferrals
    claims.DDL_TTL,  # 7: each claim's ttl: a restart caps what is left of it (clock steps)
    fleet_post.DDL,  # 8: the fleet's outbox and the keys of fleet items taken in
    claims.DDL_DROP_ENDED,  # 9: claim rows an end left behind before it took them along
    shared.DDL_NOTE_REG,  # 10: the registration a note was written under (private notes)
    messages.DDL_BY_STATUS,  # 11: a requested handoff written by the status responder
]
SCHEMA_VERSION = len(MIGRATIONS)

WRITERS: dict[str, Writer] = {
    "session.put": sessions.write_put,
    "session.snapshot": sessions.write_snapshot,
    "session.end": sessions.write_end,
    "meta.set": sessions.write_meta,
    "claim.audit": claims.write_audit,
    "audit.prune": claims.prune_audit,
    "fencing.reserve": claims.write_fencing,
    "message.put": messages.write_message,
    "message.put_many": messages.write_messages,
    "message.state": messages.write_state,
    "handoff.put": messages.write_handoff,
    "message.prune": messages.write_prune,
    "board.changed": board.write_changes,
    "board.prune": board.write_prune,
    **shared.WRITERS,
    **jobs.WRITERS,
    **fleet_post.WRITERS,
}
"""Every write kind the core may produce, and the SQL it becomes."""

SYNC_KINDS: frozenset[str] = frozenset({"fencing.reserve", *shared.LEDGER_KINDS})
"""Write kinds that must survive power loss: their batch commits with synchronous=FULL."""
