"""Fleet-wide claims: decided in the profile's KV bucket by compare-and-set (SPEC §12).

:class:`FleetClaims` is what the claims domain calls (the
:class:`~meshd.ports.FleetClaimsPort`): take a set, stand in line, give claims back,
check a token (docs/FLEET.md, "Fleet-wide claims"). The handler asks it *before*
the core records a grant, and hands the core the KV token, so the core stays pure
and a fleet grant is committed to SQLite before the reply like any other.

In short: a set writes an entry into the record of each resource it touches, in
one global order, rolling back on a conflict; then creates its commit record,
whose revision is the set's fencing token. That is this module; the rest lives
beside it, one thing per module, all sharing one
:class:`~meshd.fleet.claim_grants.GrantBook` (this host's grants, waits and
local-only sets):

* what a record means and the conflict rule -- :mod:`~meshd.fleet.claim_records`
  (pure); how a record is read and written -- :mod:`~meshd.fleet.claim_bucket`;
* standing in line and being woken -- :mod:`~meshd.fleet.claim_line`;
* giving claims back, and losing them -- :mod:`~meshd.fleet.claim_release`;
* who holds a key, whether a token is valid -- :mod:`~meshd.fleet.claim_holders`;
* the lease, the reconcile at each link-up and the watch that no request asks
  for -- :mod:`~meshd.fleet.claim_upkeep`;
* the commit records and leases kept in memory for the listings --
  :mod:`~meshd.fleet.claim_mirror`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Literal

import anyio
from nats.js.kv import KeyValue

from meshd.core.settings import FleetSettings
from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_bucket import MAX_TRIES, NATS_ERRORS, PATIENCE, TIMEOUTS
from meshd.fleet.claim_grants import WAIT_RECORD, FleetGrant, FleetHeld, FleetWaiter, GrantBook
from meshd.fleet.claim_holders import FleetHolders
from meshd.fleet.claim_line import FleetLine
from meshd.fleet.claim_mirror import ClaimMirror
from meshd.fleet.claim_records import Entry, Record, Step, blockers, fleet_wide, plan, set_value
from meshd.fleet.claim_release import FleetReleases
from meshd.fleet.claim_upkeep import ClaimUpkeep
from meshd.fleet.link import FleetDown, FleetLink, describe
from meshd.keys import Key
from meshd.ports import ClaimTable, Holding
from meshd.protocol.claims import Mode


class FleetClaims:
    """This host's side of the fleet's claims (one per profile's daemon)."""

    def __init__(
        self, link: FleetLink, local: ClaimTable, *, heartbeat: float,
        carried: set[tuple[str, str]] | None = None,
    ) -> None:  # fmt: skip
        self.link = link
        self.local = local
        self.host = link.host
        self.roots = link.cfg.shared_paths
        self.kinds = frozenset(link.cfg.shared_kinds)
        self.book = book = GrantBook(link.host_token)
        """This host's grants, acquires in flight, waits and local-only sets."""
        self.grants = book.grants
        self.by_claim = book.by_claim
        self.local_only = book.local_only
        self.local_only.update(local.restored_local_only())  # granted so before a restart
        self.seen = book.seen
        self.line = FleetLine(link, book, self.roots, lambda: self.ready)
        """Requests in line, and the events that wake them."""
        book.seen.on_write = self.line.wake  # a write of this host landed: its waiters
        # there try again now, without waiting for the watch's echo (Seen.wrote)
        self.releases = FleetReleases(
            link, book, self.roots, local, pace=lambda: self.upkeep.renew_every
        )
        """Claims given back or lost, and the writes that say so."""
        self.mirror = ClaimMirror(link, check_every=lambda: self.upkeep.renew_every)
        """The commit records and leases in memory: what the listings read."""
        self.reads = FleetHolders(
            link, book, self.roots, self.mirror, is_fleet=self.is_fleet, ready=lambda: self.ready
        )
        """Who holds a key in the fleet, whether a token is valid."""
        self.upkeep = ClaimUpkeep(
            link, book, local, self.releases, decide=self.decide, wake=self.line.wake,
            heartbeat=heartbeat, carried=carried,
        )  # fmt: skip
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

    @property
    def high(self) -> int:
        """The highest fleet token this host granted or holds."""
        return self.book.high

    def status(self) -> dict[str, Any]:
        """For ``fleet status``: fleet-wide claims held here, and the local-only ones."""
        return {
            "ready": self.upkeep.ready,
            "problem": self.upkeep.problem,
            "high_token": self.book.high,
            "grants": len(self.grants),
            "local_only": [f"claim {res} ({sid})" for sid, res in sorted(self.local_only)],
            "view": self.mirror.status(),
        }

    # --- scope ----------------------------------------------------------------------

    def is_fleet(self, key: Key) -> bool:
        """Whether ``key`` is decided by the fleet (a shared kind, or under a shared path)."""
        return fleet_wide(key, self.kinds, self.roots)

    def split(self, keys: Sequence[Key]) -> tuple[list[Key], list[Key]]:
        """``keys`` split into (fleet-wide, local)."""
        fleet = [k for k in keys if self.is_fleet(k)]
        return fleet, [k for k in keys if not self.is_fleet(k)]

    # --- plumbing -------------------------------------------------------------------

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
                if self.upkeep.ready and not self.book.known(e.gid):
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
        reason: str = "",
    ) -> FleetGrant | FleetHeld:
        """Take the whole set in the fleet, or nothing (docs/FLEET.md); ``reason`` goes
        in its commit record, for every host to report.

        Raises :class:`FleetDown` when the fleet cannot be reached (what it wrote is
        rolled back as far as it can be; the rest is dropped at the next reconcile).
        Waits for the reconcile at a link-up, local-only grants healed included.
        """
        await self.upkeep.until_ready()
        return await self.decide(session_id, keys, mode, waiter=waiter, steal=steal, reason=reason)

    async def decide(
        self,
        session_id: str,
        keys: Sequence[Key],
        mode: Mode,
        *,
        waiter: FleetWaiter | None = None,
        steal: bool = False,
        reason: str = "",
    ) -> FleetGrant | FleetHeld:
        """:meth:`acquire` without waiting for the reconcile: the reconcile's own heal
        of local-only sets."""
        if not self.link.connected:
            raise FleetDown(self.link.last_error or "the fleet link is down")
        kv = await bucket.open_bucket(self.link)
        gid = waiter.gid if waiter is not None else self.book.gid()
        me = Entry(gid, session_id, self.host, mode, waiter.ticket if waiter else 0)
        steps = plan(keys, self.roots)
        done: list[Step] = []
        revs: dict[str, int] = {}
        value = set_value(keys, session_id, self.host, mode, reason)
        commit = bucket.Commit(kv, "g." + gid, value, alongside=len(steps) == 1)
        self.book.inflight.add(gid)
        try:
            for step in steps:
                blocking, rev = await self._take(kv, step, me, steal, commit)
                if blocking:
                    await bucket.undo(kv, done, gid, self.seen)
                    return FleetHeld(tuple((step.resource, e) for e in blocking))
                done.append(step)
                revs[step.name] = rev
            token = await commit.token()
            self.mirror.own_commit(commit.name, value, token)
            grant = FleetGrant(gid, session_id, mode, token, {k.text: k for k in keys}, revs)
            # A key this session held under an earlier grant (a mode change) is now
            # this grant's: the earlier one gives it back, or its entry and token
            # would stay in the fleet, valid and in everyone's way, for good.
            self.releases.release_soon(session_id, self._earlier(session_id, keys, gid))
            self.book.hold(grant)  # before it leaves inflight: never unknown here, so never "dead"
        except BaseException as exc:
            if (made := self.grants.get(gid)) is not None:  # cancelled after the commit
                self.releases.let_go(session_id, [(r, made.token) for r in made.keys])
            with anyio.CancelScope(shield=True), contextlib.suppress(*NATS_ERRORS):
                # what fails here is dropped at the next reconcile: no grant knows it
                if made is not None or commit.tried:
                    await kv.delete(commit.name)
                await bucket.undo(kv, done, gid, self.seen)
            if isinstance(exc, NATS_ERRORS):
                raise FleetDown(describe(exc)) from exc
            raise
        finally:
            self.book.inflight.discard(gid)
        if waiter is not None:
            self.book.waiters.pop(gid, None)
            self.releases.later([(gid, WAIT_RECORD)])
        return grant

    def _earlier(self, session_id: str, keys: Sequence[Key], gid: str) -> list[tuple[str, int]]:
        """(resource, token) of ``keys`` that ``session_id`` holds under another grant."""
        out = []
        for k in keys:
            held = self.by_claim.get((session_id, k.text))
            if held is not None and held != gid:
                out.append((k.text, self.grants[held].token))
        return out

    def granted_alone(self, session_id: str, keys: Sequence[Key]) -> None:
        """These keys were granted here alone (``on_partition = "local"``), marked
        local-only until the fleet decides them: at once if the link is up."""
        self.local_only.update((session_id, k.text) for k in keys)
        self.upkeep.heal_soon()

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

    # --- the line, releases and reads (each its own part) ------------------------

    async def enqueue(self, session_id: str, keys: Sequence[Key], mode: Mode) -> FleetWaiter:
        """Stand in line for ``keys`` (:meth:`FleetLine.enqueue`)."""
        return await self.line.enqueue(session_id, keys, mode)

    async def dequeue(self, waiter: FleetWaiter) -> None:
        """Leave the line; never raises (:meth:`FleetLine.dequeue`)."""
        await self.line.dequeue(waiter)

    def arm(self, keys: Sequence[Key]) -> list[anyio.Event]:
        """Events set at the next change of a record of ``keys`` (:meth:`FleetLine.arm`)."""
        return self.line.arm(keys)

    async def changed(self, events: list[anyio.Event], timeout: float) -> None:
        """Until one of ``events`` is set, or ``timeout`` (:meth:`FleetLine.changed`)."""
        await self.line.changed(events, timeout)

    async def back(self, timeout: float) -> None:
        """Until the fleet decides claims again, or ``timeout`` (:meth:`FleetLine.back`)."""
        await self.line.back(timeout)

    def paused(self, session_id: str) -> None:
        """``session_id``'s requests leave the line (:meth:`FleetLine.paused`)."""
        self.line.paused(session_id)

    def waiting(self) -> list[FleetWaiter]:
        """This host's requests in line, first come first."""
        return self.line.waiting()

    async def release(self, session_id: str, claims: Iterable[tuple[str, int]]) -> None:
        """Out of the fleet too; never raises (:meth:`FleetReleases.release`)."""
        await self.releases.release(session_id, claims)

    def release_soon(self, session_id: str, claims: Iterable[tuple[str, int]]) -> None:
        """Forgotten now, written soon (:meth:`FleetReleases.release_soon`)."""
        self.releases.release_soon(session_id, claims)

    async def holders(self, keys: Sequence[Key]) -> list[Holding]:
        """Other hosts' claims on fleet-wide ``keys`` now (:meth:`FleetHolders.holders`)."""
        return await self.reads.holders(keys)

    async def held(self, session_id: str | None = None) -> list[Holding]:
        """Other hosts' fleet claims now, of one session or all (:meth:`FleetHolders.held`)."""
        return await self.reads.held(session_id)

    async def validate(self, key: Key, token: int) -> tuple[bool, str | None, str | None]:
        """Whether ``token`` holds ``key`` in the fleet now (:meth:`FleetHolders.validate`)."""
        return await self.reads.validate(key, token)

    # --- the part's life -----------------------------------------------------------

    async def run(self) -> None:
        """Keep the lease, reconcile at each link-up, watch the records, mirror the
        commit records; until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.upkeep.watchdog)
            tg.start_soon(self.releases.drain)
            tg.start_soon(self.mirror.run)
            await self.upkeep.serve()
