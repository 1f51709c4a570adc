"""Fleet-wide claims: decided in the profile's KV bucket by compare-and-set (SPEC §12).

:class:`FleetClaims` speaks the protocol docs/FLEET.md ("Fleet-wide claims")
describes, over the link's ``claims`` bucket; the records and the conflict rule
are in :mod:`meshd.fleet.claim_records` (pure). The claims handler asks it
*before* the core records a grant, and hands the core the KV token, so the core
stays pure and a fleet grant is committed to SQLite before the reply like any other.

In short: a set writes an entry into the record of each resource it touches, in
one global order, rolling back on a conflict; then creates its commit record,
whose revision is the set's fencing token. Each host keeps a lease key alive;
entries of a host whose lease ran out are dropped by the next reader. A watch on
the records wakes waiters and tells this host when another took a claim from it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import anyio
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from meshd.core.settings import FleetSettings
from meshd.fleet.claim_records import (
    Entry,
    Mode,
    Record,
    Step,
    blockers,
    plan,
    record_name,
    record_resource,
    resource_of,
    shared_root,
)
from meshd.fleet.link import FleetDown, FleetLink, describe
from meshd.keys import Key

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

BACK_POLL = 0.1
"""Seconds between two looks at the link by a request waiting for the fleet to be back."""

NATS_ERRORS: tuple[type[Exception], ...] = (
    nats.errors.Error,
    nats.js.errors.Error,
    TimeoutError,
    OSError,
)

FLEET_ERRORS: tuple[type[Exception], ...] = (FleetDown, *NATS_ERRORS)


WAIT_RECORD = Step("w.", "", "hold")
"""In the release backlog: delete the request's wait record (``w.<gid>``)."""
COMMIT_RECORD = Step("g.", "", "hold")
"""In the release backlog: delete the set's commit record (``g.<gid>``): its token dies."""


def _gid_in(gids: set[str]) -> Callable[[Entry], bool]:
    return lambda e: e.gid in gids


class Local(Protocol):
    """What the fleet needs from this host's lock table (the claims handler)."""

    def fleet_claims(self) -> list[tuple[str, Key, Mode, int]]:
        """This host's live claims on fleet-wide keys: (session, key, mode, token)."""
        ...

    def fleet_lost(self, session_id: str, resources: list[str], token: int, how: str) -> None:
        """The fleet took these claims from ``session_id`` (stolen, lease lost, conflict)."""
        ...

    def related(self, a: str, b: str) -> bool:
        """Same session, or one descends from the other (this host's sessions)."""
        ...

    def fleet_healed(self, session_id: str, keys: list[Key], old: int, new: int) -> None:
        """A local-only set is fleet-wide now, under the fleet's token ``new``."""
        ...


@dataclass(slots=True)
class FleetGrant:
    """A set this host holds in the fleet: its commit record ``gid`` and token."""

    gid: str
    session_id: str
    mode: Mode
    token: int
    keys: dict[str, Key] = field(default_factory=dict)  # resource text -> key
    revs: dict[str, int] = field(default_factory=dict)
    """Record name -> the revision that wrote this grant's entry there: the watch may
    still deliver older versions of the record, which do not count as a loss."""


@dataclass(frozen=True, slots=True)
class FleetHeld:
    """Not granted: these entries (resource, entry) keep the set out."""

    blocking: tuple[tuple[str, Entry], ...]


@dataclass(slots=True)
class FleetWaiter:
    """A request in line in the fleet: its ``w.<gid>`` record's revision is its ticket."""

    gid: str
    session_id: str
    keys: tuple[Key, ...]
    mode: Mode
    ticket: int
    since: float
    """Wall time it began to wait."""


class FleetClaims:
    """This host's side of the fleet's claims (one per profile's daemon)."""

    def __init__(self, link: FleetLink, local: Local, *, heartbeat: float) -> None:
        self.link = link
        self.local = local
        self.host = link.host
        self.roots = link.cfg.shared_paths
        self.kinds = frozenset(link.cfg.shared_kinds)
        self.lease_ttl = max(3, round(3 * heartbeat))
        """Seconds the server keeps this host's lease after its last renewal."""
        self.renew_every = self.lease_ttl / 3
        self.lose_after = 2 * self.lease_ttl / 3
        """Without a renewal for this long, this host gives its fleet claims up: before
        the server lets the lease go, whatever the delays (docs/FLEET.md)."""
        self.grants: dict[str, FleetGrant] = {}
        self.by_claim: dict[tuple[str, str], str] = {}  # (session, resource) -> gid
        self.inflight: set[str] = set()
        self.local_only: set[tuple[str, str]] = set()
        self.ready = False
        """True once this host reconciled with the bucket since the link came up."""
        self.lease_sent: float | None = None
        self._prefix = f"{link.host_token}-{secrets.token_hex(3)}-"
        self._n = 0
        self._changed: dict[str, anyio.Event] = {}
        self._lease_rev = 0
        self._ready = anyio.Event()
        self._waiters: dict[str, FleetWaiter] = {}
        """This host's requests in line, by gid (``claim.list`` shows them)."""
        self._backlog: list[tuple[str, Step]] = []
        self._backlog_ready = anyio.Event()
        self._sweep_needed = False
        self.high = 0
        """The highest fleet token this host granted or holds: the bucket's revisions
        must be above it (tokens never go back; see :meth:`_check_not_reset`)."""
        self.problem: str | None = None
        """Why fleet-wide claims are refused while the link is up (for ``fleet status``)."""

    name = "claims"

    @property
    def cfg(self) -> FleetSettings:
        return self.link.cfg

    def status(self) -> dict[str, Any]:
        """For ``fleet status``: fleet-wide claims held here, and the local-only ones."""
        return {
            "ready": self.ready,
            "problem": self.problem,
            "high_token": self.high,
            "grants": len(self.grants),
            "local_only": [f"claim {res} ({sid})" for sid, res in sorted(self.local_only)],
        }

    # --- scope ----------------------------------------------------------------------

    def is_fleet(self, key: Key) -> bool:
        """Whether ``key`` is decided by the fleet (a shared kind, or under a shared path)."""
        if key.is_path:
            return shared_root(key, self.roots) is not None
        return key.kind in self.kinds

    def split(self, keys: Sequence[Key]) -> tuple[list[Key], list[Key]]:
        """``keys`` split into (fleet-wide, local)."""
        fleet = [k for k in keys if self.is_fleet(k)]
        return fleet, [k for k in keys if not self.is_fleet(k)]

    # --- plumbing -------------------------------------------------------------------

    async def _kv(self) -> KeyValue:
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                return await self.link.kv(BUCKET, history=1)
            except TIMEOUTS as exc:  # binding asks the server: patient under load too
                if time.monotonic() > deadline:
                    raise FleetDown(describe(exc)) from exc
            except NATS_ERRORS as exc:
                raise FleetDown(describe(exc)) from exc

    def _gid(self) -> str:
        self._n += 1
        return f"{self._prefix}{self._n}"

    def _mine(self, gid: str) -> bool:
        return gid in self.grants or gid in self.inflight

    def _related(self, me: Entry) -> Callable[[Entry], bool]:
        def related(e: Entry) -> bool:
            return e.host == self.host and self.local.related(me.session, e.session)

        return related

    async def _read(self, kv: KeyValue, name: str) -> tuple[Record, int]:
        """A record and its revision (0: it was never written)."""
        try:
            entry = await kv.get(name)
        except nats.js.errors.KeyNotFoundError as exc:
            rev = exc.entry.revision if exc.entry is not None else 0
            return Record(), rev or 0
        return Record.decode(entry.value), entry.revision or 0

    async def _write(self, kv: KeyValue, name: str, record: Record, last: int) -> int:
        """Compare-and-set ``record`` over revision ``last``: its new revision, or 0 if
        someone was first."""
        try:
            return int(await kv.update(name, record.encode(), last=last))
        except nats.js.errors.KeyWrongLastSequenceError:
            return 0

    async def _alive(self, kv: KeyValue, host: str) -> bool:
        """Whether ``host``'s lease is there; a read that times out counts as alive
        (the safe answer: its entries are kept)."""
        try:
            await kv.get(self._lease_key(host))
        except nats.js.errors.KeyNotFoundError:
            return False
        except TIMEOUTS:
            return True
        return True

    def _lease_key(self, host: str) -> str:
        return "l." + host.replace(".", "_d")

    async def _dead(self, kv: KeyValue, entries: Iterable[Entry]) -> set[str]:
        """The gids of ``entries`` nobody holds any more: this host's that it does not know
        (a previous run's, reconciled away), another host's whose lease ran out."""
        dead: set[str] = set()
        hosts: dict[str, bool] = {}
        for e in entries:
            if e.host == self.host:
                if self.ready and not self._mine(e.gid) and not self._waiting(e.gid):
                    dead.add(e.gid)
                continue
            if e.host not in hosts:
                hosts[e.host] = await self._alive(kv, e.host)
            if not hosts[e.host]:
                dead.add(e.gid)
        return dead

    def _waiting(self, gid: str) -> bool:
        return gid in self._waiters

    # --- acquire ----------------------------------------------------------------------

    async def acquire(
        self,
        session_id: str,
        keys: Sequence[Key],
        mode: Mode,
        *,
        waiter: FleetWaiter | None = None,
        steal: bool = False,
    ) -> FleetGrant | FleetHeld:
        """Take the whole set in the fleet, or nothing (docs/FLEET.md).

        Raises :class:`FleetDown` when the fleet cannot be reached (what it wrote is
        rolled back as far as it can be; the rest is dropped at the next reconcile).
        """
        await self._until_ready()
        kv = await self._kv()
        gid = waiter.gid if waiter is not None else self._gid()
        me = Entry(gid, session_id, self.host, mode, waiter.ticket if waiter else 0)
        steps = plan(keys, self.roots)
        done: list[Step] = []
        revs: dict[str, int] = {}
        self.inflight.add(gid)
        try:
            for step in steps:
                blocking, rev = await self._take(kv, step, me, steal)
                if blocking:
                    await self._undo(kv, done, gid)
                    return FleetHeld(tuple((step.resource, e) for e in blocking))
                done.append(step)
                revs[step.name] = rev
            value = json.dumps(
                {"k": [k.text for k in keys], "s": session_id, "o": self.host, "m": mode}
            ).encode()
            token = await self._create(kv, "g." + gid, value)
            grant = FleetGrant(gid, session_id, mode, token, {k.text: k for k in keys}, revs)
            self._hold(grant)  # before it leaves inflight: never unknown here, so never "dead"
        except BaseException as exc:
            if (made := self.grants.get(gid)) is not None:  # cancelled after the commit
                self._let_go(session_id, [(r, made.token) for r in made.keys])
            with anyio.CancelScope(shield=True), contextlib.suppress(*NATS_ERRORS):
                # what fails here is dropped at the next reconcile: no grant knows it
                if made is not None:
                    await kv.delete("g." + gid)
                await self._undo(kv, done, gid)
            if isinstance(exc, NATS_ERRORS):
                raise FleetDown(describe(exc)) from exc
            raise
        finally:
            self.inflight.discard(gid)
        if waiter is not None:
            self._waiters.pop(gid, None)
            self._backlog.append((gid, WAIT_RECORD))
            self._backlog_ready.set()
        return grant

    def _hold(self, grant: FleetGrant) -> None:
        self.grants[grant.gid] = grant
        self.high = max(self.high, grant.token)
        for res in grant.keys:
            self.by_claim[(grant.session_id, res)] = grant.gid

    async def _take(
        self, kv: KeyValue, step: Step, me: Entry, steal: bool
    ) -> tuple[list[Entry], int]:
        """Write ``me`` into ``step``'s record unless something blocks it: (what blocks
        it, the revision written)."""
        related = self._related(me)
        where: Literal["h", "d"] = "h" if step.role == "hold" else "d"
        deadline = time.monotonic() + PATIENCE
        for _ in range(MAX_TRIES):
            try:
                record, rev = await self._read(kv, step.name)
            except TIMEOUTS:
                if time.monotonic() > deadline:
                    raise
                continue
            if any(e.gid == me.gid for e in getattr(record, where)):
                return [], rev  # a write of ours that timed out did land
            block = blockers(record, step.role, me, related)
            if block:
                dead = await self._dead(kv, block)
                if steal:
                    dead |= {e.gid for e in block if e.ticket == 0}
                block = [e for e in block if e.gid not in dead]
                if block:
                    return block, 0
                record = record.without(_gid_in(dead))
            mine = record.without(lambda e: e.gid == me.gid, "q")
            new = mine.adding(where, replace(me, ticket=0))
            try:
                written = await self._write(kv, step.name, new, rev)
            except TIMEOUTS:  # it may have landed: the next read says
                if time.monotonic() > deadline:
                    raise
                continue
            if written:
                return [], written
        raise FleetDown(f"{step.resource}: too many concurrent changes, try again")

    async def _create(self, kv: KeyValue, name: str, value: bytes) -> int:
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

    async def _undo(self, kv: KeyValue, steps: Iterable[Step], gid: str) -> None:
        """Take ``gid``'s entries out of ``steps``' records (its holds and intents)."""
        for step in steps:
            where = "hq" if step.role == "hold" else "d"
            await self._drop(kv, step.name, lambda e: e.gid == gid, where)

    async def _drop(
        self, kv: KeyValue, name: str, gone: Callable[[Entry], bool], where: str = "hdq"
    ) -> None:
        deadline = time.monotonic() + PATIENCE
        for _ in range(MAX_TRIES):
            try:  # each try reads first: a write of ours that timed out shows there
                record, rev = await self._read(kv, name)
                new = record.without(gone, where)
                if new == record or await self._write(kv, name, new, rev):
                    return
            except TIMEOUTS:
                if time.monotonic() > deadline:
                    raise
        raise FleetDown(f"{name}: too many concurrent changes")

    # --- waiting ----------------------------------------------------------------------

    async def enqueue(self, session_id: str, keys: Sequence[Key], mode: Mode) -> FleetWaiter:
        """Stand in line for ``keys``: a ticket, and an entry in each record it needs."""
        kv = await self._kv()
        gid = self._gid()
        self._waiters[gid] = FleetWaiter(gid, session_id, tuple(keys), mode, 0, time.time())
        try:
            value = json.dumps(
                {"k": [k.text for k in keys], "s": session_id, "o": self.host, "m": mode}
            ).encode()
            ticket = await self._create(kv, "w." + gid, value)
            me = Entry(gid, session_id, self.host, mode, ticket)
            for step in plan(keys, self.roots):
                if step.role == "hold":
                    await self._queue(kv, step.name, me)
        except BaseException as exc:
            self._waiters.pop(gid, None)
            if isinstance(exc, NATS_ERRORS):
                raise FleetDown(describe(exc)) from exc
            raise
        waiter = self._waiters[gid]
        waiter.ticket = ticket
        return waiter

    async def _queue(self, kv: KeyValue, name: str, me: Entry) -> None:
        deadline = time.monotonic() + PATIENCE
        for _ in range(MAX_TRIES):
            try:  # adding the same entry again changes nothing: a retry is harmless
                record, rev = await self._read(kv, name)
                if await self._write(kv, name, record.adding("q", me), rev):
                    return
            except TIMEOUTS:
                if time.monotonic() > deadline:
                    raise
        raise FleetDown(f"{name}: too many concurrent changes")

    async def dequeue(self, waiter: FleetWaiter) -> None:
        """Leave the line (the wait ran out or was given up); never raises."""
        self._waiters.pop(waiter.gid, None)
        with anyio.CancelScope(shield=True):
            try:
                kv = await self._kv()
                for step in plan(waiter.keys, self.roots):
                    if step.role == "hold":
                        await self._drop(kv, step.name, lambda e: e.gid == waiter.gid)
                await self._forget_wait(kv, waiter.gid)
            except FLEET_ERRORS as exc:
                log.info("fleet: leaving the line for %s: %s", waiter.keys, describe(exc))

    async def _forget_wait(self, kv: KeyValue, gid: str) -> None:
        try:
            await kv.delete("w." + gid)
        except NATS_ERRORS as exc:
            log.debug("fleet: deleting wait record %s: %s", gid, describe(exc))

    def arm(self, keys: Sequence[Key]) -> list[anyio.Event]:
        """Events the watch sets at the next change of a record of ``keys``: armed
        before a try, so a change between the try and the wait is not missed."""
        events = []
        for key in keys:
            name = record_name(record_resource(key))
            ev = self._changed.get(name)
            if ev is None:
                ev = self._changed[name] = anyio.Event()
            events.append(ev)
        return events

    @staticmethod
    async def changed(events: list[anyio.Event], timeout: float) -> None:
        """Return when one of ``events`` (from :meth:`arm`) is set, or after ``timeout``."""
        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as tg:
                for ev in events:

                    async def one(ev: anyio.Event = ev) -> None:
                        await ev.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(one)

    async def back(self, timeout: float) -> None:
        """Return once the fleet can decide claims again (the link up, this host
        reconciled), or after ``timeout``: a request with time left to wait waits out
        a blip (a server restart, a reconnect) instead of failing at once."""
        with anyio.move_on_after(timeout):
            await anyio.sleep(BACK_POLL)  # at least this: a try that failed while all
            while not (self.link.connected and self.ready):  # looked up is not rerun hot
                await anyio.sleep(BACK_POLL)

    def waiting(self) -> list[FleetWaiter]:
        """This host's requests in line in the fleet, first come first."""
        return sorted(self._waiters.values(), key=lambda w: w.since)

    # --- release --------------------------------------------------------------------

    def _let_go(self, session_id: str, claims: Iterable[tuple[str, int]]) -> list[tuple[str, Step]]:
        """Forget these claims (resource, token) here at once; what is left to do in the
        bucket: (gid, step) pairs (a step, or a record to delete)."""
        work: list[tuple[str, Step]] = []
        by_gid: dict[str, list[str]] = {}
        for res, token in claims:
            self.local_only.discard((session_id, res))
            gid = self.by_claim.get((session_id, res))
            if gid is None or self.grants[gid].token != token:
                continue  # not this grant's: a newer one holds it now
            del self.by_claim[(session_id, res)]
            by_gid.setdefault(gid, []).append(res)
        for gid, gone in by_gid.items():
            grant = self.grants[gid]
            dropped = [grant.keys.pop(r) for r in gone if r in grant.keys]
            if not grant.keys:
                del self.grants[gid]
                work.append((gid, COMMIT_RECORD))  # the token dies for the whole set at once
            kept = {(s.name, s.role) for s in plan(grant.keys.values(), self.roots)}
            work += [(gid, s) for s in plan(dropped, self.roots) if (s.name, s.role) not in kept]
        return work

    async def release(self, session_id: str, claims: Iterable[tuple[str, int]]) -> None:
        """This host released these claims (resource, token): out of the fleet too.
        Never raises: what cannot be written now is dropped at the next reconcile."""
        work = self._let_go(session_id, claims)
        if work:
            with anyio.CancelScope(shield=True):
                await self._do(work)

    def release_soon(self, session_id: str, claims: Iterable[tuple[str, int]]) -> None:
        """:meth:`release` from a synchronous caller: forgotten now, written soon."""
        work = self._let_go(session_id, claims)
        if work:
            self._backlog.extend(work)
            self._backlog_ready.set()

    async def _do(self, work: list[tuple[str, Step]]) -> None:
        """Write releases to the bucket; what fails (a timeout, the link down) goes to
        the backlog, which tries again while the link is up: other hosts would see the
        entries as held until then. (A link that drops leaves it to the reconcile.)"""
        done = 0
        try:
            kv = await self._kv()
            for gid, step in work:
                if step in (COMMIT_RECORD, WAIT_RECORD):
                    await kv.delete(step.name + gid)
                else:
                    await self._undo(kv, [step], gid)
                done += 1
        except FLEET_ERRORS as exc:
            log.info("fleet: releasing: %s (tried again)", describe(exc))
            self._backlog.extend(work[done:])
            self._backlog_ready.set()

    async def _drain_backlog(self) -> None:
        while True:
            await self._backlog_ready.wait()
            self._backlog_ready = anyio.Event()
            await self.link.wait_connected()
            work, self._backlog = self._backlog, []
            await self._do(work)
            if self._backlog:
                await anyio.sleep(self.renew_every / 4)  # failed: not in a tight loop

    # --- validate -------------------------------------------------------------------

    async def validate(self, key: Key, token: int) -> tuple[bool, str | None, str | None]:
        """Whether ``token`` holds ``key`` in the fleet now: (valid, session, host)."""
        kv = await self._kv()
        try:
            record, _ = await self._read(kv, record_name(record_resource(key)))
            for e in record.h:
                try:
                    commit = await kv.get("g." + e.gid)
                except nats.js.errors.KeyNotFoundError:
                    continue
                if commit.revision != token:
                    continue
                doc = json.loads(commit.value or b"{}")
                if key.text not in doc.get("k", ()):
                    continue
                alive = self._mine(e.gid) if e.host == self.host else await self._alive(kv, e.host)
                return alive, e.session, e.host
        except NATS_ERRORS as exc:
            raise FleetDown(describe(exc)) from exc
        return False, None, None

    # --- the link's life: lease, reconcile, watch ----------------------------------------

    async def _until_ready(self) -> None:
        if not self.link.connected:
            raise FleetDown(self.link.last_error or "the fleet link is down")
        if not self.ready and self.problem:
            raise FleetDown(self.problem)
        if not self.ready:
            with anyio.move_on_after(5):
                await self._ready.wait()
            if not self.ready:
                raise FleetDown(
                    self.problem or "the fleet link is up but this host has not reconciled yet"
                )

    async def run(self) -> None:
        """Keep the lease, reconcile at each link-up, watch the records; until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watchdog)
            tg.start_soon(self._drain_backlog)
            await self._serve()

    async def _watchdog(self) -> None:
        while True:
            self.check_lease(time.monotonic())
            await anyio.sleep(self.renew_every / 4)

    async def _serve(self) -> None:
        while True:
            await self.link.wait_connected()
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._keep_lease, tg.cancel_scope)
                    await self._reconcile()
                    self.ready = True
                    self._ready.set()
                    tg.start_soon(self._watch)
            except FLEET_ERRORS as exc:
                log.warning("fleet claims: %s", describe(exc))
            finally:
                self.ready = False
                self._ready = anyio.Event()
            await anyio.sleep(self.renew_every if self.problem else 0.2)

    async def _keep_lease(self, scope: anyio.CancelScope) -> None:
        kv = await self._kv()
        js = self.link.jetstream()
        subject = f"$KV.{self.link.bucket(BUCKET)}.{self._lease_key(self.host)}"
        while self.link.connected:
            sent = time.monotonic()
            try:
                ack = await js.publish(
                    subject, self.host.encode(),
                    headers={"Nats-Expected-Last-Subject-Sequence": str(self._lease_rev)},
                    msg_ttl=self.lease_ttl,
                )  # fmt: skip
                self._lease_rev = ack.seq
                self.lease_sent = sent
                if self._sweep_needed and self.ready:
                    # claims were given up while the link stayed up: their entries
                    # would look alive to the others now that the lease is back
                    self._sweep_needed = False
                    await self._sweep_own(kv)
            except nats.js.errors.APIError as exc:
                if exc.err_code not in (10071, 10164):
                    raise
                self._lease_rev = await self._lease_now(kv)
                if self.lease_sent is not None:
                    self.lose_all("fleet")  # the lease ran out: the fleet may have let go
                continue
            await anyio.sleep(self.renew_every)
        scope.cancel()

    async def _lease_now(self, kv: KeyValue) -> int:
        """The lease's revision now (0: none): a previous run's lease is adopted."""
        try:
            return (await kv.get(self._lease_key(self.host))).revision or 0
        except nats.js.errors.KeyNotFoundError as exc:  # a delete or purge marker has one
            return (exc.entry.revision or 0) if exc.entry is not None else 0

    def check_lease(self, now: float) -> None:
        """Give the fleet claims up when the lease may have run out (call regularly)."""
        if self.lease_sent is not None and now - self.lease_sent > self.lose_after:
            self.lease_sent = None
            self.lose_all("fleet")

    def lose_all(self, how: str) -> None:
        """Every fleet claim of this host is lost (local-only ones are kept); their
        entries are swept once the lease is back (:meth:`_keep_lease`)."""
        for grant in list(self.grants.values()):
            self._lose(grant, list(grant.keys), how)
        self._sweep_needed = True

    def _lose(self, grant: FleetGrant, resources: list[str], how: str) -> None:
        for res in resources:
            grant.keys.pop(res, None)
            self.by_claim.pop((grant.session_id, res), None)
        if not grant.keys:
            self.grants.pop(grant.gid, None)
            self._backlog.append((grant.gid, COMMIT_RECORD))
            self._backlog_ready.set()
        self.local.fleet_lost(grant.session_id, resources, grant.token, how)

    async def _reconcile(self) -> None:
        """Match the bucket with this host's table after a link-up (docs/FLEET.md):
        adopt this host's commit records that its table still holds (a restart of
        meshd), drop the rest and every entry of this host nobody knows, tell the
        holders of claims the fleet no longer has that they lost them, and ask the
        fleet for the sets granted local-only while it was out of reach."""
        while self.lease_sent is None:
            await anyio.sleep(0.01)
        kv = await self._kv()
        held: dict[tuple[str, str], tuple[Key, Mode, int]] = {}
        alone: dict[tuple[str, int, Mode], list[Key]] = {}
        for sid, k, mode, token in self.local.fleet_claims():
            if (sid, k.text) in self.local_only:
                alone.setdefault((sid, token, mode), []).append(k)
            elif (sid, k.text) not in self.by_claim:
                held[(sid, k.text)] = (k, mode, token)
                self.high = max(self.high, token)
        await self._adopt(kv, held)
        await self._sweep_own(kv)
        lost: dict[tuple[str, int], list[str]] = {}
        for (sid, res), (_k, _m, token) in held.items():
            if (sid, res) not in self.by_claim:
                lost.setdefault((sid, token), []).append(res)
        for (sid, token), resources in lost.items():
            self.local.fleet_lost(sid, resources, token, "fleet")
        await self._check_not_reset(kv)
        self.ready = True  # the heal below acquires like any request
        for (sid, token, mode), keys in alone.items():
            await self._heal(sid, token, mode, keys)

    async def _check_not_reset(self, kv: KeyValue) -> None:
        """Refuse fleet-wide claims while the bucket's last revision is below a token
        already granted: the bucket was deleted (or replaced) and its revisions started
        again at 1, so new tokens would go back. A resource that fences with tokens
        refuses such lower tokens anyway (so this is about liveness, not safety); the
        remedy is the operator's (docs/FLEET.md)."""
        last = (await kv.status()).stream_info.state.last_seq or 0
        if last < self.high:
            self.problem = (
                f"the claims bucket {self.link.bucket(BUCKET)} is at revision {last}, below "
                f"token {self.high} already granted: it was deleted or replaced"
            )
            raise FleetDown(self.problem)
        self.problem = None

    async def _adopt(
        self, kv: KeyValue, held: dict[tuple[str, str], tuple[Key, Mode, int]]
    ) -> None:
        """This host's commit records: kept where the table holds the set with that
        token (a restart of meshd), deleted otherwise."""
        for name, (value, rev) in (await self._scan(kv, "g.>")).items():
            gid = name[2:]
            doc: dict[str, Any] = json.loads(value or b"{}")
            if doc.get("o") != self.host or gid in self.grants:
                continue
            sid = str(doc.get("s"))
            mine = {r: held[(sid, r)] for r in doc.get("k", ()) if (sid, r) in held}
            if mine and all(t == rev for _, _, t in mine.values()):
                self._hold(FleetGrant(gid, sid, mine[next(iter(mine))][1], rev,
                                      {r: k for r, (k, _, _) in mine.items()}))  # fmt: skip
            else:
                await kv.delete(name)

    async def _sweep_own(self, kv: KeyValue) -> None:
        """Drop every entry of this host that no grant or wait of it knows."""
        for name, (value, _) in (await self._scan(kv, "k.>")).items():
            stale = {
                e.gid for e in Record.decode(value).entries()
                if e.host == self.host and not self._mine(e.gid) and e.gid not in self._waiters
            }  # fmt: skip
            if stale:
                await self._drop(kv, name, _gid_in(stale))

    async def _heal(self, sid: str, token: int, mode: Mode, keys: list[Key]) -> None:
        """A set granted local-only: the fleet grants it now (it becomes fleet-wide,
        with the fleet's token), or another host holds it and it is lost here."""
        got = await self.acquire(sid, keys, mode)
        for k in keys:
            self.local_only.discard((sid, k.text))
        if isinstance(got, FleetGrant):
            self.local.fleet_healed(sid, keys, token, got.token)
        else:
            self.local.fleet_lost(sid, [k.text for k in keys], token, "fleet-conflict")

    async def _scan(self, kv: KeyValue, pattern: str) -> dict[str, tuple[bytes | None, int]]:
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

    async def _watch(self) -> None:
        """Wake waiters on a record's change; notice claims taken from this host."""
        kv = await self._kv()
        watcher = await kv.watch("k.>")
        try:
            while self.link.connected:
                try:
                    entry = await watcher.updates(timeout=self.renew_every)  # type: ignore[no-untyped-call]
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                if entry is None:
                    continue
                ev = self._changed.pop(entry.key, None)
                if ev is not None:
                    ev.set()
                self._check_losses(entry.key, Record.decode(entry.value), entry.revision or 0)
        finally:
            with anyio.CancelScope(shield=True):
                await watcher.stop()  # type: ignore[no-untyped-call]

    def _check_losses(self, name: str, record: Record, revision: int) -> None:
        """Grants of this host that the record no longer lists were taken (a steal, or
        another host dropped them as dead): they are lost here too."""
        resource = resource_of(name)
        if resource is None:
            return
        holders = {e.gid for e in record.h}
        for grant in list(self.grants.values()):
            if grant.gid in holders or revision <= grant.revs.get(name, 0):
                continue
            gone = [r for r, k in grant.keys.items() if record_resource(k) == resource]
            if gone:
                self._lose(grant, gone, "fleet-stolen")
