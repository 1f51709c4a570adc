"""Keeping this host's fleet claims true to the bucket while the link lives.

Requests (:class:`meshd.fleet.claims.FleetClaims`) take and give back claims; this
module is the rest of the protocol docs/FLEET.md describes, which no request asks
for: the host's lease key, kept alive, whose loss gives every fleet claim up before
the server lets the lease go; the reconcile at each link-up, which matches the
bucket with the lock table (a restart of meshd, claims taken while cut off,
local-only sets to heal); and the watch on the records, which wakes waiters and
notices claims another host took from this one. Fleet claims are refused until the
reconcile is done (:attr:`ClaimUpkeep.ready`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.kv import KeyValue

from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_bucket import BUCKET, FLEET_ERRORS, gid_in
from meshd.fleet.claim_grants import FleetGrant, FleetHeld, GrantBook
from meshd.fleet.claim_records import Record, record_resource, resource_of
from meshd.fleet.claim_release import FleetReleases
from meshd.fleet.link import FleetDown, FleetLink, describe
from meshd.keys import Key
from meshd.ports import ClaimTable
from meshd.protocol.claims import Mode

log = logging.getLogger("meshd.fleet.claims")

Decide = Callable[[str, Sequence[Key], Mode], Awaitable[FleetGrant | FleetHeld]]
"""Take a set in the fleet now, without waiting for the reconcile
(:meth:`meshd.fleet.claims.FleetClaims.decide`): how a local-only set is healed."""


class ClaimUpkeep:
    """The lease, the reconcile and the watch of one host's fleet claims."""

    def __init__(
        self, link: FleetLink, book: GrantBook, local: ClaimTable, releases: FleetReleases, *,
        decide: Decide, wake: Callable[[str], None], heartbeat: float,
        carried: set[tuple[str, str]] | None = None,
    ) -> None:  # fmt: skip
        self.link = link
        self.host = link.host
        self.book = book
        """This host's fleet claims (shared with the requests that take them)."""
        self.local = local
        """This host's lock table."""
        self.releases = releases
        self._decide = decide
        self._wake = wake
        self.lease_ttl = max(3, round(3 * heartbeat))
        """Seconds the server keeps this host's lease after its last renewal."""
        self.renew_every = self.lease_ttl / 3
        self.lose_after = 2 * self.lease_ttl / 3
        """Without a renewal for this long, this host gives its fleet claims up: before
        the server lets the lease go, whatever the delays (docs/FLEET.md)."""
        self.ready = False
        """True once this host reconciled with the bucket since the link came up, and
        healed every local-only grant (none is left beside a fleet grant meanwhile),
        and while nothing holds fleet claims back (:meth:`_hold_back`)."""
        self.lease_sent: float | None = None
        self.problem: str | None = None
        """Why fleet-wide claims are refused while the link is up (for ``fleet status``)."""
        self._lease_rev = 0
        self._ready = anyio.Event()
        self._reconciled = False
        self._held_back: set[str] = set()
        """Why fleet claims wait although reconciled: ``heal`` (local-only sets being
        healed), ``lease`` (a lost lease's entries swept before it is renewed)."""
        self._sweep_needed = False
        self._heal_wanted = anyio.Event()
        self._carried = carried
        """Until the first reconcile: None (the daemon's start: a claim of the table the
        bucket does not know was lost while meshd was down), or the pairs the previous
        fleet of this process held (a reload made this one: any other claim on a
        fleet-wide key was taken without the fleet, and is offered to it)."""
        self._joined: set[tuple[str, str]] = set()
        """Claims taken before this fleet ran, being offered to it: one another host
        holds is lost as ``fleet-join``."""

    async def until_ready(self) -> None:
        """Return once fleet claims can be decided; :class:`FleetDown` if not soon."""
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

    async def watchdog(self) -> None:
        """Check the lease's age regularly (:meth:`check_lease`); until cancelled."""
        while True:
            self.check_lease(time.monotonic())
            await anyio.sleep(self.renew_every / 4)

    async def serve(self) -> None:
        """At each link-up: keep the lease, reconcile, then watch; until cancelled."""
        while True:
            await self.link.wait_connected()
            self.book.seen.forget()  # the bucket may have been replaced meanwhile
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._keep_lease, tg.cancel_scope)
                    await self._reconcile()
                    self._reconciled = True
                    self._refresh()
                    tg.start_soon(self._watch)
                    tg.start_soon(self._healer)
            except* FLEET_ERRORS as group:  # from the lease, the watch or the reconcile
                log.warning("fleet claims: %s", describe(_first_leaf(group)))
                self.link.forget(BUCKET)  # deleted under a live link: made again, reconciled
            finally:
                self._reconciled = False
                self._held_back.clear()
                self._refresh()
            await anyio.sleep(self.renew_every if self.problem else 0.2)

    def _refresh(self) -> None:
        """:attr:`ready` from the reconcile and what holds fleet claims back; the
        requests waiting for it (:meth:`until_ready`) go on once it is true."""
        self.ready = self._reconciled and not self._held_back
        if self.ready:
            self._ready.set()
        elif self._ready.is_set():
            self._ready = anyio.Event()

    def _hold_back(self, why: str, held: bool) -> None:
        """Fleet claims wait for ``why`` (``held``), or no longer (not ``held``)."""
        if held:
            self._held_back.add(why)
        else:
            self._held_back.discard(why)
        self._refresh()

    async def _keep_lease(self, scope: anyio.CancelScope) -> None:
        kv = await bucket.open_bucket(self.link)
        js = self.link.jetstream()
        subject = f"$KV.{self.link.bucket(BUCKET)}.{bucket.lease_key(self.host)}"
        while self.link.connected:
            while self._sweep_needed:
                # Claims were given up while the link stayed up: their entries go
                # before the lease is renewed (renewed first, they looked alive to the
                # others again, for as long as the sweep took), and no fleet claim is
                # decided here meanwhile (its entries would look dead to the others).
                # Before a reconcile too: what this process holds is all in its book,
                # so nothing it would adopt is swept. Claims lost meanwhile (the
                # watchdog) are swept too; a sweep cut short is done again.
                self._hold_back("lease", True)
                self._sweep_needed = False
                try:
                    await self._sweep_own(kv)
                except BaseException:
                    self._sweep_needed = True
                    raise
            sent = time.monotonic()
            try:
                ack = await js.publish(
                    subject, self.host.encode(),
                    headers={"Nats-Expected-Last-Subject-Sequence": str(self._lease_rev)},
                    msg_ttl=self.lease_ttl,
                )  # fmt: skip
                self._lease_rev = ack.seq
                self.lease_sent = sent
                if "lease" in self._held_back:
                    self._hold_back("lease", False)
            except nats.js.errors.APIError as exc:
                if exc.err_code not in (10071, 10164):
                    raise
                self._lease_rev = await bucket.lease_now(kv, self.host)
                if self.lease_sent is not None:
                    self.lose_all("fleet")  # the lease ran out: the fleet may have let go
                if self._reconciled:  # or the bucket was replaced: reconcile again, refused
                    await self._check_not_reset(kv)
                continue
            await anyio.sleep(self.renew_every)
        scope.cancel()

    def check_lease(self, now: float) -> None:
        """Give the fleet claims up when the lease may have run out (call regularly)."""
        if self.lease_sent is not None and now - self.lease_sent > self.lose_after:
            self.lease_sent = None
            self.lose_all("fleet")

    def lose_all(self, how: str) -> None:
        """Every fleet claim of this host is lost (local-only ones are kept); their
        entries are swept before the lease is renewed (:meth:`_keep_lease`)."""
        for grant in list(self.book.grants.values()):
            self.releases.lose(grant, list(grant.keys), how)
        self._sweep_needed = True

    async def _reconcile(self) -> None:
        """Match the bucket with this host's table after a link-up (docs/FLEET.md):
        adopt this host's commit records that its table still holds (a restart of
        meshd), drop the rest and every entry of this host nobody knows, tell the
        holders of claims the fleet no longer has that they lost them, and ask the
        fleet for the sets granted local-only while it was out of reach, and, at the
        first link-up of a fleet a reload made (``fleet join``), for the claims taken
        before it: those never were the fleet's, so neither lost nor counted in
        :attr:`GrantBook.high`."""
        while self.lease_sent is None:
            await anyio.sleep(0.01)
        kv = await bucket.open_bucket(self.link)
        book = self.book
        held: dict[tuple[str, str], tuple[Key, Mode, int]] = {}
        carried, self._carried = self._carried, None
        for sid, k, mode, token in self.local.fleet_claims():
            if (sid, k.text) in book.local_only:
                continue  # healed below, with any granted meanwhile
            if (sid, k.text) in book.by_claim:
                continue
            if carried is not None and (sid, k.text) not in carried:
                # Taken before this fleet ran (a `fleet join`, a table that made the key
                # fleet-wide): never in the fleet, so neither lost by it nor a token of
                # it; healed below like a local-only grant.
                book.local_only.add((sid, k.text))
                self._joined.add((sid, k.text))
                continue
            held[(sid, k.text)] = (k, mode, token)
            book.high = max(book.high, token)
        await self._adopt(kv, held)
        await self._sweep_own(kv)
        lost: dict[tuple[str, int], list[str]] = {}
        for (sid, res), (_k, _m, token) in held.items():
            if (sid, res) not in book.by_claim:
                lost.setdefault((sid, token), []).append(res)
        for (sid, token), resources in lost.items():
            self.local.fleet_lost(sid, resources, token, "fleet")
        await self._check_not_reset(kv)
        await self._heal_all()

    def _alone(self) -> dict[tuple[str, int, Mode], list[Key]]:
        """The sets of this host's table granted local-only, by (session, token, mode)."""
        alone: dict[tuple[str, int, Mode], list[Key]] = {}
        for sid, k, mode, token in self.local.fleet_claims():
            if (sid, k.text) in self.book.local_only:
                alone.setdefault((sid, token, mode), []).append(k)
        return alone

    async def _heal_all(self) -> None:
        """Ask the fleet for every local-only set, those granted while this runs too
        (a request that met the link reconnecting), until none is left: no fleet-wide
        grant is made on this host before (:attr:`ready` is false meanwhile)."""
        while alone := self._alone():
            for (sid, token, mode), keys in alone.items():
                await self._heal(sid, token, mode, keys)

    def heal_soon(self) -> None:
        """A set was granted local-only: heal it as soon as the fleet can decide."""
        self._heal_wanted.set()

    async def _healer(self) -> None:
        """While the link lives: a set granted local-only meanwhile (a request the
        fleet failed under a link that stayed up) is healed at once, and fleet-wide
        requests wait for it (SPEC §12), instead of waiting for the next link-up."""
        while True:
            await self._heal_wanted.wait()
            self._heal_wanted = anyio.Event()
            if not self._alone():
                continue
            self._hold_back("heal", True)
            await self._heal_all()  # a failure ends the link-up's round: not ready
            self._hold_back("heal", False)

    async def _check_not_reset(self, kv: KeyValue) -> None:
        """Refuse fleet-wide claims while the bucket's last revision is below a token
        already granted: the bucket was deleted (or replaced) and its revisions started
        again at 1, so new tokens would go back. A resource that fences with tokens
        refuses such lower tokens anyway (so this is about liveness, not safety); the
        remedy is the operator's (docs/FLEET.md)."""
        last = (await kv.status()).stream_info.state.last_seq or 0
        if last < self.book.high:
            self.problem = (
                f"the claims bucket {self.link.bucket(BUCKET)} is at revision {last}, below "
                f"token {self.book.high} already granted: it was deleted or replaced"
            )
            raise FleetDown(self.problem)
        self.problem = None

    async def _adopt(
        self, kv: KeyValue, held: dict[tuple[str, str], tuple[Key, Mode, int]]
    ) -> None:
        """This host's commit records: kept where the table holds the set with that
        token (a restart of meshd), deleted otherwise."""
        for name, (value, rev) in (await bucket.scan(kv, "g.>")).items():
            gid = name[2:]
            doc: dict[str, Any] = json.loads(value or b"{}")
            if doc.get("o") != self.host or gid in self.book.grants:
                continue
            sid = str(doc.get("s"))
            mine = {r: held[(sid, r)] for r in doc.get("k", ()) if (sid, r) in held}
            if mine and all(t == rev for _, _, t in mine.values()):
                self.book.hold(FleetGrant(gid, sid, mine[next(iter(mine))][1], rev,
                                            {r: k for r, (k, _, _) in mine.items()}))  # fmt: skip
            else:
                await kv.delete(name)

    async def _sweep_own(self, kv: KeyValue) -> None:
        """Drop every entry of this host that no grant or wait of it knows."""
        for name, (value, _) in (await bucket.scan(kv, "k.>")).items():
            stale = {
                e.gid for e in Record.decode(value).entries()
                if e.host == self.host and not self.book.known(e.gid)
            }  # fmt: skip
            if stale:
                await bucket.drop(kv, name, gid_in(stale), seen=self.book.seen)

    async def _heal(self, sid: str, token: int, mode: Mode, keys: list[Key]) -> None:
        """A set granted local-only (or before this host joined): the fleet grants it
        now (it becomes fleet-wide, with the fleet's token), or another host holds it
        and it is lost here."""
        got = await self._decide(sid, keys, mode)
        joined = False
        for k in keys:
            self.book.local_only.discard((sid, k.text))
            if (sid, k.text) in self._joined:
                self._joined.discard((sid, k.text))
                joined = True
        if isinstance(got, FleetGrant):
            self.local.fleet_healed(sid, keys, token, got.token)
        else:
            how = "fleet-join" if joined else "fleet-conflict"
            self.local.fleet_lost(sid, [k.text for k in keys], token, how)

    async def _watch(self) -> None:
        """Wake waiters on a record's change; notice claims taken from this host.

        On the link's watch connection, with a callback that does as little as it
        can: its deliveries come with every claim and release any host makes, the
        host's own among them (docs/PERFORMANCE.md). This host's own writes were
        handled when they landed (:meth:`Seen.wrote` woke its waiters): their echo is
        dropped at once. A record is decoded only when a request uses its hint or one
        of this host's grants may have lost it."""
        await bucket.open_bucket(self.link, watch=True)  # made by the reconcile
        js = self.link.watch_js
        if js is None:
            raise FleetDown(self.link.last_error or "the fleet link is down")
        name = self.link.bucket(BUCKET)
        prefix = f"$KV.{name}."
        cut = len(prefix)
        seen = self.book.seen

        async def on_msg(msg: Msg) -> None:
            key = msg.subject[cut:]
            revision = msg.metadata.sequence.stream
            data = msg.data or b""
            if seen.echo(key, data, revision):
                return  # this host's own write: its waiters were woken when it landed
            seen.saw(key, data, revision)  # first: who wakes uses it
            self._wake(key)
            if self.book.grants:
                self._check_losses(key, revision)

        born = await bucket.made_at(js, name)  # before the consumer: no change missed
        sub = await js.subscribe(
            f"{prefix}k.>", stream=f"KV_{name}", cb=on_msg, ordered_consumer=True,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, inactive_threshold=300,
        )  # fmt: skip
        try:
            while self.link.connected:
                await anyio.sleep(self.renew_every)
                if await bucket.replaced(js, name, born):
                    # deleted, or made again: this consumer follows the old one's
                    # sequences and would miss the new one's records (waiters not
                    # woken, losses unseen); reconciled with the new one instead
                    raise FleetDown(f"the claims bucket {name} was deleted or made again")
        finally:
            # Nothing watched from here on: the hints would go stale unseen (a bucket
            # replaced meanwhile among them). The next link-up forgets them too.
            seen.forget()
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                try:
                    await sub.unsubscribe()
                except FLEET_ERRORS as exc:
                    log.debug("fleet: stopping the watch: %s", describe(exc))

    def _check_losses(self, name: str, revision: int) -> None:
        """Grants of this host that the record no longer lists were taken (a steal, or
        another host dropped them as dead): they are lost here too. The record is
        decoded only if a grant has a key in it written below ``revision``."""
        resource = resource_of(name)
        if resource is None:
            return
        holders: set[str] | None = None
        for grant in list(self.book.grants.values()):
            if revision <= grant.revs.get(name, 0):
                continue
            gone = [r for r, k in grant.keys.items() if record_resource(k) == resource]
            if not gone:
                continue
            if holders is None:
                found = self.book.seen.get(name)
                if found is None or found[1] != revision:
                    return  # not kept (an older version): the next read decides
                holders = {e.gid for e in found[0].h}
            if grant.gid not in holders:
                self.releases.lose(grant, gone, "fleet-stolen")


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception of ``group`` that is not a group itself."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
