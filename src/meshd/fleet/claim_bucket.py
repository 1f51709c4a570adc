"""Reading and writing the fleet's claims bucket: compare-and-set, patient under load.

The records mean what :mod:`meshd.fleet.claim_records` says (pure); this module is
how one record is read, written over a revision, created or trimmed, through the
link's KV bucket. It holds no state: :class:`meshd.fleet.claims.FleetClaims` (the
requests) and :class:`meshd.fleet.claim_upkeep.ClaimUpkeep` (lease, reconcile,
watch) both write through it.

A write that times out may still have landed (a loaded server fsyncs every write),
so each retry reads first and recognises its own entry; a try gives up after
:data:`PATIENCE` seconds of timeouts or :data:`MAX_TRIES` lost races. A
:class:`Commit` is one acquire's commit record, sent with its record's write or after.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime

import anyio
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from meshd.fleet.claim_records import Entry, Record, Seen, Step
from meshd.fleet.link import FleetDown, FleetLink, describe

log = logging.getLogger("meshd.fleet.claims")

BUCKET = "claims"
MAX_TRIES = 200
"""Compare-and-set attempts on one record before the request gives up (UNAVAILABLE):
each failed attempt means another request made progress on that record."""

TIMEOUTS: tuple[type[Exception], ...] = (TimeoutError, nats.errors.TimeoutError)
PATIENCE = 10.0
"""Seconds one step of an acquire keeps trying after requests time out (a loaded
server fsyncing every write): a write that timed out may have landed, so each try
reads first and recognises its own entry."""

NATS_ERRORS: tuple[type[Exception], ...] = (
    nats.errors.Error,
    nats.js.errors.Error,
    TimeoutError,
    OSError,
)

FLEET_ERRORS: tuple[type[Exception], ...] = (FleetDown, *NATS_ERRORS)


async def together(*aws: Awaitable[None]) -> None:
    """Run ``aws`` at once, until all are done: the writes of one claim or release,
    sent in this order (most often in one flush).

    The first runs in this task, the others in plain tasks started at the next pass
    of the event loop, after the first has sent its request. Their replies come just
    after the first's: this task waits one pass of the loop for them where a task
    group's end waited two, and spawns no anyio task (docs/PERFORMANCE.md, "Fleet
    claim + release"). Cancelled, or failing, the others are cancelled and waited for
    before it raises."""
    if not aws:
        return
    tasks = [asyncio.ensure_future(aw) for aw in aws[1:]]
    try:
        await aws[0]
        for task in tasks:
            await task
    except BaseException:
        for task in tasks:
            task.cancel()
        if tasks:
            with anyio.CancelScope(shield=True):
                await asyncio.wait(tasks)
        raise


def gid_in(gids: set[str]) -> Callable[[Entry], bool]:
    """An entry filter: the entries of these requests."""
    return lambda e: e.gid in gids


async def open_bucket(link: FleetLink, *, watch: bool = False) -> KeyValue:
    """The claims bucket, bound (on the link's watch connection with ``watch``: for
    watches only, and never created there); :class:`FleetDown` when the server
    cannot say."""
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            if watch:
                return await link.watch_kv(BUCKET)
            return await link.kv(BUCKET, history=1)
        except TIMEOUTS as exc:  # binding asks the server: patient under load too
            if time.monotonic() > deadline:
                raise FleetDown(describe(exc)) from exc
        except NATS_ERRORS as exc:
            raise FleetDown(describe(exc)) from exc


async def made_at(js: JetStreamContext, name: str) -> datetime | None:
    """When KV bucket ``name``'s stream was made: which bucket of that name it is.

    A watch (an ordered consumer) follows one stream by its sequences. Deleted and
    made again (``nats kv del`` and a new one, a server that lost its JetStream
    store), the bucket keeps its name but starts again at revision 1, and a watch of
    the old one goes on (nats-py re-creates its consumer after the old one's
    stream went quiet, past the old one's sequences): it misses every record
    the new bucket had until its revisions pass the old ones'. The stream's creation
    time survives a server restart with its store and changes with a new stream
    (tests/fleet/test_bucket_lost.py); :class:`FleetDown`-family errors as any
    JetStream request (``NotFoundError``: there is no such bucket now)."""
    info = await js.stream_info(f"KV_{name}")
    return info.created


async def replaced(js: JetStreamContext, name: str, born: datetime | None) -> bool:
    """Whether bucket ``name`` is no longer the one :func:`made_at` said was made at
    ``born``: deleted, or deleted and made again. A request that fails otherwise
    (a timeout, the link dropping) says no: asked again at the next look, and a
    link that drops is noticed by whoever watches it."""
    try:
        return await made_at(js, name) != born
    except nats.js.errors.NotFoundError:
        return True
    except NATS_ERRORS as exc:
        log.debug("fleet: is the claims bucket the same one: %s", describe(exc))
        return False


async def read(kv: KeyValue, name: str, seen: Seen | None = None) -> tuple[Record, int]:
    """A record and its revision (0: it was never written); ``seen`` learns it."""
    try:
        entry = await kv.get(name)
    except nats.js.errors.KeyNotFoundError as exc:
        rev = exc.entry.revision if exc.entry is not None else 0
        record, rev = Record(), rev or 0
    else:
        record, rev = Record.decode(entry.value), entry.revision or 0
        if seen is not None:
            seen.now(name, record, rev, raw=entry.value or b"")
            return record, rev
    if seen is not None:
        seen.now(name, record, rev)
    return record, rev


async def write(
    kv: KeyValue, name: str, record: Record, last: int, seen: Seen | None = None
) -> int:
    """Compare-and-set ``record`` over revision ``last``: its new revision, or 0 if
    someone was first; ``seen`` learns what was written."""
    raw = record.encode()
    try:
        rev = int(await kv.update(name, raw, last=last))
    except nats.js.errors.KeyWrongLastSequenceError:
        return 0
    if seen is not None:
        seen.wrote(name, record, rev, raw)
    return rev


def lease_key(host: str) -> str:
    """The KV key of ``host``'s lease (a dot would split the key)."""
    return "l." + host.replace(".", "_d")


async def alive(kv: KeyValue, host: str) -> bool:
    """Whether ``host``'s lease is there; a read that times out counts as alive
    (the safe answer: its entries are kept)."""
    try:
        await kv.get(lease_key(host))
    except nats.js.errors.KeyNotFoundError:
        return False
    except TIMEOUTS:
        return True
    return True


async def lease_now(kv: KeyValue, host: str) -> int:
    """The revision of ``host``'s lease now (0: none): a previous run's lease is adopted."""
    try:
        return (await kv.get(lease_key(host))).revision or 0
    except nats.js.errors.KeyNotFoundError as exc:  # a delete or purge marker has one
        return (exc.entry.revision or 0) if exc.entry is not None else 0


async def create(kv: KeyValue, name: str, value: bytes) -> int:
    """Create ``name`` (a commit record ``g.<gid>``, whose revision is the token, or
    a wait record ``w.<gid>``, the ticket). A create that timed out may have
    landed; then the record is there with its revision."""
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            return int(await kv.create(name, value))
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # an earlier try that timed out created it
        except TIMEOUTS:
            if time.monotonic() > deadline:
                raise
        try:
            return int((await kv.get(name)).revision or 0)
        except nats.js.errors.KeyNotFoundError:
            if time.monotonic() > deadline:
                raise
        except TIMEOUTS:
            if time.monotonic() > deadline:
                raise


class Commit:
    """The commit record ``g.<gid>`` of one acquire: its revision is the set's token.

    A set of one record (one key not under a shared folder: the common case) sends
    the commit along with that record's compare-and-set instead of after it, saving
    a round trip: the commit is sent after the version the write is decided on was
    seen, so its revision is above that version's -- above the release of any
    previous holder -- and it holds nothing alone: ``claim.validate`` needs the
    holder's entry in the record too. Its token is kept only if that very write
    landed; otherwise (a lost race, a timeout) the commit is deleted and made again
    once the entry is in, so the token is above whatever the record became
    meanwhile (docs/FLEET.md, "Fencing tokens"). A set of several records keeps
    the commit after its last entry: until then no key of it validates.
    """

    def __init__(self, kv: KeyValue, name: str, value: bytes, *, alongside: bool) -> None:
        self.kv = kv
        self.name = name
        self.value = value
        self.alongside = alongside
        self.tried = False
        """A commit was sent: it may be in the bucket (deleted if the acquire fails)."""
        self._token = 0
        self._failed: Exception | None = None

    async def with_write(self, write: Awaitable[int]) -> int:
        """Run the record's compare-and-set ``write`` (with the commit beside it the
        first time, for a set of one record): the revision written, 0 if lost."""
        if not self.alongside:
            return await write
        self.alongside = False
        self.tried = True
        out: dict[str, int | Exception] = {}

        async def run(what: str, aw: Awaitable[int]) -> None:
            try:
                out[what] = await aw
            except Exception as exc:  # both run to their end: a commit cut short may land
                out[what] = exc

        commit = run("commit", create(self.kv, self.name, self.value))
        await together(run("write", write), commit)  # the write sent first
        written, made = out["write"], out["commit"]
        if isinstance(written, int) and written:
            if isinstance(made, Exception):
                self._failed = made  # raised once the entry counts as written (undone)
            else:
                self._token = made
            return written
        await self.kv.delete(self.name)  # its token may be below the record's now
        if isinstance(written, Exception):
            raise written
        if isinstance(made, Exception):
            raise made
        return 0

    async def token(self) -> int:
        """The set's token, once every entry is written: the commit sent along, or one
        made now."""
        if self._failed is not None:
            raise self._failed
        if self._token:
            return self._token
        if not self.tried:
            self.tried = True
            return await create(self.kv, self.name, self.value)
        # One was sent along and not kept; its delete may not have landed, and create
        # would adopt it, revision and all: a new version of it gets a new revision.
        deadline = time.monotonic() + PATIENCE
        while True:
            try:  # a try that timed out and lands after all lands before the next one
                return int(await self.kv.put(self.name, self.value))
            except TIMEOUTS:
                if time.monotonic() > deadline:
                    raise


async def undo(kv: KeyValue, steps: Iterable[Step], gid: str, seen: Seen | None = None) -> None:
    """Take ``gid``'s entries out of ``steps``' records (its holds and intents)."""
    for step in steps:
        where = "hq" if step.role == "hold" else "d"
        await drop(kv, step.name, lambda e: e.gid == gid, where, seen)


async def drop(
    kv: KeyValue, name: str, gone: Callable[[Entry], bool], where: str = "hdq",
    seen: Seen | None = None,
) -> None:  # fmt: skip
    """Take every entry ``gone`` is true for out of record ``name`` (lists ``where``).

    With ``seen``, the first try writes over the version it last saw, when that
    version holds such entries (no read: the compare-and-set fails if the record
    moved on); a version without any is not trusted (it may be stale), nor a lost
    race: the record is read then."""
    hint = seen.get(name) if seen is not None else None
    if hint is not None:
        new = hint[0].without(gone, where)
        try:
            if new != hint[0] and await write(kv, name, new, hint[1], seen):
                return
        except TIMEOUTS:
            pass  # it may have landed: the read below says
    deadline = time.monotonic() + PATIENCE
    for _ in range(MAX_TRIES):
        try:  # each try reads first: a write of ours that timed out shows there
            record, rev = await read(kv, name, seen)
            new = record.without(gone, where)
            if new == record or await write(kv, name, new, rev, seen):
                return
        except TIMEOUTS:
            if time.monotonic() > deadline:
                raise
    raise FleetDown(f"{name}: too many concurrent changes")


async def queue(kv: KeyValue, name: str, me: Entry, seen: Seen | None = None) -> None:
    """Add waiter ``me`` to record ``name``'s line (over the version ``seen`` last
    saw first: a compare-and-set, so a stale one only loses the race)."""
    hint = seen.get(name) if seen is not None else None
    if hint is not None:
        try:
            if await write(kv, name, hint[0].adding("q", me), hint[1], seen):
                return
        except TIMEOUTS:
            pass  # it may have landed: adding it again below changes nothing
    deadline = time.monotonic() + PATIENCE
    for _ in range(MAX_TRIES):
        try:  # adding the same entry again changes nothing: a retry is harmless
            record, rev = await read(kv, name, seen)
            if await write(kv, name, record.adding("q", me), rev, seen):
                return
        except TIMEOUTS:
            if time.monotonic() > deadline:
                raise
    raise FleetDown(f"{name}: too many concurrent changes")


async def scan(kv: KeyValue, pattern: str) -> dict[str, tuple[bytes | None, int]]:
    """Every live key matching ``pattern`` with its value and revision."""
    out: dict[str, tuple[bytes | None, int]] = {}
    watcher = await kv.watch(pattern, ignore_deletes=True)
    try:
        async for entry in watcher:
            if entry is None:
                break
            out[entry.key] = (entry.value, entry.revision or 0)
            if not entry.delta:
                break
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    return out


async def forget_wait(kv: KeyValue, gid: str) -> None:
    """Delete ``gid``'s wait record (``w.<gid>``); a failure is only logged."""
    try:
        await kv.delete("w." + gid)
    except NATS_ERRORS as exc:
        log.debug("fleet: deleting wait record %s: %s", gid, describe(exc))
