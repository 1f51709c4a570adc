"""SQLite persistence: schema, migrations, group-commit writer, restore.

One connection, owned by one long-lived writer thread, so SQLite never blocks
the event loop. Callers put their writes on a ``queue.SimpleQueue`` and await an
event; the thread wakes them with one ``call_soon_threadsafe`` per batch (the
daemon runs anyio on its asyncio backend). That hand-off costs about one thread
switch each way -- the floor T -- where ``anyio.to_thread`` cost four times that.

Group commit: the writer takes everything queued, applies it in ONE
transaction, commits, and wakes every caller. While a commit is in flight new
writes pile up for the next one, so N concurrent writers cost about one commit,
not N. Nothing is acknowledged before
its commit returns; a failed commit wakes its callers with
:class:`~meshd.protocol.errors.StorageUnavailable`.

Writes are plain tuples ``(kind, *args)`` produced by the pure core; the
``_WRITERS`` table maps each kind to its SQL, so the core never sees SQL.

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
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from meshd import storage_board, storage_claims, storage_messages, storage_shared
from meshd.core.registry import Session
from meshd.protocol.errors import StorageUnavailable

log = logging.getLogger("meshd.store")

Write = tuple[Any, ...]
T = TypeVar("T")

MIGRATIONS: list[str] = [
    # 1: sessions and meta
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value ANY) STRICT;
    CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        record BLOB NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        end_reason TEXT
    ) STRICT;
    CREATE INDEX sessions_live ON sessions(session_id) WHERE ended_at IS NULL;
    """,
    # 2: claims, audit log
    storage_claims.DDL,
    # 3: messages and handoffs
    storage_messages.DDL,
    # 4: the board's changed files
    storage_board.DDL,
    # 5: shared work: notes, signals, the ledger, board posts and marks
    storage_shared.DDL,
]
SCHEMA_VERSION = len(MIGRATIONS)

_encode = msgspec.json.Encoder().encode
_decode_session = msgspec.json.Decoder(Session).decode


class StoreError(Exception):
    """The database cannot be used at all (corrupt, newer schema); refuse to start."""


def _session_put(db: sqlite3.Connection, s: Session) -> None:
    db.execute(
        "INSERT INTO sessions(session_id, record, started_at) VALUES (?, ?, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET record=excluded.record, "
        "started_at=excluded.started_at, ended_at=NULL, end_reason=NULL",
        (s.session_id, _encode(s), s.started_at),
    )


def _session_snapshot(db: sqlite3.Connection, s: Session) -> None:
    db.execute(
        "UPDATE sessions SET record=? WHERE session_id=? AND ended_at IS NULL",
        (_encode(s), s.session_id),
    )


def _session_end(db: sqlite3.Connection, sid: str, at: float, reason: str) -> None:
    db.execute(
        "UPDATE sessions SET ended_at=?, end_reason=? WHERE session_id=? AND ended_at IS NULL",
        (at, reason, sid),
    )


def _meta_set(db: sqlite3.Connection, key: str, value: Any) -> None:
    db.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        (key, value),
    )


_WRITERS: dict[str, Callable[..., None]] = {
    "session.put": _session_put,
    "session.snapshot": _session_snapshot,
    "session.end": _session_end,
    "meta.set": _meta_set,
    "claim.audit": storage_claims.write_audit,
    "fencing.reserve": storage_claims.write_fencing,
    "board.changed": storage_board.write_changes,
    "board.prune": storage_board.write_prune,
}
# Write kinds that must survive power loss: their batch commits with synchronous=FULL.
SYNC_KINDS: set[str] = {"fencing.reserve"}


def register_writer(kind: str, fn: Callable[..., None]) -> None:
    """Let a domain module add the SQL for its own write kinds."""
    _WRITERS[kind] = fn


class _Pending:
    """Writes (or a read) handed to the writer thread, and how to tell the caller."""

    __slots__ = ("done", "error", "on_done", "read", "result", "writes")

    def __init__(
        self,
        writes: list[Write],
        *,
        done: asyncio.Event | None = None,
        on_done: Callable[[BaseException | None], None] | None = None,
        read: Callable[[sqlite3.Connection], Any] | None = None,
    ) -> None:
        self.writes = writes
        self.done = done
        self.on_done = on_done
        self.read = read
        self.result: Any = None
        self.error: BaseException | None = None


_STOP = _Pending([])


@dataclass
class Restored:
    """What the database held at start."""

    sessions: list[Session]
    meta: dict[str, Any]
    claims: list[storage_claims.StoredClaim] = field(default_factory=list)


class Store:
    """The profile's database and its writer."""

    def __init__(self, path: Path, *, group_commit: bool = True) -> None:
        self.path = path
        self.group_commit = group_commit
        self._db: sqlite3.Connection | None = None
        self._queue: queue.SimpleQueue[_Pending] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._carry: list[_Pending] = []  # refused background writes, retried first
        self.commits = 0
        self.writes = 0

    # --- open / restore (blocking; run in a thread) ------------------------------

    def open(self) -> Restored:
        """Open, migrate and read back everything live. Blocking."""
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.path.chmod(0o600)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
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
            check = db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot migrate: {exc}") from exc
        if check != "ok":
            raise StoreError(
                f"{self.path} is damaged ({check}).\n"
                f"  Move it aside to start afresh: mv '{self.path}' '{self.path}.broken'"
            )
        self._db = db
        return self._restore(db)

    @staticmethod
    def _restore(db: sqlite3.Connection) -> Restored:
        sessions = []
        for (record,) in db.execute("SELECT record FROM sessions WHERE ended_at IS NULL"):
            try:
                sessions.append(_decode_session(record))
            except msgspec.DecodeError:
                log.warning("skipping an unreadable session record")
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        return Restored(sessions=sessions, meta=meta, claims=storage_claims.load_claims(db))

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- writing ------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread; call on the event loop, after :meth:`open`."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._writer, name="meshd-store", daemon=True)
        self._thread.start()

    async def commit(self, writes: list[Write]) -> None:
        """Write and wait until committed; raise StorageUnavailable if it was not."""
        if not writes:
            return
        pending = _Pending(writes, done=asyncio.Event())
        self._queue.put(pending)
        assert pending.done is not None
        await pending.done.wait()
        if pending.error is not None:
            raise StorageUnavailable(
                f"the database could not store this change ({pending.error}); "
                "nothing was acknowledged",
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
            self._queue.put(_Pending(writes, on_done=on_done))
        elif on_done is not None:
            on_done(None)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking read ``fn(db, *args)`` in the writer thread, between commits.

        History (audit log, read messages) lives here, not in memory: reads go to
        SQLite off the event loop.
        """
        pending = _Pending([], done=asyncio.Event(), read=lambda db: fn(db, *args))
        self._queue.put(pending)
        assert pending.done is not None
        await pending.done.wait()
        if pending.error is not None:
            raise StorageUnavailable(f"the database could not be read ({pending.error})")
        return pending.result  # type: ignore[no-any-return]

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (shutdown)."""
        if self._thread is None or not self._thread.is_alive():
            self._drain_inline()
            return
        marker = _Pending([], done=asyncio.Event())
        self._queue.put(marker)
        assert marker.done is not None
        await marker.done.wait()

    def stop(self) -> None:
        """Stop the writer thread after what is queued (blocking, short)."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout=10)

    def _drain_inline(self) -> None:
        batch = []
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        if batch:
            self._run_batch(batch)

    # --- the writer thread ----------------------------------------------------------

    def _writer(self) -> None:
        """Take everything queued, commit it in one transaction, wake every caller."""
        q = self._queue
        while True:
            batch = [q.get()]
            if self.group_commit:
                while not q.empty():
                    batch.append(q.get_nowait())
            stop = _STOP in batch
            self._run_batch([p for p in batch if p is not _STOP])
            if stop:
                return

    @property
    def carried(self) -> int:
        """How many refused background writes wait to be stored first."""
        return sum(len(p.writes) for p in self._carry)

    def _run_batch(self, batch: list[_Pending]) -> None:
        carry, self._carry = self._carry, []
        error = self._commit_all([*carry, *(p for p in batch if p.writes)])
        if error is not None:  # keep what memory already did, in order, for the next batch
            self._carry = [*carry, *(_Pending(p.writes) for p in batch if _background(p))]
            if self._carry:
                log.error("%d background writes kept, to store first later", self.carried)
        for p in batch:
            if p.read is not None:
                try:
                    p.result = p.read(self._db)  # type: ignore[arg-type]
                except Exception as exc:
                    p.error = exc
            elif p.writes and error is not None:
                p.error = error
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(_wake, batch)
            except RuntimeError:  # the loop closed meanwhile
                _wake(batch)
        else:
            _wake(batch)

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
        n = 0
        sync = any(w[0] in SYNC_KINDS for p in batch for w in p.writes)
        if sync:
            db.execute("PRAGMA synchronous=FULL")
        db.execute("BEGIN IMMEDIATE")
        try:
            for p in batch:
                for w in p.writes:
                    _WRITERS[w[0]](db, *w[1:])
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


def _background(p: _Pending) -> bool:
    """Writes nobody waits for: memory has made these changes already."""
    return bool(p.writes) and p.done is None


def _wake(batch: list[_Pending]) -> None:
    """On the event loop: tell each caller its batch is done."""
    for p in batch:
        if p.done is not None:
            p.done.set()
        if p.on_done is not None:
            p.on_done(p.error)
