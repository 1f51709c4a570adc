"""The one history read every domain needs: the newest rows matching some filters."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any


def newest_rows(
    db: sqlite3.Connection,
    table: str,
    columns: Sequence[str],
    filters: Sequence[tuple[str, Any]],
    limit: int,
) -> list[dict[str, Any]]:
    """The newest ``limit`` rows of ``table`` (by ``id``), oldest first, as dicts.

    ``filters`` are ``("column = ?", value)`` pairs; a pair whose value is None is
    left out, so optional filters pass straight through.
    """
    used = [(sql, value) for sql, value in filters if value is not None]
    query = f"SELECT {', '.join(columns)} FROM {table}"
    if used:
        query += " WHERE " + " AND ".join(sql for sql, _ in used)
    query += " ORDER BY id DESC LIMIT ?"
    rows = db.execute(query, (*(value for _, value in used), limit)).fetchall()
    return [dict(zip(columns, row, strict=True)) for row in reversed(rows)]
