"""``claim.*`` and ``audit.log``: advisory claims with fencing tokens (SPEC §5).

Keys arrive as the user typed them and are made canonical here (that reads the
filesystem, so it is not the core's job). A request with ``wait`` queues in the
core and is answered later, by a record (:class:`_Wait`), not a waiting task:
when the core grants it -- the grant is told by whichever release freed it, after
that release is committed -- or when the wait runs out (one timer for all waits),
when the request is withdrawn and answered ``held``. Waits are not durable: a
waiter whose connection closes is withdrawn.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from meshd.core.claim_records import (
    ENDING,
    AuditAction,
    AuditRecord,
    Cancelled,
    Claim,
    Fencing,
    Granted,
    Held,
    Mode,
    Previous,
    Queued,
)
from meshd.core.state import Outcome, Write
from meshd.domain import Domain
from meshd.handlers.fleet import FleetDomain
from meshd.keys import Key, canonical_key, describe, from_canonical
from meshd.protocol import claims as pc
from meshd.protocol.contract import rfc3339
from meshd.protocol.errors import BadKey, InvalidParams, MeshError, MeshUnavailable
from meshd.protocol.jsonrpc import Later
from meshd.service import Conn, Service
from meshd.store.claims import audit_page, load_claims, load_fencing

if TYPE_CHECKING:
    from meshd.core.state import Event
    from meshd.fleet.claim_grants import FleetGrant, FleetHeld
    from meshd.fleet.claims import FleetClaims

HOME = os.path.expanduser("~")


class _Wait(Later):
    """One queued ``claim.acquire``: the reply it owes, kept beside its place in the
    core's queue. Answered by :meth:`ClaimHandlers.resolve` (granted, withdrawn, or its
    commit failed, always after the commit that settled it) or after its deadline
    (:meth:`ClaimHandlers._run_out`); withdrawn if its connection closes first.

    No task and no coroutine frames while it waits: 10,000 of them wait at once in a
    storm, and each task with its five frames was tracked by the cyclic collector
    (~60 middle-generation collections of 1-10 ms per storm, and a full one walking
    them all). A record, its reply sink and one shared timer are all that stay.
    """

    __slots__ = ("deadline", "owner", "t0", "waiter_id")

    def __init__(self, owner: ClaimHandlers, waiter_id: str, deadline: float) -> None:
        super().__init__()
        self.owner = owner
        self.waiter_id = waiter_id
        self.deadline = deadline
        """On the event loop's clock (``loop.time()``)."""
        self.t0 = time.monotonic()

    def withdraw(self) -> None:
        self.owner._withdraw(self)

    def answer(self, outcome: Granted | Held) -> None:
        h, waited = self.owner, time.monotonic() - self.t0
        if isinstance(outcome, Granted):
            self.settle(h._granted(outcome, waited))
        else:
            self.settle(h._held(outcome, waited))


def _release_record(c: Claim, now_wall: float) -> AuditRecord:
    """The audit line (and live-claims delete) of ``c``'s clean release."""
    return AuditRecord(
        now_wall, "release", c.session_id, c.resource, c.mode, c.token, c.reason, "released",
        None, c.ttl,
    )  # fmt: skip


class ClaimHandlers(Domain):
    name = "claims"

    def __init__(self, svc: Service) -> None:
        super().__init__(svc)
        self.waits: dict[str, _Wait] = {}
        self._deadlines: list[tuple[float, str]] = []
        """A heap of (deadline, waiter id) over :attr:`waits`; entries of waits that
        ended already are skipped when they come up (and pruned when they pile up)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._ids = itertools.count(1)
        self._wake_pending = False

    def install(self) -> None:
        svc = self.svc
        spec = {s.name: s for s in pc.CLAIM_METHODS}
        svc.add(spec["claim.acquire"], self.acquire, is_async=True, concurrent=True)
        svc.add(spec["claim.release"], self.release, is_async=True)
        svc.add(spec["claim.check"], self.check, is_async=True)
        svc.add(spec["claim.list"], self.list)
        svc.add(spec["claim.validate"], self.validate, is_async=True)
        svc.add(spec["claim.steal"], self.steal, is_async=True)
        svc.add(spec["audit.log"], self.audit, is_async=True)
        self._fleet = svc.domain(FleetDomain)

    # --- the fleet (SPEC §12): what FleetClaims asks of this host's table -------------

    def fleet(self) -> FleetClaims | None:
        """This host's fleet claims, or None when it is alone (no ``[fleet]``)."""
        fleet = self._fleet.fleet
        return None if fleet is None else fleet.claims

    def fleet_claims(self) -> list[tuple[str, Key, Mode, int]]:
        fc = self.fleet()
        if fc is None:
            return []
        return [
            (c.session_id, c.key, c.mode, c.token)
            for c in self.svc.state.claims.list_claims()
            if fc.is_fleet(c.key)
        ]

    def fleet_healed(self, session_id: str, keys: list[Key], old: int, new: int) -> None:
        self.svc.state.claims.retoken(session_id, keys, old, new, how="fleet")
        self.svc.flush_background()

    def fleet_lost(self, session_id: str, resources: list[str], token: int, how: str) -> None:
        self.svc.state.claims.lose(
            session_id, [from_canonical(r) for r in resources], token, how=how
        )
        self.svc.flush_background()

    def related(self, a: str, b: str) -> bool:
        return self.svc.state.claims.related(a, b)

    def committed(self, writes: list[Write], events: list[Event]) -> None:
        """Fleet-wide claims that ended here (session end, death, ttl, a local steal)
        leave the fleet too; a clean release does so itself (:meth:`release`)."""
        fc = self.fleet()
        if fc is None:
            return
        for w in writes:
            if w[0] == "claim.audit" and w[1].action in ENDING:
                rec: AuditRecord = w[1]
                fc.local_only.discard((rec.session_id, rec.resource))
                if (rec.session_id, rec.resource) in fc.by_claim:
                    fc.release_soon(rec.session_id, [(rec.resource, rec.token)])

    def prune(self, history_days: float) -> None:
        """The audit log older than ``history_days`` (SPEC §2), and the recent losses
        of sessions that are gone."""
        cutoff = self.svc.clock.now() - history_days * 86400
        self.svc.state.writes.append(("audit.prune", cutoff))
        self.svc.state.prune_losses()

    def restore(self, db: sqlite3.Connection) -> None:
        """Claims of restored sessions come back; tokens resume above every stored block."""
        state = self.svc.state
        state.claims.fencing = Fencing(reserved=load_fencing(db))
        now_w = state.clock.now()
        for c in load_claims(db):
            if c.session_id not in state.registry.sessions:
                continue
            ttl_left = c.ttl_left(now_w)  # never more than the whole ttl (clock steps)
            state.claims.restore(
                c.session_id, from_canonical(c.resource), mode="shared" if c.mode == "shared"
                else "exclusive", token=c.token, reason=c.reason, since=c.since,
                ttl_left=ttl_left,
            )  # fmt: skip

    # --- helpers --------------------------------------------------------------------

    def _expire(self) -> None:
        """Free claims whose ttl ran out before answering (the sweeper may not have yet)."""
        if self.svc.state.claims.expire_ttls():
            self.svc.flush_background()

    async def _keys(self, resources: list[str], broad: bool) -> list[Key]:
        """The canonical keys; paths are resolved off the event loop (see resolver)."""
        return await self.svc.resolve_paths(
            resources, lambda: [canonical_key(r, home=HOME, broad=broad) for r in resources]
        )

    async def _key(self, resource: str) -> Key:
        return (await self._keys([resource], True))[0]

    def _holder(self, c: Claim) -> pc.ClaimHolder:
        s = self.svc.state.registry.sessions.get(c.session_id)
        return pc.ClaimHolder(
            session_id=c.session_id, resource=c.resource, task=s.task if s else "",
            since=rfc3339(c.since), reason=c.reason, mode=c.mode, profile=self.svc.state.profile,
            branch=s.branch if s else None,
        )  # fmt: skip

    def warning(self, c: Claim) -> str:
        """The human sentence: "cli:… is editing ~/p (branch x) since 14:02 — task"."""
        s = self.svc.state.registry.sessions.get(c.session_id)
        verb = "editing" if c.key.is_path else "holding"
        branch = f" (branch {s.branch})" if s is not None and s.branch else ""
        since = datetime.fromtimestamp(c.since).strftime("%H:%M")
        what = (s.task if s is not None and s.task else "") or c.reason
        tail = f" — {what}" if what else ""
        return f"{c.session_id} is {verb} {describe(c.key, home=HOME)}{branch} since {since}{tail}"

    @staticmethod
    def _previous(p: Previous) -> pc.ClaimPrevious:
        return pc.ClaimPrevious(
            resource=p.resource, session_id=p.session_id, how=p.how, at=rfc3339(p.at)
        )

    def _granted(self, g: Granted, waited: float = 0.0) -> pc.ClaimAcquireResult:
        prev = {p.resource: self._previous(p) for p in g.previous}
        grants = [
            pc.ClaimGrant(
                resource=c.resource, mode=c.mode, token=c.token,
                already_held=c.resource in g.held_before, previous=prev.get(c.resource),
            )
            for c in g.claims
        ]  # fmt: skip
        return pc.ClaimAcquireResult(
            status="granted", claims=grants, token=g.token, already_held=g.already_held,
            previous=next(iter(prev.values()), None),
            stolen=[self._holder(c) for c in g.stolen], waited_s=round(waited, 3),
        )  # fmt: skip

    def _held(self, h: Held, waited: float = 0.0) -> pc.ClaimAcquireResult:
        ahead = [
            pc.ClaimWaiting(
                session_id=w.session_id, resources=list(w.resources), mode=w.mode,
                since=rfc3339(w.since),
            )
            for w in h.ahead
        ]  # fmt: skip
        return pc.ClaimAcquireResult(
            status="held", holders=[self._holder(c) for c in h.holders], deadlock=h.deadlock,
            ahead=ahead, more_ahead=h.more_ahead, waited_s=round(waited, 3),
        )  # fmt: skip

    # --- acquire / steal --------------------------------------------------------------

    async def _prepare(
        self, session_id: str, resources: list[str], broad: bool
    ) -> list[Key] | None:
        """The checks acquire and steal share: None when the mesh is switched off."""
        st = self.svc.state
        if not st.settings.enabled:
            return None
        st.registry.get(session_id)
        keys = await self._keys(resources, broad)
        st.registry.get(session_id)  # it may have ended while the paths were resolved
        self._expire()
        return keys

    async def acquire(self, p: pc.ClaimAcquireParams, conn: Conn) -> pc.ClaimAcquireResult | Later:
        st = self.svc.state
        keys = await self._prepare(p.session_id, p.resources, p.broad)
        if keys is None:
            return pc.ClaimAcquireResult(status="granted", disabled=True)
        wait = min(p.wait, st.settings.max_query_timeout)
        if (fc := self.fleet()) is not None and self._fleet_set(fc, keys):
            return await self._acquire_fleet(
                fc, p.session_id, keys, mode=p.mode, reason=p.reason, ttl=p.ttl, wait=wait,
                conn=conn,
            )  # fmt: skip
        waiter_id = f"c{conn.id}.{next(self._ids)}" if wait > 0 else None
        outcome = st.claims.acquire(
            p.session_id, keys, mode=p.mode, reason=p.reason, ttl=p.ttl,
            wait=waiter_id is not None, waiter_id=waiter_id,
        )  # fmt: skip
        if isinstance(outcome, Granted):
            await self._commit_grant(outcome)
            return self._granted(outcome)
        if isinstance(outcome, Held):
            return self._held(outcome)
        return self._queue(outcome, wait)  # answered later; the connection reads on

    @staticmethod
    def _fleet_set(fc: FleetClaims, keys: list[Key]) -> bool:
        """Whether the set is fleet-wide; a set mixing fleet-wide and local keys is
        refused: it would have two tokens from two counters (docs/FLEET.md)."""
        fleet, local = fc.split(keys)
        if fleet and local:
            raise BadKey(
                f"{fleet[0].text} is fleet-wide and {local[0].text} is local: a set is "
                "one or the other (their fencing tokens come from different counters); "
                "claim them in two calls",
                {"key": fleet[0].text, "local": local[0].text},
            )
        return bool(fleet)

    async def _acquire_fleet(
        self, fc: FleetClaims, sid: str, keys: list[Key], *, mode: Mode, reason: str,
        ttl: float | None, wait: float, conn: Conn, steal: bool = False,
    ) -> pc.ClaimAcquireResult:  # fmt: skip
        """A fleet-wide set: decided in the fleet first (docs/FLEET.md), then recorded
        here with the fleet's token and committed before the reply."""
        from meshd.fleet.claim_grants import FleetGrant
        from meshd.fleet.link import FleetDown

        st = self.svc.state
        mine = {c.resource: c for c in st.claims.list_claims(sid)}
        new = [k for k in keys if k.text not in mine or mine[k.text].mode != mode]
        if new and not steal:
            local = [c for c in st.claims.check(keys, sid) if (c.session_id, c.resource)
                     in fc.local_only or not fc.is_fleet(c.key)]  # fmt: skip
            if local:
                return self._held(Held(tuple(local)))
        token: int | None = None
        if new:
            t0 = time.monotonic()
            try:
                got = await self._fleet_wait(fc, sid, new, mode, wait=wait, conn=conn, steal=steal)
            except FleetDown as exc:
                if fc.cfg.on_partition != "local":
                    raise MeshUnavailable(
                        f"{new[0].text} is fleet-wide and the fleet cannot be reached "
                        f"({exc}); on_partition = \"fail\"", {"resource": new[0].text},
                    ) from exc  # fmt: skip
                got = None  # granted here alone, marked local-only
            if got is not None and not isinstance(got, FleetGrant):
                return self._fleet_held(got, time.monotonic() - t0)
            token = None if got is None else got.token
        try:
            st.registry.get(sid)  # it may have ended while the fleet answered
            if steal:
                outcome: Granted | Held | Queued = st.claims.steal(
                    sid, keys, reason=reason, mode=mode, ttl=ttl, token=token,
                )  # fmt: skip
            else:
                outcome = st.claims.acquire(
                    sid, keys, mode=mode, reason=reason, ttl=ttl, token=token,
                )  # fmt: skip
            if not isinstance(outcome, Granted):
                await fc.release(sid, [(k.text, token) for k in new if token is not None])
                return self._held(outcome) if isinstance(outcome, Held) else self._held(Held(()))
            if token is None and new:
                fc.local_only.update((sid, k.text) for k in new)
            await self._commit_grant(outcome, victims=outcome.stolen)
        except BaseException:
            if token is not None:
                await fc.release(sid, [(k.text, token) for k in new])
            raise
        return self._granted(outcome)

    async def _fleet_wait(
        self, fc: FleetClaims, sid: str, keys: list[Key], mode: Mode, *, wait: float,
        conn: Conn, steal: bool,
    ) -> FleetGrant | FleetHeld:  # fmt: skip
        """Ask the fleet until granted or ``wait`` runs out (in line by ticket, woken by
        the watch on the records); the last answer: a FleetGrant or a FleetHeld.

        Under ``on_partition = "fail"`` a request with time left waits out a fleet that
        cannot be reached (a reconnect, a server restart) and tries again once it is
        back; :class:`FleetDown` (UNAVAILABLE) only when the wait runs out first.
        Under ``"local"`` it is raised at once: the caller grants local-only."""
        from meshd.fleet.claim_grants import FleetHeld
        from meshd.fleet.link import FleetDown

        deadline = time.monotonic() + wait
        waiter = None
        granted = False
        try:
            while True:
                events = fc.arm(keys)
                try:
                    got = await fc.acquire(sid, keys, mode, waiter=waiter, steal=steal)
                except FleetDown:
                    left = deadline - time.monotonic()
                    if left <= 0 or fc.cfg.on_partition == "local":
                        raise
                    conn.detach()
                    await fc.back(left)
                    self.svc.state.registry.get(sid)  # ended while waiting: stop
                    continue
                left = deadline - time.monotonic()
                granted = not isinstance(got, FleetHeld)
                if granted or left <= 0:
                    return got
                if waiter is None:
                    conn.detach()
                    waiter = await fc.enqueue(sid, keys, mode)
                    continue  # try again at once, now with a place in line
                # a lease that runs out changes no record: look again now and then
                await fc.changed(events, min(left, fc.upkeep.renew_every))
                self.svc.state.registry.get(sid)  # ended while waiting: stop
        finally:
            if waiter is not None and not granted:
                await fc.dequeue(waiter)

    def _fleet_held(self, h: FleetHeld, waited: float) -> pc.ClaimAcquireResult:
        """``held`` by entries in the fleet (perhaps on other hosts)."""
        holders = []
        for resource, e in h.blocking:
            s = self.svc.state.registry.sessions.get(e.session) if e.host == self._host() else None
            holders.append(
                pc.ClaimHolder(
                    session_id=e.session, resource=resource, task=s.task if s else "",
                    since="", reason="waiting" if e.ticket else "", mode=e.mode,
                    profile=self.svc.state.profile, host=e.host,
                )
            )  # fmt: skip
        return pc.ClaimAcquireResult(status="held", holders=holders, waited_s=round(waited, 3))

    def _host(self) -> str | None:
        fleet = self._fleet.fleet
        return None if fleet is None else fleet.host

    async def keys_of(self, resources: list[str], broad: bool) -> list[Key]:
        """Canonical keys for what the user typed (after a ttl sweep)."""
        keys = await self._keys(resources, broad)
        self._expire()
        return keys

    async def acquire_keys(
        self, sid: str, keys: Sequence[Key], *, mode: Mode, reason: str, wait: float, conn: Conn
    ) -> pc.ClaimAcquireResult:
        """``claim.acquire`` for canonical keys (``session.resume`` queues with it)."""
        st = self.svc.state
        waiter_id = f"c{conn.id}.{next(self._ids)}" if wait > 0 else None
        outcome = st.claims.acquire(
            sid, keys, mode=mode, reason=reason, wait=waiter_id is not None, waiter_id=waiter_id
        )
        if isinstance(outcome, Granted):
            await self._commit_grant(outcome)
            return self._granted(outcome)
        if isinstance(outcome, Held):
            return self._held(outcome)
        conn.detach()  # the caller goes on in this task once this is answered
        result: pc.ClaimAcquireResult = await self._queue(outcome, wait).outcome()
        return result

    def audit_rows(
        self, sid: str, resources: Iterable[str], action: AuditAction, *,
        by: str | None = None, reason: str = "", how: str = "",
    ) -> list[Write]:  # fmt: skip
        """Audit rows that name no claim (token 0): a preemption asked, a pause, a resume."""
        now = self.svc.clock.now()
        return [
            ("claim.audit", AuditRecord(now, action, sid, res, "exclusive", 0, reason, how, by))
            for res in list(resources) or [""]
        ]

    async def _commit_grant(self, g: Granted, victims: tuple[Claim, ...] = ()) -> None:
        """Commit a grant; if it cannot be stored, take it back before saying UNAVAILABLE.

        An unacknowledged grant must not keep others out, and a refused steal must
        not cost its ``victims`` their claims: they are put back first (the same
        token, still valid), then the grant is released, so whoever waits sees the
        victims, not a free key. The take-back is an ordinary release (queued for
        the log; the store keeps it for when the disk recovers).
        """
        try:
            await self.svc.commit()
        except MeshError:
            self._put_back(victims)
            self._take_back(g)
            raise

    def _put_back(self, victims: tuple[Claim, ...]) -> None:
        """Give back claims a refused steal took (their removal was never stored)."""
        st, now_m = self.svc.state, self.svc.clock.monotonic()
        for c in victims:
            if c.session_id not in st.registry.sessions:
                continue  # ended meanwhile: its end released the claim on disk too
            st.claims.restore(
                c.session_id, c.key, mode=c.mode, token=c.token, reason=c.reason,
                since=c.since, ttl_left=None if c.deadline is None else c.deadline - now_m,
            )  # fmt: skip

    def _take_back(self, g: Granted) -> None:
        """Undo grant ``g`` (its commit failed: not acknowledged): release what it newly
        gave, and put the claims it refreshed back as they were (ttl, reason).

        A grant of keys all held already (a refresh) gave nothing new: there is nothing
        to release (``release`` refuses an empty list, and that answered INTERNAL)."""
        new = [c.key for c in g.claims if c.resource not in g.held_before]
        self.svc.state.claims.unrefresh(g.refreshed)
        if new:
            self.svc.state.claims.release(g.session_id, new)
            self.svc.flush_background()

    def _queue(self, q: Queued, wait: float) -> _Wait:
        """The record that answers queued request ``q`` within ``wait`` seconds."""
        loop = asyncio.get_running_loop()
        w = self.waits[q.waiter_id] = _Wait(self, q.waiter_id, loop.time() + wait)
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self.waits) + 64:  # mostly waits that ended: prune
            deadlines[:] = [(x.deadline, x.waiter_id) for x in self.waits.values()]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (w.deadline, q.waiter_id))
        self._arm(loop)
        return w

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """One timer for every wait: set for the earliest deadline."""
        if not self._deadlines:
            return
        first = self._deadlines[0][0]
        if self._timer is not None:
            if self._timer_at <= first:
                return
            self._timer.cancel()
        self._timer_at = first
        self._timer = loop.call_at(first, self._run_out)

    def _run_out(self) -> None:
        """Withdraw every wait whose time ran out; each is answered ``held`` once what
        the withdrawals let go (later waiters' grants) is committed (:meth:`resolve`)."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = max(loop.time(), self._timer_at)
        deadlines, waits, claims = self._deadlines, self.waits, self.svc.state.claims
        withdrawn = False
        while deadlines and deadlines[0][0] <= now:
            _, wid = heapq.heappop(deadlines)
            if wid in waits:
                # None: granted just now, its commit in flight; resolve answers it
                withdrawn |= claims.cancel_waiter(wid, why="timeout") is not None
        if withdrawn:
            self.svc.commit_soon()
        self._arm(loop)

    def _withdraw(self, w: _Wait) -> None:
        """Its connection closed: out of the queue, no answer (the record's cancel)."""
        if self.waits.pop(w.waiter_id, None) is not None:
            self.svc.state.claims.cancel_waiter(w.waiter_id, why="closed", wake=False)
            self._wake_soon()

    def _wake_soon(self) -> None:
        """One wake for every wait withdrawn in this loop turn (a closing connection
        withdraws up to 128 at once), instead of one per withdrawal."""
        if not self._wake_pending:
            self._wake_pending = True
            asyncio.get_running_loop().call_soon(self._wake_now)

    def _wake_now(self) -> None:
        self._wake_pending = False
        self.svc.state.claims.wake_deferred()
        self.svc.flush_background()

    def resolve(self, outcomes: list[Outcome], error: BaseException | None) -> None:
        """Answer the queued requests the last commit granted or withdrew.

        A wait that ran out is answered ``held`` even if that commit was refused: it
        was withdrawn in memory either way, and the refused writes were others'. A
        refused grant is taken back whether or not its waiter is still there to be
        told: one whose connection closed meanwhile kept a claim the disk never had,
        which its session asking again was told it held (``already_held``)."""
        waits = self.waits
        for o in outcomes:
            waiter_id = o.waiter_id
            if not waiter_id:
                continue
            w = waits.pop(waiter_id, None)
            if isinstance(o, Cancelled):
                if w is None:
                    continue
                if error is None or o.why == "timeout":
                    w.answer(o.held)
                    continue
            else:
                assert o.granted is not None  # a waiter's notice carries its grant
                if error is None:
                    if w is not None:
                        w.answer(o.granted)
                    continue
                self._take_back(o.granted)  # refused: holds nothing
                if w is None:
                    continue
            w.settle(error=error if isinstance(error, MeshError) else MeshError(str(error)))

    async def steal(self, p: pc.ClaimStealParams, conn: Conn) -> pc.ClaimAcquireResult:
        st = self.svc.state
        keys = await self._prepare(p.session_id, p.resources, p.broad)
        if keys is None:
            return pc.ClaimAcquireResult(status="granted", disabled=True)
        if not p.reason.strip():
            raise InvalidParams("a steal needs a reason", {"path": "$.reason"})
        if (fc := self.fleet()) is not None and self._fleet_set(fc, keys):
            return await self._acquire_fleet(
                fc, p.session_id, keys, mode=p.mode, reason=p.reason, ttl=p.ttl, wait=0.0,
                conn=conn, steal=True,
            )  # fmt: skip
        granted = st.claims.steal(p.session_id, keys, reason=p.reason, mode=p.mode, ttl=p.ttl)
        await self._commit_grant(granted, victims=granted.stolen)
        return self._granted(granted)

    # --- release / check / list / validate / audit --------------------------------------

    async def release(self, p: pc.ClaimReleaseParams, conn: Conn) -> pc.ClaimReleaseResult:
        svc, st = self.svc, self.svc.state
        if not st.settings.enabled:
            return pc.ClaimReleaseResult(disabled=True)
        st.registry.get(p.session_id)
        keys = None if p.resources is None else await self._keys(p.resources, True)
        if keys == []:
            return pc.ClaimReleaseResult()
        # Store first, then apply: a freed key is handed on at once (waiters, other
        # acquires), so a release the disk refused could not be taken back.
        mine = (
            st.claims.list_claims(p.session_id)
            if keys is None
            else st.claims.claims_of(p.session_id, [k.text for k in keys])
        )
        if not mine:
            return pc.ClaimReleaseResult()
        now_w = svc.clock.now()
        stored = {(c.resource, c.token) for c in mine}

        def apply() -> list[str]:
            released = st.claims.release(p.session_id, [c.key for c in mine])
            out = st.claims.outbox  # the release records are stored already: not twice
            out.audit = [
                r for r in out.audit
                if not (r.action == "release" and r.session_id == p.session_id
                        and (r.resource, r.token) in stored)
            ]  # fmt: skip
            svc.flush_background()  # whom it let go: their grants answer them once stored
            return released

        def gone(_released: list[str]) -> None:  # cancelled: out of the fleet in the background
            if (fc := self.fleet()) is not None:
                fc.release_soon(p.session_id, [(c.resource, c.token) for c in mine])

        writes: list[Write] = [("claim.audit", _release_record(c, now_w)) for c in mine]
        released = await svc.store_first(writes, apply, gone=gone)
        if (fc := self.fleet()) is not None:
            await fc.release(p.session_id, [(c.resource, c.token) for c in mine])
        return pc.ClaimReleaseResult(released=released)

    async def check(self, p: pc.ClaimCheckParams, conn: Conn) -> pc.ClaimCheckResult:
        st = self.svc.state
        if st.hidden_from(p.for_profile):
            return pc.ClaimCheckResult(status="free", profile=st.profile, visible=False)
        if not st.settings.enabled:
            return pc.ClaimCheckResult(status="free", disabled=True, profile=st.profile)
        keys = await self._keys(p.resources, p.broad)
        self._expire()
        found = st.claims.check(keys, p.session_id)
        present = self._present(keys, p.session_id)
        warnings = [self.warning(c) for c in found]
        warnings += [
            f"{x.session_id} "
            + ("recently changed " if x.why == "changed" else "is working in ")
            + x.path
            + (f" (branch {x.branch})" if x.branch else "")
            + (f" — {x.task}" if x.task else "")
            for x in present
        ]
        return pc.ClaimCheckResult(
            status="held" if found else "free", claims=[self._holder(c) for c in found],
            present=present, warnings=warnings, profile=st.profile,
        )  # fmt: skip

    def _present(self, keys: list[Key], caller: str | None) -> list[pc.ClaimPresent]:
        """Other live sessions whose cwd or repo contains one of the paths."""
        st = self.svc.state
        out: list[pc.ClaimPresent] = []
        seen: set[str] = set()
        for key in keys:
            if not key.is_path:
                continue
            for s, why, where in st.registry.present_at(key.value):
                if s.session_id in seen or (
                    caller is not None and st.claims.related(caller, s.session_id)
                ):
                    continue
                seen.add(s.session_id)
                out.append(
                    pc.ClaimPresent(
                        session_id=s.session_id, task=s.task, why=why,  # type: ignore[arg-type]
                        path=where, branch=s.branch, since=rfc3339(s.started_at),
                    )
                )  # fmt: skip
        return out

    def list(self, p: pc.ClaimListParams, conn: Conn) -> pc.ClaimListResult:
        st = self.svc.state
        now = self.svc.clock.monotonic()
        fc = self.fleet()
        local_only = fc.local_only if fc is not None else set()
        claims = [
            pc.ClaimRecord(
                session_id=c.session_id, resource=c.resource, mode=c.mode, token=c.token,
                since=rfc3339(c.since), reason=c.reason,
                expires_in_s=None if c.deadline is None else round(c.deadline - now, 3),
                local_only=(c.session_id, c.resource) in local_only,
            )
            for c in st.claims.list_claims(p.session_id)
        ]  # fmt: skip
        waiting = [
            pc.ClaimWaiting(
                session_id=w.session_id, resources=list(w.resources), mode=w.mode,
                since=rfc3339(w.since),
            )
            for w in st.claims.waiting(p.session_id)
        ]  # fmt: skip
        if fc is not None:  # this host's requests in line in the fleet
            waiting += [
                pc.ClaimWaiting(
                    session_id=w.session_id, resources=[k.text for k in w.keys], mode=w.mode,
                    since=rfc3339(w.since),
                )
                for w in fc.waiting()
                if p.session_id is None or w.session_id == p.session_id
            ]  # fmt: skip
        return pc.ClaimListResult(claims=claims, waiting=waiting)

    async def validate(self, p: pc.ClaimValidateParams, conn: Conn) -> pc.ClaimValidateResult:
        st = self.svc.state
        key = await self._key(p.resource)
        fc = self.fleet()
        if fc is not None and fc.is_fleet(key) and not self._local_only(fc, key, p.token):
            from meshd.fleet.link import FleetDown

            try:
                valid, sid, host = await fc.validate(key, p.token)
            except FleetDown as exc:
                raise MeshUnavailable(
                    f"{key.text} is fleet-wide and the fleet cannot be reached ({exc})",
                    {"resource": key.text},
                ) from exc
            return pc.ClaimValidateResult(valid=valid, resource=key.text, session_id=sid, host=host)
        valid = st.claims.validate(key, p.token)
        holder = None
        if valid:
            holder = next(
                (c.session_id for c in st.claims.check([key]) if c.token == p.token), None
            )
        return pc.ClaimValidateResult(valid=valid, resource=key.text, session_id=holder)

    def _local_only(self, fc: FleetClaims, key: Key, token: int) -> bool:
        """Whether ``token`` is a local-only claim's on ``key`` (validated here alone)."""
        return any(
            c.token == token and (c.session_id, c.resource) in fc.local_only
            for c in self.svc.state.claims.check([key])
        )

    async def audit(self, p: pc.AuditLogParams, conn: Conn) -> pc.AuditLogResult:
        since = None
        if p.since is not None:
            try:
                since = datetime.fromisoformat(p.since.replace("Z", "+00:00")).timestamp()
            except ValueError as exc:
                raise InvalidParams(
                    f"since must be an RFC 3339 time, got {p.since!r}", {"path": "$.since"}
                ) from exc
        resource = None
        if p.resource is not None:
            resource = (await self._key(p.resource)).text
        rows = await self.svc.store.read(
            lambda db: audit_page(
                db, since=since, limit=p.limit, session_id=p.session_id, resource=resource
            )
        )
        return pc.AuditLogResult(
            entries=[pc.AuditEntry(**{**r, "at": rfc3339(r["at"])}) for r in rows]
        )
