"""The store: open and migrate the database, watch its files, read, restore, close.

:class:`Store` is the profile's database. It opens the file (WAL, migrations, an
integrity check), hands the writing connection to its :class:`~meshd.store.writer.Writer`
(the group-commit writer thread, which every write goes through: :meth:`Store.commit`,
:meth:`Store.submit` and the rest are the writer's), and keeps a second connection of
its own for reads.

Reads (history: the audit log, read messages, handoffs, the board) go to that
read-only connection in a worker thread: WAL lets it read while the writer
writes, so a read never queues behind a commit, and it sees everything committed
(so everything acknowledged) before it started.

The files are watched (:meth:`Store.check_files`, before each of the writer's
transactions): a database or WAL removed or replaced under the running daemon is
:class:`~meshd.store.errors.DatabaseLost`, and every write from then on is refused.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import anyio

from meshd import __version__
from meshd.protocol.errors import StorageUnavailable
from meshd.store.bell import Write
from meshd.store.errors import DatabaseLost, StoreError
from meshd.store.schema import MIGRATIONS, SCHEMA_VERSION
from meshd.store.writer import BUSY_TIMEOUT_MS, Writer

__all__ = ["DatabaseLost", "Store", "StoreError"]

log = logging.getLogger("meshd.store")
FILE_CHECK_INTERVAL = 0.1
"""Seconds between checks that the database and its WAL are still the files opened."""
START_MMAP = 1 << 30
"""Bytes of the file mapped while the start reads it whole (the integrity check, the
restore): page by page through a memory map costs half what ``read()`` calls cost
(1.7 vs 3.4 ms for the check of a 10,000-session file). Unmapped again right after:
a file cut short under a mapping kills the process with SIGBUS instead of raising
an I/O error, so the daemon never serves with one."""

T = TypeVar("T")


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class Store:
    """The profile's database: its files, its read connection, and its writer."""

    def __init__(self, path: Path, *, group_commit: bool = True) -> None:
        self.path = path
        self.writer = Writer(path, self.check_files, group_commit=group_commit)
        """Every write goes through it; it holds the writing connection once open."""
        self._reader: sqlite3.Connection | None = None
        self._read_limiter: anyio.CapacityLimiter | None = None
        self._wal = path.with_name(path.name + "-wal")
        self._ids: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None)
        self.lost: str | None = None  # why writes are refused for good (see DatabaseLost)
        self._next_check = 0.0

    # --- open (blocking; run in a thread) ----------------------------------------

    def open(self) -> None:
        """Open, migrate and check the file; open the read connection. Blocking."""
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            # The version is read before anything is set: a newer release's file is
            # refused as it was found (SPEC §8), not switched to WAL or chmod'ed first.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version <= SCHEMA_VERSION:
                self.path.chmod(0o600)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA wal_autocheckpoint=0")  # the writer thread checkpoints
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{self.path} is not a usable SQLite database ({exc}).\n"
                f"  Move it aside to start afresh: mv '{self.path}' '{self.path}.broken'"
            ) from exc
        if version > SCHEMA_VERSION:
            db.close()
            raise StoreError(
                f"{self.path} has schema version {version} (written by a newer meshd), "
                f"newer than this meshd {__version__} knows ({SCHEMA_VERSION}): upgrade "
                "meshd, or move the file aside"
            )
        try:
            for i in range(version, SCHEMA_VERSION):
                db.executescript(f"BEGIN; {MIGRATIONS[i]} PRAGMA user_version={i + 1}; COMMIT;")
            db.execute(f"PRAGMA mmap_size={START_MMAP}")
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            db.execute("PRAGMA mmap_size=0")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot migrate: {exc}") from exc
        if check != "ok":
            raise StoreError(
                f"{self.path} is damaged ({check}).\n"
                f"  Move it aside to start afresh: mv '{self.path}' '{self.path}.broken'"
            )
        self.writer.db = db
        uri = self.path.resolve().as_uri() + "?mode=ro"
        self._reader = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._reader.execute("PRAGMA busy_timeout=5000")
        self._ids = (_file_id(self.path), _file_id(self._wal))

    def check_files(self) -> None:
        """Raise :class:`DatabaseLost` if the database or its WAL is not the file we
        opened. Once lost, always lost: a restart opens a new database, and tokens
        resume above the high-water mark.

        Two ``stat`` calls, at most every :data:`FILE_CHECK_INTERVAL` (a timer, not
        every batch: in the writer thread each call hands the GIL back and forth, and
        per batch that cost 15% of a claim + release round trip). Writes acknowledged
        in the interval right after a deletion are the ones that can still be lost.
        """
        now = time.monotonic()
        if self.lost is None and now < self._next_check:
            return
        self._next_check = now + FILE_CHECK_INTERVAL
        if self.lost is None:
            db, wal = _file_id(self.path), _file_id(self._wal)
            if db != self._ids[0] or (self._ids[1] is not None and wal != self._ids[1]):
                which = self.path if db != self._ids[0] else self._wal
                self.lost = (
                    f"{which} was removed or replaced while meshd was running; "
                    "refusing every write from now on (restart meshd to start a new database)"
                )
                log.critical("DATABASE LOST: %s", self.lost)
            elif self._ids[1] is None:
                self._ids = (db, wal)
        if self.lost is not None:
            raise DatabaseLost(self.lost)

    def read_now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a blocking read on the read connection now (tests; :meth:`restore`)."""
        if self._reader is None:
            raise StoreError("database is not open")
        return fn(self._reader)

    def restore(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """The start-up restore: :meth:`read_now` through a memory map (:data:`START_MMAP`)."""
        reader = self._reader
        if reader is None:
            raise StoreError("database is not open")
        reader.execute(f"PRAGMA mmap_size={START_MMAP}")
        try:
            return fn(reader)
        finally:
            reader.execute("PRAGMA mmap_size=0")

    def close(self) -> None:
        """Close the reader, then the writer: the last connection to close folds the WAL
        into the database and removes it, which the read-only reader cannot do. Left
        behind, the WAL (megabytes after a day of snapshots) is read again to rebuild
        its index at the next start, and every read of the restore looks through it."""
        for db in (self._reader, self.writer.db):
            if db is not None:
                db.close()
        self._reader = self.writer.db = None

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking read ``fn(db, *args)`` on the read connection, in a worker thread.

        History (audit log, read messages) lives here, not in memory: reads go to
        SQLite off the event loop, one at a time, beside the writer, never behind it.
        """
        if self._read_limiter is None:
            self._read_limiter = anyio.CapacityLimiter(1)
        try:
            return await anyio.to_thread.run_sync(
                self.read_now, lambda db: fn(db, *args), limiter=self._read_limiter
            )
        except (sqlite3.Error, StoreError) as exc:
            raise StorageUnavailable(f"the database could not be read ({exc})") from exc

    # --- writing: the writer's ------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (:meth:`Writer.start`); on the event loop, after
        :meth:`open`."""
        self.writer.start()

    def commit(
        self,
        writes: list[Write],
        abandoned: Callable[[StorageUnavailable | None], None] | None = None,
    ) -> Coroutine[Any, Any, None]:
        """Write and wait until committed (:meth:`Writer.commit`)."""
        return self.writer.commit(writes, abandoned)

    def commit_soon(
        self, writes: list[Write], then: Callable[[StorageUnavailable | None], None]
    ) -> None:
        """Commit, then run ``then(error)`` on the loop (:meth:`Writer.commit_soon`)."""
        self.writer.commit_soon(writes, then)

    def submit(
        self,
        writes: list[Write],
        on_done: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        """Queue background writes without waiting (:meth:`Writer.submit`)."""
        self.writer.submit(writes, on_done)

    def flush(self) -> Coroutine[Any, Any, None]:
        """Wait until everything queued so far is committed (:meth:`Writer.flush`)."""
        return self.writer.flush()

    def stop(self) -> None:
        """Stop the writer thread after what is queued (:meth:`Writer.stop`)."""
        self.writer.stop()

    @property
    def commits(self) -> int:
        """Commits made since the store was made."""
        return self.writer.commits

    @property
    def writes(self) -> int:
        """Writes (rows) committed since the store was made."""
        return self.writer.writes

    @property
    def carried(self) -> int:
        """How many refused background writes wait to be stored first."""
        return self.writer.carried
