"""The store: open and migrate, the group-commit writer, and the read connection.

One writing connection, owned by one long-lived writer thread, so SQLite never
blocks the event loop. Callers await a bare future of their own (cheaper than an
``asyncio.Event``); the thread hands finished batches back through a queue and one
byte on a pipe the loop watches (its *bell*), and the loop wakes each batch's callers
(the daemon runs anyio on its asyncio backend). That hand-off costs about one thread
switch each way -- the floor T -- where ``anyio.to_thread`` cost four times that. The
bell replaced ``call_soon_threadsafe``, whose wake-up reads the loop's own self-pipe
until it fails (a second ``recv`` and a ``BlockingIOError`` every commit) beside the
callback it queues: ~5 µs of a lone claim round trip.

A lone write someone waits for is committed on the event loop's own thread when the
writer is idle (:meth:`Store._inline`): nothing else is ready to run, so the loop would
only wait for the writer, and the two hand-offs cost more than the commit itself,
unpinned above all, where each is a wake-up on another CPU (a durable claim + release
cost 1.45-2.2x unpinned what it cost with everything on one CPU). The commit is the
same transaction, committed before anyone is told. Checkpoints stay on the writer
thread: the connection does not checkpoint by itself (``wal_autocheckpoint=0``) and
the writer does, every :data:`CHECKPOINT_COMMITS` commits (a checkpoint syncs the
files: milliseconds the loop must not spend).

Group commit: writes made during one turn of the event loop are gathered and
handed to the writer together, once, when that turn ends (``call_soon``); the
writer takes everything queued, applies it in ONE transaction, commits, and wakes
every caller. Handing each write over at once let the writer -- woken on the
same CPU -- commit every one or two writes alone: at 100 writers a commit held
2.2 writes and group commit gained 1.2-1.7x. While a commit is in flight new
writes pile up for the next one, so N concurrent writers cost about one commit,
not N. Nothing is acknowledged before its commit returns; a failed commit wakes
its callers with :class:`~meshd.protocol.errors.StorageUnavailable`.

Writes are plain tuples ``(kind, *args)`` produced by the pure core; the static
table :data:`meshd.store.schema.WRITERS` maps each kind to its SQL, so the core
never sees SQL.

Reads (history: the audit log, read messages, handoffs, the board) go to a second,
read-only connection in a worker thread: WAL lets it read while the writer
writes, so a read never queues behind a commit, and it sees everything committed
(so everything acknowledged) before it started.

Background writes (:meth:`Store.submit`: expiry, deaths, ttl ends, snapshots)
describe changes memory has *already* made and nobody can take back. When the
disk refuses them they are carried: every later batch starts with them, so
nothing committed afterwards can overtake them (a release refused by a full
disk followed by someone else's grant would otherwise leave two holders on disk
after a restart). Acknowledged writes (:meth:`Store.commit`) are never carried:
their caller is told UNAVAILABLE and undoes or never applies them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import anyio

from meshd.protocol.errors import StorageUnavailable
from meshd.store.schema import MIGRATIONS, SCHEMA_VERSION, SYNC_KINDS, WRITERS

log = logging.getLogger("meshd.store")
FILE_CHECK_INTERVAL = 0.1
"""Seconds between checks that the database and its WAL are still the files opened."""
START_MMAP = 1 << 30
"""Bytes of the file mapped while the start reads it whole (the integrity check, the
restore): page by page through a memory map costs half what ``read()`` calls cost
(1.7 vs 3.4 ms for the check of a 10,000-session file). Unmapped again right after:
a file cut short under a mapping kills the process with SIGBUS instead of raising
an I/O error, so the daemon never serves with one."""

BUSY_TIMEOUT_MS = 5000
"""How long the writer thread waits for another connection's write lock."""
CHECKPOINT_COMMITS = 250
"""Commits between two checkpoints of the WAL, run by the writer thread (PASSIVE, as
SQLite's automatic one is): a claim's commit writes about 4 pages, so this is about
SQLite's own default of one checkpoint every 1,000 pages."""
CHECKPOINT_WRITES = 5000
"""Or writes (rows) since the last checkpoint, whichever comes first: a snapshot of
10,000 sessions is one commit of many pages."""

Write = tuple[Any, ...]
T = TypeVar("T")


class StoreError(Exception):
    """The database cannot be used at all (corrupt, newer schema); refuse to start."""


class DatabaseLost(sqlite3.OperationalError):
    """The database file or its WAL was removed or replaced under the running daemon.

    SQLite would go on writing to the unlinked files and every write acknowledged
    from then on would be gone at the next start: refuse them all (UNAVAILABLE).
    """


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class _Pending:
    """Writes handed to the writer thread, and how to tell the caller."""

    __slots__ = ("error", "on_done", "waiter", "writes")

    def __init__(
        self,
        writes: list[Write],
        *,
        waiter: asyncio.Future[None] | None = None,
        on_done: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        self.writes = writes
        self.waiter = waiter
        self.on_done = on_done
        self.error: BaseException | None = None


_STOP = _Pending([])
_CHECKPOINT = _Pending([])  # wakes the writer to checkpoint after inline commits


class Store:
    """The profile's database and its writer."""

    def __init__(self, path: Path, *, group_commit: bool = True) -> None:
        self.path = path
        self.group_commit = group_commit
        self._db: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._read_limiter: anyio.CapacityLimiter | None = None
        self._queue: queue.SimpleQueue[list[_Pending]] = queue.SimpleQueue()
        self._gather: list[_Pending] = []  # this loop turn's writes, handed over at its end
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._done: collections.deque[list[_Pending]] = collections.deque()
        """Batches the writer finished, for the loop to wake (see :meth:`_rung`)."""
        self._bell: tuple[int, int] | None = None
        """The pipe (read end, write end) the writer rings after each batch."""
        self._carry: list[_Pending] = []  # refused background writes, retried first
        self._wal = path.with_name(path.name + "-wal")
        self._ids: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None)
        self.lost: str | None = None  # why writes are refused for good (see DatabaseLost)
        self._next_check = 0.0
        self._busy = threading.Lock()
        """Held while the connection writes (the writer thread's batch, or an inline
        commit on the loop): one writer at a time."""
        self._serving = False  # the writer thread runs: inline commits may be made
        self._checked = (0, 0)  # (commits, writes) at the last checkpoint
        self.commits = 0
        self.writes = 0

    # --- open (blocking; run in a thread) ----------------------------------------

    def open(self) -> None:
        """Open, migrate and check the file; open the read connection. Blocking."""
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.path.chmod(0o600)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA wal_autocheckpoint=0")  # the writer thread checkpoints
            version = db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{self.path} is not a usable SQLite database ({exc}).\n"
                f"  Move it aside to start afresh: mv '{self.path}' '{self.path}.broken'"
            ) from exc
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this meshd knows "
                f"({SCHEMA_VERSION}): upgrade meshd, or move the file aside"
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
        self._db = db
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
        for db in (self._reader, self._db):
            if db is not None:
                db.close()
        self._db = self._reader = None

    # --- writing ------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread; call on the event loop, after :meth:`open`."""
        self._loop = asyncio.get_running_loop()
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self._bell = (r, w)
        self._loop.add_reader(r, self._rung)
        self._thread = threading.Thread(target=self._writer, name="meshd-store", daemon=True)
        self._thread.start()
        self._serving = True

    def _enqueue(self, p: _Pending) -> None:
        """Gather ``p`` into this loop turn's batch (handed over when the turn ends).

        A write someone waits for is handed over at once when nothing else is left to
        run in this turn (the loop's ready queue is empty, so no other request can
        join the batch before the turn ends): a lone write saves a pass of the loop
        (an ``epoll_wait`` and a callback) before the writer starts. Background writes
        always wait for the turn's end: they are queued mid-request (an end's releases)
        and a writer woken then would compete with that request's own reply.
        """
        gather = self._gather
        gather.append(p)
        if len(gather) == 1:
            loop = self._loop
            if loop is None:  # not serving yet: no turns to wait for
                self._handoff()
            elif p.waiter is not None and not getattr(loop, "_ready", True):
                # the caller waits, and this is the turn's last callback
                if not self._inline():
                    self._handoff()
            else:
                loop.call_soon(self._handoff)

    def _inline(self) -> bool:
        """Commit the turn's one gathered write here, on the loop, if the writer is idle
        and nothing is queued before it (see the module's docstring); whether it did.

        Only a caller that awaits its commit (:meth:`commit`): one told by a callback
        would be told before its request has returned. Never waiting for SQLite's
        write lock: another process holding it (a backup, a ``sqlite3`` shell) would
        stall the loop for the busy timeout, so the commit then goes to the writer,
        which waits for it off the loop. Not a write that must be
        synced (a sync costs milliseconds), nor while refused writes are carried (they
        go first, on the writer's next batch), nor while a finished batch's callers
        are still to be told (acknowledgements keep the order of the commits)."""
        p, db = self._gather[0], self._db
        if (
            db is None
            or not self._serving
            or not p.writes
            or p.on_done is not None
            or self._carry
            or self._done
            or not self._queue.empty()
            or any(w[0] in SYNC_KINDS for w in p.writes)
            or not self._busy.acquire(blocking=False)
        ):
            return False
        try:
            if not _begin_now(db):
                return False
            self._gather = []
            self._run_batch([p], _wake)
        finally:
            if db.in_transaction:  # (never left open; a commit ends it, a failure rolls back)
                db.execute("ROLLBACK")
            self._busy.release()
        if self._checkpoint_due():
            self._queue.put([_CHECKPOINT])  # the writer checkpoints, off the loop
        return True

    def _handoff(self) -> None:
        """Give the writer everything gathered so far, in the order it came."""
        if self._gather:
            batch, self._gather = self._gather, []
            self._queue.put(batch)

    async def commit(
        self,
        writes: list[Write],
        abandoned: Callable[[StorageUnavailable | None], None] | None = None,
    ) -> None:
        """Write and wait until committed; raise StorageUnavailable if it was not.

        A caller cancelled meanwhile (its connection closed) does not take the writes
        back: they are the writer's and are stored all the same. ``abandoned(error)``
        then runs on the loop once they are (or were already) committed or refused,
        so whatever the writes carried (another waiter's grant) is still told.
        """
        if not writes:
            return
        waiter = (self._loop or asyncio.get_running_loop()).create_future()
        pending = _Pending(writes, waiter=waiter)
        self._enqueue(pending)
        try:
            await waiter
        except asyncio.CancelledError:
            if abandoned is not None:
                if waiter.cancelled():  # not committed yet: told by _wake
                    pending.on_done = lambda error: abandoned(self._refusal(error))
                else:  # committed already, the cancel came before the caller ran on
                    abandoned(self._refusal(pending.error))
            raise
        if (refused := self._refusal(pending.error)) is not None:
            raise refused

    def commit_soon(
        self, writes: list[Write], then: Callable[[StorageUnavailable | None], None]
    ) -> None:
        """:meth:`commit` for a caller that does not wait in a task (a queued claim's
        record): the same foreground commit, refused writes not kept, and ``then(error)``
        run on the loop once it is committed or refused, as ``abandoned`` is."""
        if not writes:
            then(None)
            return
        waiter = (self._loop or asyncio.get_running_loop()).create_future()
        self._enqueue(
            _Pending(writes, waiter=waiter, on_done=lambda error: then(self._refusal(error)))
        )

    def _refusal(self, error: BaseException | None) -> StorageUnavailable | None:
        """What a caller is told of a commit that failed with ``error`` (None: it did not)."""
        if error is None:
            return None
        return StorageUnavailable(
            f"the database could not store this change ({error}); nothing was acknowledged",
            {"path": str(self.path)},
        )

    def submit(
        self,
        writes: list[Write],
        on_done: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        """Queue writes without waiting (snapshots, expiry found by the sweeper).

        ``on_done(error)`` runs on the event loop once they are committed (or failed).
        """
        if writes:
            self._enqueue(_Pending(writes, on_done=on_done))
        elif on_done is not None:
            on_done(None)

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

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (shutdown)."""
        if self._thread is None or not self._thread.is_alive():
            self._drain_inline()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._enqueue(_Pending([], waiter=waiter))
        await waiter

    def stop(self) -> None:
        """Stop the writer thread after what is queued (blocking, short)."""
        self._serving = False
        if self._thread is not None and self._thread.is_alive():
            self._handoff()
            self._queue.put([_STOP])
            self._thread.join(timeout=10)
        self._unbell()

    def _unbell(self) -> None:
        """Stop watching the bell and close it; wake what the writer finished last.
        A writer that did not stop in time keeps its pipe: it may still ring, and a
        closed descriptor's number may be another file's by then."""
        bell = self._bell
        if bell is None or (self._thread is not None and self._thread.is_alive()):
            return
        self._bell = None
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(bell[0])
        for fd in bell:
            os.close(fd)
        self._rung()

    def _drain_inline(self) -> None:
        self._handoff()
        batch = []
        while not self._queue.empty():
            batch += self._queue.get_nowait()
        if batch:
            self._run_batch(batch)

    # --- the writer thread ----------------------------------------------------------

    def _writer(self) -> None:
        """Take everything queued, commit it in one transaction, wake every caller."""
        q = self._queue
        while True:
            batch = q.get()
            with self._busy:
                while not q.empty():
                    batch += q.get_nowait()
                stop = _STOP in batch
                if stop or _CHECKPOINT in batch:
                    batch = [p for p in batch if p is not _STOP and p is not _CHECKPOINT]
                if not batch:
                    pass
                elif self.group_commit:
                    self._run_batch(batch)
                else:  # the bench's baseline: every caller's writes in a commit of their own
                    for p in batch:
                        self._run_batch([p])
                if self._checkpoint_due():
                    self._checkpoint()
            if stop:
                return

    def _checkpoint_due(self) -> bool:
        commits, writes = self._checked
        return (
            self.commits - commits >= CHECKPOINT_COMMITS
            or self.writes - writes >= CHECKPOINT_WRITES
        )

    def _checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database (the writer thread, PASSIVE:
        it never waits for a reader), as SQLite's automatic checkpoint did."""
        self._checked = (self.commits, self.writes)
        db = self._db
        if db is None:
            return
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:  # the next one tries again; commits go on
            log.warning("WAL checkpoint failed: %s", exc)

    @property
    def carried(self) -> int:
        """How many refused background writes wait to be stored first."""
        return sum(len(p.writes) for p in self._carry)

    def _run_batch(
        self, batch: list[_Pending], tell: Callable[[list[_Pending]], None] | None = None
    ) -> None:
        """Commit ``batch`` and have its callers told (``tell``: by default through the
        loop's bell, as the writer thread must)."""
        carry, self._carry = self._carry, []
        error = self._commit_all([*carry, *(p for p in batch if p.writes)])
        if error is not None:  # keep what memory already did, in order, for the next batch
            self._carry = [*carry, *(_Pending(p.writes) for p in batch if _background(p))]
            if self._carry:
                log.error("%d background writes kept, to store first later", self.carried)
            for p in batch:
                if p.writes:
                    p.error = error
        (tell or self._tell)(batch)

    def _tell(self, batch: list[_Pending]) -> None:
        """Have the loop wake ``batch``'s callers: queue it and ring the bell (one byte;
        a full pipe means the loop has bytes to read already). Without a running loop
        (not started, stopped, closed) they are woken here."""
        bell, loop = self._bell, self._loop
        if bell is None or loop is None or loop.is_closed():
            _wake(batch)
            return
        self._done.append(batch)
        try:  # noqa: SIM105 (suppress() would build a context manager every batch)
            os.write(bell[1], b"\0")
        except OSError:  # full (the loop has a ring to read already), or closed
            pass

    def _rung(self) -> None:
        """On the loop: wake the callers of every batch the writer finished, in order.

        The bell is read once, before the queue: a batch queued after that read rings
        again, so none is left behind (at worst a ring finds the queue empty)."""
        if self._bell is not None:
            try:  # noqa: SIM105 (suppress() would build a context manager every batch)
                os.read(self._bell[0], 4096)
            except BlockingIOError:
                pass
        done = self._done
        while done:
            _wake(done.popleft())

    def _commit_all(self, writes: list[_Pending]) -> BaseException | None:
        """Commit ``writes`` in one transaction; the error that refused them all, if any."""
        if not writes:
            return None
        try:
            self._apply(writes)
        except sqlite3.OperationalError as exc:  # disk full, read-only, I/O error
            log.error("commit failed, %d callers told UNAVAILABLE: %s", len(writes), exc)
            return exc
        except Exception:  # a bad write (a bug): only its own caller should fail
            log.exception("a batch of %d failed; committing each caller alone", len(writes))
            for p in writes:
                try:
                    self._apply([p])
                except sqlite3.OperationalError as exc:
                    p.error = exc
                    if _background(p):
                        self._carry.append(_Pending(p.writes))
                except Exception as exc:
                    p.error = exc
        return None

    def _apply(self, batch: Iterable[_Pending]) -> None:
        db = self._db
        if db is None:
            raise StoreError("database is closed")
        begun = db.in_transaction  # the loop holds the write lock already (_inline)
        if not begun:
            self.check_files()
        n = 0
        sync = any(w[0] in SYNC_KINDS for p in batch for w in p.writes)
        if sync:
            db.execute("PRAGMA synchronous=FULL")
        if not begun:
            db.execute("BEGIN IMMEDIATE")
        try:
            if begun:
                self.check_files()
            for p in batch:
                for w in p.writes:
                    WRITERS[w[0]](db, *w[1:])
                    n += 1
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            if sync:
                db.execute("PRAGMA synchronous=NORMAL")
        self.commits += 1
        self.writes += n


def _begin_now(db: sqlite3.Connection) -> bool:
    """``BEGIN IMMEDIATE`` on ``db`` without waiting: False when another connection holds
    the write lock (or the database refuses)."""
    db.execute("PRAGMA busy_timeout=0")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.Error:
        return False
    finally:
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    return True


def _background(p: _Pending) -> bool:
    """Writes nobody waits for: memory has made these changes already."""
    return bool(p.writes) and p.waiter is None


def _wake(batch: list[_Pending]) -> None:
    """On the event loop: tell each caller its batch is done.

    An ``on_done`` that raises (a bug in what it tells) is logged and the rest are
    still woken: raised out of this one callback, it left every later caller of the
    batch waiting for good.
    """
    for p in batch:
        waiter = p.waiter
        if waiter is not None and not waiter.done():  # done: its caller was cancelled
            waiter.set_result(None)
        if p.on_done is not None:
            try:
                p.on_done(p.error)
            except Exception:
                log.exception("telling a commit's outcome failed")
