"""The group-commit writer: the one writing connection, its thread, and how callers wait.

One writing connection, owned by one long-lived writer thread, so SQLite never
blocks the event loop. Callers await a bare future of their own (cheaper than an
``asyncio.Event``); the thread hands finished batches back to the loop through its
:class:`~meshd.store.bell.Bell`, and the loop wakes each batch's callers (about one
thread switch each way -- the floor T).

A lone write someone waits for is committed on the event loop's own thread when the
writer is idle (:meth:`Writer._inline`): nothing else is ready to run, so the loop would
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

Background writes (:meth:`Writer.submit`: expiry, deaths, ttl ends, snapshots)
describe changes memory has *already* made and nobody can take back. When the
disk refuses them they are carried: every later batch starts with them, so
nothing committed afterwards can overtake them (a release refused by a full
disk followed by someone else's grant would otherwise leave two holders on disk
after a restart). Acknowledged writes (:meth:`Writer.commit`) are never carried:
their caller is told UNAVAILABLE and undoes or never applies them.

The :class:`~meshd.store.db.Store` opens the connection and hands it over
(:attr:`Writer.db`); it closes it, after :meth:`Writer.stop`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from meshd.protocol.errors import StorageUnavailable
from meshd.store.bell import Bell, Pending, Write, wake
from meshd.store.errors import StoreError
from meshd.store.schema import SYNC_KINDS, WRITERS

log = logging.getLogger("meshd.store")

BUSY_TIMEOUT_MS = 5000
"""How long the writer thread waits for another connection's write lock."""
CHECKPOINT_COMMITS = 250
"""Commits between two checkpoints of the WAL, run by the writer thread (PASSIVE, as
SQLite's automatic one is): a claim's commit writes about 4 pages, so this is about
SQLite's own default of one checkpoint every 1,000 pages."""
CHECKPOINT_WRITES = 5000
"""Or writes (rows) since the last checkpoint, whichever comes first: a snapshot of
10,000 sessions is one commit of many pages."""

_STOP = Pending([])
_CHECKPOINT = Pending([])  # wakes the writer to checkpoint after inline commits


class Writer:
    """The writing connection's thread, its queue, and the callers waiting on it.

    ``check_files`` runs before each transaction and raises (a
    :class:`~meshd.store.errors.DatabaseLost`) when the files are no longer the
    ones opened: the refusal every caller of that batch is told.
    """

    def __init__(
        self, path: Path, check_files: Callable[[], None], *, group_commit: bool = True
    ) -> None:
        self.path = path
        self.check_files = check_files
        self.group_commit = group_commit
        self.db: sqlite3.Connection | None = None
        """The writing connection, opened and closed by the store."""
        self._queue: queue.SimpleQueue[list[Pending]] = queue.SimpleQueue()
        self._gather: list[Pending] = []  # this loop turn's writes, handed over at its end
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._bell = Bell()  # rung by the writer thread after each batch
        self._carry: list[Pending] = []  # refused background writes, retried first
        self._busy = threading.Lock()
        """Held while the connection writes (the writer thread's batch, or an inline
        commit on the loop): one writer at a time."""
        self._serving = False  # the writer thread runs: inline commits may be made
        self._checked = (0, 0)  # (commits, writes) at the last checkpoint
        self.commits = 0
        self.writes = 0

    def start(self) -> None:
        """Start the writer thread; call on the event loop, once :attr:`db` is open."""
        self._loop = asyncio.get_running_loop()
        self._bell.open(self._loop)
        self._thread = threading.Thread(target=self._writer, name="meshd-store", daemon=True)
        self._thread.start()
        self._serving = True

    # --- callers (on the event loop) ------------------------------------------------

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
        pending = Pending(writes, waiter=waiter)
        self._enqueue(pending)
        try:
            await waiter
        except asyncio.CancelledError:
            if abandoned is not None:
                if waiter.cancelled():  # not committed yet: told by wake
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
            Pending(writes, waiter=waiter, on_done=lambda error: then(self._refusal(error)))
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
            self._enqueue(Pending(writes, on_done=on_done))
        elif on_done is not None:
            on_done(None)

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (shutdown)."""
        if self._thread is None or not self._thread.is_alive():
            self._drain_inline()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._enqueue(Pending([], waiter=waiter))
        await waiter

    def stop(self) -> None:
        """Stop the writer thread after what is queued (blocking, short)."""
        self._serving = False
        if self._thread is not None and self._thread.is_alive():
            self._handoff()
            self._queue.put([_STOP])
            self._thread.join(timeout=10)
        if self._thread is None or not self._thread.is_alive():  # else it may still ring
            self._bell.close()

    @property
    def carried(self) -> int:
        """How many refused background writes wait to be stored first."""
        return sum(len(p.writes) for p in self._carry)

    # --- handing writes over ----------------------------------------------------------

    def _enqueue(self, p: Pending) -> None:
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
        p, db = self._gather[0], self.db
        if (
            db is None
            or not self._serving
            or not p.writes
            or p.on_done is not None
            or self._carry
            or self._bell.done
            or not self._queue.empty()
            or any(w[0] in SYNC_KINDS for w in p.writes)
            or not self._busy.acquire(blocking=False)
        ):
            return False
        try:
            if not _begin_now(db):
                return False
            self._gather = []
            self._run_batch([p], wake)
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
        db = self.db
        if db is None:
            return
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:  # the next one tries again; commits go on
            log.warning("WAL checkpoint failed: %s", exc)

    def _run_batch(
        self, batch: list[Pending], tell: Callable[[list[Pending]], None] | None = None
    ) -> None:
        """Commit ``batch`` and have its callers told (``tell``: by default through the
        loop's bell, as the writer thread must)."""
        carry, self._carry = self._carry, []
        error = self._commit_all([*carry, *(p for p in batch if p.writes)])
        if error is not None:  # keep what memory already did, in order, for the next batch
            self._carry = [*carry, *(Pending(p.writes) for p in batch if _background(p))]
            if self._carry:
                log.error("%d background writes kept, to store first later", self.carried)
            for p in batch:
                if p.writes:
                    p.error = error
        (tell or self._bell.tell)(batch)

    def _commit_all(self, writes: list[Pending]) -> BaseException | None:
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
                        self._carry.append(Pending(p.writes))
                except Exception as exc:
                    p.error = exc
        return None

    def _apply(self, batch: Iterable[Pending]) -> None:
        db = self.db
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


def _background(p: Pending) -> bool:
    """Writes nobody waits for: memory has made these changes already."""
    return bool(p.writes) and p.waiter is None
