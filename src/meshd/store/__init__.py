"""SQLite persistence: one package, one file per domain's SQL, one static schema.

* :mod:`meshd.store.db` -- :class:`Store`: the connection, migrations, the
  group-commit writer thread and a read connection of its own.
* :mod:`meshd.store.schema` -- every migration in order, and the static table of
  writers (write kind → SQL).
* one module per domain (``sessions``, ``claims``, ``messages``, ``board``): its
  DDL, its writers, and blocking reads that take a :class:`sqlite3.Connection`.
"""

from meshd.store.db import Store, StoreError
from meshd.store.schema import MIGRATIONS, SCHEMA_VERSION, SYNC_KINDS, WRITERS

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SYNC_KINDS", "WRITERS", "Store", "StoreError"]
