"""SQL for declared jobs' runs and deferrals: one event table, its writers, the restore read.

:mod:`meshd.core.work.jobs` leaves ``("job.event", JobEvent)`` and ``("job.prune",
cutoff)``; :mod:`meshd.store.schema` maps them here. The book is rebuilt from the
events at start (:func:`load_events`, oldest first).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from meshd.core.work.jobs import JobEvent

DDL = """
CREATE TABLE job_events (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL,
    session_id TEXT NOT NULL,
    exit INTEGER,
    outcome TEXT NOT NULL DEFAULT '',
    holders TEXT NOT NULL DEFAULT '[]'
) STRICT;
CREATE INDEX job_events_name_at ON job_events(name, at);
"""


def write_event(db: sqlite3.Connection, ev: JobEvent) -> None:
    import json  # here, not at the top: most daemons start with no job events (bench: start)

    db.execute(
        "INSERT INTO job_events(name, kind, at, session_id, exit, outcome, holders) "
        "VALUES (?,?,?,?,?,?,?)",
        (ev.name, ev.kind, ev.at, ev.session_id, ev.exit, ev.outcome, json.dumps(ev.holders)),
    )


def write_prune(db: sqlite3.Connection, cutoff: float) -> None:
    """Forget old events, but never the newest start and end of a job (the radar's 'last')."""
    db.execute(
        "DELETE FROM job_events WHERE at < ? AND id NOT IN ("
        " SELECT MAX(id) FROM job_events WHERE kind IN ('start', 'end') GROUP BY name, kind)",
        (cutoff,),
    )


def load_events(db: sqlite3.Connection) -> list[JobEvent]:
    rows = db.execute(
        "SELECT name, kind, at, session_id, exit, outcome, holders FROM job_events ORDER BY id"
    ).fetchall()
    if not rows:
        return []
    import json  # see write_event

    return [
        JobEvent(name, kind, at, sid, exit, outcome, tuple(json.loads(holders)))
        for name, kind, at, sid, exit, outcome, holders in rows
    ]


WRITERS: dict[str, Callable[..., None]] = {"job.event": write_event, "job.prune": write_prune}
