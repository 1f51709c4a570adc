"""SQLite persistence: one package, one file per domain's SQL, one static schema.

* :mod:`meshd.store.db` -- :class:`Store`: opens and migrates the file, watches it,
  reads on a connection of its own, restores, closes.
* :mod:`meshd.store.writer` -- :class:`~meshd.store.writer.Writer`: the writing
  connection's group-commit thread, the inline commit, checkpoints; every write of
  the store goes through it. :mod:`meshd.store.bell` tells the loop a batch is done.
* :mod:`meshd.store.schema` -- every migration in order, and the static table of
  writers (write kind → SQL).
* one module per domain (``sessions``, ``claims``, ``messages``, ``board``): its
  DDL, its writers, and blocking reads that take a :class:`sqlite3.Connection`.
"""

from meshd.store.db import Store, StoreError
from meshd.store.schema import MIGRATIONS, SCHEMA_VERSION, SYNC_KINDS, WRITERS

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SYNC_KINDS", "WRITERS", "Store", "StoreError"]
