"""The store's two failures of its own, below both :mod:`~meshd.store.db` (which raises
them at start and when the files change under it) and :mod:`~meshd.store.writer`
(which meets a closed database)."""

from __future__ import annotations

import sqlite3


class StoreError(Exception):
    """The database cannot be used at all (corrupt, newer schema); refuse to start."""


class DatabaseLost(sqlite3.OperationalError):
    """The database file or its WAL was removed or replaced under the running daemon.

    SQLite would go on writing to the unlinked files and every write acknowledged
    from then on would be gone at the next start: refuse them all (UNAVAILABLE).
    """
