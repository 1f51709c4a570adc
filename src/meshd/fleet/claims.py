"""Fleet-wide claims: decided in the profile's KV bucket by compare-and-set (SPEC §12).

:class:`FleetClaims` is what the claims handler calls: take a set, stand in line,
give claims back, check a token (docs/FLEET.md, "Fleet-wide claims"); it keeps
this host's grants and waits in memory. The handler asks it *before* the core
records a grant, and hands the core the KV token, so the core stays pure and a
fleet grant is committed to SQLite before the reply like any other.

In short: a set writes an entry into the record of each resource it touches, in
one global order, rolling back on a conflict; then creates its commit record,
whose revision is the set's fencing token. The rest lives beside it, one thing
per module: what a record means and the conflict rule
(:mod:`~meshd.fleet.claim_records`, pure), how a record is read and written
(:mod:`~meshd.fleet.claim_bucket`), the shapes of this host's grants and waits
(:mod:`~meshd.fleet.claim_grants`), and the lease, the reconcile at each link-up
and the watch that no request asks for (:mod:`~meshd.fleet.claim_upkeep`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Literal

import anyio
import nats.js.errors
from nats.js.kv import KeyValue

from meshd.core.settings import FleetSettings
from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_bucket import FLEET_ERRORS, MAX_TRIES, NATS_ERRORS, PATIENCE, TIMEOUTS
from meshd.fleet.claim_grants import (
    COMMIT_RECORD,
    WAIT_RECORD,
    FleetGrant,
    FleetHeld,
    FleetWaiter,
)
from meshd.fleet.claim_records import (
    Entry,
    Record,
    Seen,
    Step,
    blockers,
    plan,
    record_name,
    record_resource,
    set_value,
    shared_root,
)
from meshd.fleet.claim_upkeep import ClaimUpkeep
from meshd.fleet.link import FleetDown, FleetLink, describe
from meshd.keys import Key, from_canonical
from meshd.ports import ClaimTable, Holding
from meshd.protocol.claims import Mode
from meshd.protocol.errors import BadKey

log = logging.getLogger("meshd.fleet.claims")

RELEASES_AT_ONCE = 16
"""Writes of a release (or of the backlog) sent at once: a session that ends with many
fleet claims does not flood the server."""

READ_TIMEOUT = 5.0
"""Seconds a read of the fleet's holders (``claim.check``) may take before it says
the fleet cannot be reached: a check answers from this host's table then."""

BACK_POLL = 0.1
"""Seconds between two looks at the link by a request waiting for the fleet to be back."""


class FleetClaims:
    """This host's side of the fleet's claims (one per profile's daemon)."""

    def __init__(self, link: FleetLink, local: ClaimTable, *, heartbeat: float) -> None:
        self.link = link
        self.local = local
        self.host = link.host
        self.roots = link.cfg.shared_paths
        self.kinds = frozenset(link.cfg.shared_kinds)
        self.grants: dict[str, FleetGrant] = {}
        self.by_claim: dict[tuple[str, str], str] = {}  # (session, resource) -> gid
        self.inflight: set[str] = set()
        self.local_only: set[tuple[str, str]] = set()
        self._prefix = f"{link.host_token}-{secrets.token_hex(3)}-"
        self._n = 0
        self._changed: dict[str, anyio.Event] = {}
        self._waiters: dict[str, FleetWaiter] = {}
        """This host's requests in line, by gid (``claim.list`` shows them)."""
        self._backlog: list[tuple[str, Step]] = []
        self._backlog_ready = anyio.Event()
        self.seen = Seen()
        """The newest version of each record seen: saves the read before a write."""
        self.high = 0
        """The highest fleet token this host granted or holds: the bucket's revisions
        must be above it (tokens never go back; see :class:`ClaimUpkeep`)."""
        self.upkeep = ClaimUpkeep(self, heartbeat=heartbeat)
        """The lease, the reconcile at each link-up and the watch on the records."""

    name = "claims"

    @property
    def cfg(self) -> FleetSettings:
        return self.link.cfg

    @property
    def on_partition(self) -> str:
        """``fail`` or ``local``: what a fleet-wide request does when the fleet is out of reach."""
        return self.cfg.on_partition

    @property
    def renew_every(self) -> float:
        """Seconds between lease renewals: a waiter looks again at least this often."""
        return self.upkeep.renew_every

    @property
    def ready(self) -> bool:
        """Whether the fleet decides claims now: the link up, this host reconciled, and
        every local-only grant reconciled (:class:`ClaimUpkeep`)."""
        return self.link.connected and self.upkeep.ready

    def status(self) -> dict[str, Any]:
        """For ``fleet status``: fleet-wide claims held here, and the local-only ones."""
        return {
            "ready": self.upkeep.ready,
            "problem": self.upkeep.problem,
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

    def _gid(self) -> str:
        self._n += 1
        return f"{self._prefix}{self._n}"

    def mine(self, gid: str) -> bool:
        """Whether ``gid`` is a grant of this host, or an acquire of it in flight."""
        return gid in self.grants or gid in self.inflight

    def known(self, gid: str) -> bool:
        """Whether ``gid`` is this host's: a grant, an acquire in flight, or a wait."""
        return self.mine(gid) or gid in self._waiters

    def _related(self, me: Entry) -> Callable[[Entry], bool]:
        def related(e: Entry) -> bool:
            return e.host == self.host and self.local.related(me.session, e.session)

        return related

    async def _dead(self, kv: KeyValue, entries: Iterable[Entry]) -> set[str]:
        """The gids of ``entries`` nobody holds any more: this host's that it does not know
        (a previous run's, reconciled away), another host's whose lease ran out."""
        dead: set[str] = set()
        hosts: dict[str, bool] = {}
        for e in entries:
            if e.host == self.host:
                if self.upkeep.ready and not self.known(e.gid):
                    dead.add(e.gid)
                continue
            if e.host not in hosts:
                hosts[e.host] = await bucket.alive(kv, e.host)
            if not hosts[e.host]:
                dead.add(e.gid)
        return dead

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
        Waits for the reconcile at a link-up, local-only grants healed included.
        """
        await self.upkeep.until_ready()
        return await self.decide(session_id, keys, mode, waiter=waiter, steal=steal)

    async def decide(
        self,
        session_id: str,
        keys: Sequence[Key],
        mode: Mode,
        *,
        waiter: FleetWaiter | None = None,
        steal: bool = False,
    ) -> FleetGrant | FleetHeld:
        """:meth:`acquire` without waiting for the reconcile: the reconcile's own heal
        of local-only sets."""
        if not self.link.connected:
            raise FleetDown(self.link.last_error or "the fleet link is down")
        kv = await bucket.open_bucket(self.link)
        gid = waiter.gid if waiter is not None else self._gid()
        me = Entry(gid, session_id, self.host, mode, waiter.ticket if waiter else 0)
        steps = plan(keys, self.roots)
        done: list[Step] = []
        revs: dict[str, int] = {}
        value = set_value(keys, session_id, self.host, mode)
        commit = bucket.Commit(kv, "g." + gid, value, alongside=len(steps) == 1)
        self.inflight.add(gid)
        try:
            for step in steps:
                blocking, rev = await self._take(kv, step, me, steal, commit)
                if blocking:
                    await bucket.undo(kv, done, gid, self.seen)
                    return FleetHeld(tuple((step.resource, e) for e in blocking))
                done.append(step)
                revs[step.name] = rev
            token = await commit.token()
            grant = FleetGrant(gid, session_id, mode, token, {k.text: k for k in keys}, revs)
            self.hold(grant)  # before it leaves inflight: never unknown here, so never "dead"
        except BaseException as exc:
            if (made := self.grants.get(gid)) is not None:  # cancelled after the commit
                self._let_go(session_id, [(r, made.token) for r in made.keys])
            with anyio.CancelScope(shield=True), contextlib.suppress(*NATS_ERRORS):
                # what fails here is dropped at the next reconcile: no grant knows it
                if made is not None or commit.tried:
                    await kv.delete(commit.name)
                await bucket.undo(kv, done, gid, self.seen)
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

    def granted_alone(self, session_id: str, keys: Sequence[Key]) -> None:
        """These keys were granted here alone (``on_partition = "local"``), marked
        local-only until the fleet decides them: at once if the link is up."""
        self.local_only.update((session_id, k.text) for k in keys)
        self.upkeep.heal_soon()

    def hold(self, grant: FleetGrant) -> None:
        """Know ``grant`` as this host's."""
        self.grants[grant.gid] = grant
        self.high = max(self.high, grant.token)
        for res in grant.keys:
            self.by_claim[(grant.session_id, res)] = grant.gid

    async def _take(
        self, kv: KeyValue, step: Step, me: Entry, steal: bool, commit: bucket.Commit
    ) -> tuple[list[Entry], int]:
        """Write ``me`` into ``step``'s record unless something blocks it: (what blocks
        it, the revision written).

        The first try decides on the version of the record this host last saw
        (:class:`Seen`) instead of reading it, when that version says it is free: the
        write is a compare-and-set over that version's revision, so it lands only if
        the record is still exactly that. Anything else -- a lost race, a version that
        blocks or already lists ``me`` -- is decided on a read, as ever."""
        related = self._related(me)
        where: Literal["h", "d"] = "h" if step.role == "hold" else "d"
        deadline = time.monotonic() + PATIENCE
        hint = self.seen.get(step.name)
        for _ in range(MAX_TRIES):
            look, hint = await self._look(kv, step.name, hint, deadline), None
            if look is None:
                continue
            record, rev, fresh = look
            if any(e.gid == me.gid for e in getattr(record, where)):
                if fresh:
                    return [], rev  # a write of ours that timed out did land
                continue  # only a read may say so
            block = blockers(record, step.role, me, related)
            if block and not fresh:
                continue  # only a read may say so
            if block:
                dead = await self._dead(kv, block)
                if steal:
                    dead |= {e.gid for e in block if e.ticket == 0}
                block = [e for e in block if e.gid not in dead]
                if block:
                    return block, 0
                record = record.without(bucket.gid_in(dead))
            mine = record.without(lambda e: e.gid == me.gid, "q")
            new = mine.adding(where, replace(me, ticket=0))
            try:
                written = await commit.with_write(bucket.write(kv, step.name, new, rev, self.seen))
            except TIMEOUTS:  # it may have landed: the next read says
                if time.monotonic() > deadline:
                    raise
                continue
            if written:
                return [], written
        raise FleetDown(f"{step.resource}: too many concurrent changes, try again")

    async def _look(
        self, kv: KeyValue, name: str, hint: tuple[Record, int] | None, deadline: float
    ) -> tuple[Record, int, bool] | None:
        """The version of record ``name`` to decide on, and whether it was read now
        (else it is ``hint``, the one last seen); None when a read timed out."""
        if hint is not None:
            return (*hint, False)
        try:
            return (*await bucket.read(kv, name, self.seen), True)
        except TIMEOUTS:
            if time.monotonic() > deadline:
                raise
            return None

    # --- waiting ----------------------------------------------------------------------

    async def enqueue(self, session_id: str, keys: Sequence[Key], mode: Mode) -> FleetWaiter:
        """Stand in line for ``keys``: a ticket, and an entry in each record it needs."""
        kv = await bucket.open_bucket(self.link)
        gid = self._gid()
        self._waiters[gid] = FleetWaiter(gid, session_id, tuple(keys), mode, 0, time.time())
        try:
            ticket = await bucket.create(
                kv, "w." + gid, set_value(keys, session_id, self.host, mode)
            )
            me = Entry(gid, session_id, self.host, mode, ticket)
            for step in plan(keys, self.roots):
                if step.role == "hold":
                    await bucket.queue(kv, step.name, me, self.seen)
        except BaseException as exc:
            self._waiters.pop(gid, None)
            if isinstance(exc, NATS_ERRORS):
                raise FleetDown(describe(exc)) from exc
            raise
        waiter = self._waiters[gid]
        waiter.ticket = ticket
        return waiter

    async def dequeue(self, waiter: FleetWaiter) -> None:
        """Leave the line (the wait ran out or was given up); never raises."""
        self._waiters.pop(waiter.gid, None)
        with anyio.CancelScope(shield=True):
            try:
                kv = await bucket.open_bucket(self.link)
                for step in plan(waiter.keys, self.roots):
                    if step.role == "hold":
                        await bucket.drop(kv, step.name, lambda e: e.gid == waiter.gid)
                await bucket.forget_wait(kv, waiter.gid)
            except FLEET_ERRORS as exc:
                log.info("fleet: leaving the line for %s: %s", waiter.keys, describe(exc))

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

    def wake(self, name: str) -> None:
        """Record ``name`` changed: wake the requests armed on it (:meth:`arm`)."""
        ev = self._changed.pop(name, None)
        if ev is not None:
            ev.set()

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
            while not (self.link.connected and self.upkeep.ready):  # looked up is not rerun hot
                await anyio.sleep(BACK_POLL)

    def paused(self, session_id: str) -> None:
        """``session_id`` paused: its requests in line are woken to leave it, answered
        ``held`` (docs/CONFORMANCE.md §5b, as the table withdraws its local waits).
        Left in line, one was granted while the session did no work."""
        for w in self._waiters.values():
            if w.session_id == session_id:
                w.paused = True
                for key in w.keys:
                    self.wake(record_name(record_resource(key)))

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
        """Write releases to the bucket, all at once (a commit record's delete is sent
        before its entries' removals, though either alone ends its token: validate
        needs both); what fails (a timeout, the link down) goes to the backlog, which
        tries again while the link is up: other hosts would see the entries as held
        until then. (A link that drops leaves it to the reconcile.)"""
        failed: dict[int, str] = {}  # index in work -> why
        limit = anyio.CapacityLimiter(RELEASES_AT_ONCE)

        async def one(kv: KeyValue, i: int, gid: str, step: Step) -> None:
            try:
                async with limit:
                    await self._undo_one(kv, gid, step)
            except FLEET_ERRORS as exc:
                failed[i] = describe(exc)

        try:
            kv = await bucket.open_bucket(self.link)
        except FLEET_ERRORS as exc:
            failed = dict.fromkeys(range(len(work)), describe(exc))
        else:
            async with anyio.create_task_group() as tg:
                for i, (gid, step) in enumerate(work):
                    tg.start_soon(one, kv, i, gid, step)
        if failed:
            log.info("fleet: releasing: %s (tried again)", next(iter(failed.values())))
            self._backlog.extend(work[i] for i in sorted(failed))
            self._backlog_ready.set()

    async def _undo_one(self, kv: KeyValue, gid: str, step: Step) -> None:
        if step in (COMMIT_RECORD, WAIT_RECORD):
            await kv.delete(step.name + gid)
        else:
            await bucket.undo(kv, [step], gid, self.seen)

    async def _drain_backlog(self) -> None:
        while True:
            await self._backlog_ready.wait()
            self._backlog_ready = anyio.Event()
            await self.link.wait_connected()
            work, self._backlog = self._backlog, []
            await self._do(work)
            if self._backlog:
                await anyio.sleep(self.upkeep.renew_every / 4)  # failed: not in a tight loop

    # --- reads ----------------------------------------------------------------------

    async def holders(self, keys: Sequence[Key]) -> list[Holding]:
        """Other hosts' claims overlapping the fleet-wide ``keys``, as the bucket says
        now (SPEC §12, one view): the holders of each key's record and of the paths
        below it, and the holders of the shared folders above it. A set whose commit
        record is not there yet (in flight, or rolled back) holds nothing; a host whose
        lease ran out holds nothing. :class:`FleetDown` when the fleet cannot say."""
        fleet = [k for k in keys if self.is_fleet(k)]
        if not fleet:
            return []
        if not (self.link.connected and self.upkeep.ready):
            raise FleetDown(self.link.last_error or "the fleet link is down")
        try:
            with anyio.fail_after(READ_TIMEOUT):
                kv = await bucket.open_bucket(self.link)
                return await self._holders(kv, fleet)
        except NATS_ERRORS as exc:
            raise FleetDown(describe(exc)) from exc

    async def _holders(self, kv: KeyValue, keys: list[Key]) -> list[Holding]:
        out: list[Holding] = []
        seen: set[tuple[str, str]] = set()
        hosts: dict[str, bool] = {}
        for step in plan(keys, self.roots):
            record, _ = await bucket.read(kv, step.name, self.seen)
            entries = record.h if step.role == "intent" else (*record.h, *record.d)
            for e in entries:
                if e.host == self.host:
                    continue  # this host's own are in its table
                if e.host not in hosts:
                    hosts[e.host] = await bucket.alive(kv, e.host)
                if not hosts[e.host]:
                    continue
                try:
                    commit = await kv.get("g." + e.gid)
                except nats.js.errors.KeyNotFoundError:
                    continue
                doc = json.loads(commit.value or b"{}")
                for res in doc.get("k", ()):
                    if (e.gid, res) in seen or not _overlaps(res, keys):
                        continue
                    seen.add((e.gid, res))
                    out.append(Holding(e.session, res, e.mode, e.host, commit.revision or 0))
        return out

    # --- validate -------------------------------------------------------------------

    async def validate(self, key: Key, token: int) -> tuple[bool, str | None, str | None]:
        """Whether ``token`` holds ``key`` in the fleet now: (valid, session, host)."""
        kv = await bucket.open_bucket(self.link)
        try:
            record, _ = await bucket.read(kv, record_name(record_resource(key)))
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
                alive = self.mine(e.gid) if e.host == self.host else await bucket.alive(kv, e.host)
                return alive, e.session, e.host
        except NATS_ERRORS as exc:
            raise FleetDown(describe(exc)) from exc
        return False, None, None

    def lose(self, grant: FleetGrant, resources: list[str], how: str) -> None:
        """The fleet took ``resources`` of ``grant`` from this host: forget them, tell
        the lock table, and delete the commit record once the set is empty."""
        for res in resources:
            grant.keys.pop(res, None)
            self.by_claim.pop((grant.session_id, res), None)
        if not grant.keys:
            self.grants.pop(grant.gid, None)
            self._backlog.append((grant.gid, COMMIT_RECORD))
            self._backlog_ready.set()
        self.local.fleet_lost(grant.session_id, resources, grant.token, how)

    # --- the part's life -----------------------------------------------------------

    async def run(self) -> None:
        """Keep the lease, reconcile at each link-up, watch the records; until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.upkeep.watchdog)
            tg.start_soon(self._drain_backlog)
            await self.upkeep.serve()


def _overlaps(resource: str, keys: list[Key]) -> bool:
    """Whether ``resource`` (a key a set in the fleet holds) overlaps one of ``keys``:
    the key itself, a path below it, or a shared folder above it."""
    try:
        held = from_canonical(resource)
    except BadKey:
        return False
    return any(held.overlaps(k) for k in keys)
