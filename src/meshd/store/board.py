"""SQL for the board's changed files: the table, its writers, one blocking read.

:mod:`meshd.core.work.board` leaves ``("board.changed", changes)`` (one row per path)
and ``("board.prune", cutoff)`` writes; :mod:`meshd.store.schema` maps them here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from meshd.core.work.board import Change
from meshd.store.query import newest_rows

DDL = """
CREATE TABLE board_changes (
    id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    path TEXT NOT NULL,
    session_id TEXT NOT NULL,
    at REAL NOT NULL,
    summary TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX board_changes_project_at ON board_changes(project, at);
"""

_COLUMNS = ("path", "project", "session_id", "at", "summary")


def write_changes(db: sqlite3.Connection, changes: Sequence[Change]) -> None:
    db.executemany(
        "INSERT INTO board_changes(path, project, session_id, at, summary) VALUES (?,?,?,?,?)",
        [(c.path, c.project, c.session_id, c.at, c.summary) for c in changes],
    )


def write_prune(db: sqlite3.Connection, cutoff: float) -> None:
    db.execute("DELETE FROM board_changes WHERE at < ?", (cutoff,))


def changes_page(
    db: sqlite3.Connection,
    *,
    project: str | None,
    since: float | None,
    session_id: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """The newest ``limit`` changes matching the filters, oldest first."""
    filters = [("project = ?", project), ("at >= ?", since), ("session_id = ?", session_id)]
    return newest_rows(db, "board_changes", _COLUMNS, filters, limit)
