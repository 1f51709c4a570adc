"""A ``claim.acquire`` or ``claim.steal`` of a fleet-wide set (SPEC §12, docs/FLEET.md).

The set is decided in the fleet first -- in line by ticket, woken by the watch on
the records -- then recorded in this host's table with the fleet's token and
committed before the reply. A fleet that cannot be reached answers UNAVAILABLE or,
under ``on_partition = "local"``, grants here alone, marked local-only. A set
mixing fleet-wide and local keys is refused: it would have two tokens from two
counters.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from meshd.core.claims.records import Claim, Granted, Held, Queued
from meshd.domains.claim_replies import granted, held
from meshd.keys import Key
from meshd.ports import FleetAccess, FleetClaimsPort, FleetDown
from meshd.protocol import claims as pc
from meshd.protocol.claims import Mode
from meshd.protocol.errors import BadKey, MeshUnavailable
from meshd.protocol.jsonrpc import Later

if TYPE_CHECKING:
    from meshd.domains.claim_view import ClaimView
    from meshd.fleet.claim_grants import FleetGrant, FleetHeld, FleetWaiter
    from meshd.service import Service

    Tried = FleetGrant | FleetHeld | FleetDown
    """What one try in the fleet answers (FleetDown: out of reach now)."""

CommitGrant = Callable[[Granted, tuple[Claim, ...]], Awaitable[None]]
"""Commit a grant, taking it back (and giving back its victims) if that is refused."""
Answered = Callable[..., pc.ClaimAcquireResult]
"""The claims domain's last word on an answer (``answered(sid, result, steal=)``)."""


@dataclass(eq=False, slots=True)
class _Asking:
    """One fleet-wide request while the fleet decides it: what it asks (``new``: the
    keys of ``keys`` it does not hold yet), when it began and must be answered by, and
    whether its session paused meanwhile (:meth:`FleetAcquire.paused`)."""

    session_id: str
    keys: list[Key]
    new: list[Key]
    mode: Mode
    reason: str
    ttl: float | None
    steal: bool
    t0: float
    deadline: float
    """When its wait runs out (``time.monotonic()``)."""
    paused: bool = False


class FleetAcquire:
    """The fleet-wide request path of the claims handler: ``fleet`` is the fleet's
    port (who this host is), ``commit_grant`` the handler's, ``view`` who holds a key
    as ``claim.check`` says it (a ``held`` answer names its holders so)."""

    def __init__(
        self, svc: Service, fleet: FleetAccess, commit_grant: CommitGrant, answered: Answered,
        view: ClaimView, *, marked: Callable[[], object],
    ) -> None:  # fmt: skip
        self.svc = svc
        self._marked = marked
        """Store the local-only marks (with the grant that changes them)."""
        self._fleet = fleet
        self._view = view
        self._commit_grant = commit_grant
        self._answered = answered
        self._asking: set[_Asking] = set()

    def paused(self, session_id: str) -> None:
        """``session_id`` paused: its requests the fleet is deciding now are not granted
        (CONFORMANCE §5b). In line, :meth:`FleetClaims.paused` wakes them to leave it;
        a try already in flight (the first, before a place in line) can still come back
        granted: that grant is given back and the request answered ``held``."""
        for a in self._asking:
            if a.session_id == session_id:
                a.paused = True

    @staticmethod
    def is_fleet_set(fc: FleetClaimsPort, keys: list[Key]) -> bool:
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

    async def acquire(
        self, fc: FleetClaimsPort, sid: str, keys: list[Key], *, mode: Mode, reason: str,
        ttl: float | None, wait: float, steal: bool = False,
    ) -> pc.ClaimAcquireResult | Later:  # fmt: skip
        """A fleet-wide set: decided in the fleet first (docs/FLEET.md), then recorded
        here with the fleet's token and committed before the reply.

        The first try is made in order (before the connection's next request); a
        request that has to wait for its turn, or for the fleet to come back, waits
        in a :class:`Later` (``Later.running``) and the connection reads on."""
        st = self.svc.state
        mine = {c.resource: c for c in st.claims.list_claims(sid)}
        new = [k for k in keys if k.text not in mine or mine[k.text].mode != mode]
        if new and not steal:
            local = [c for c in st.claims.check(keys, sid) if (c.session_id, c.resource)
                     in fc.local_only or not fc.is_fleet(c.key)]  # fmt: skip
            if local:
                return self._answered(sid, held(st, Held(tuple(local))), steal=steal)
        now = time.monotonic()
        req = _Asking(sid, keys, new, mode, reason, ttl, steal, now, now + wait)
        if not new:
            return self._answered(sid, await self._record(fc, req, None), steal=steal)
        self._asking.add(req)
        try:
            first = await self._try(fc, req, None)
        except BaseException:
            self._asking.discard(req)
            raise
        if self._waits(fc, first[0], req):
            return Later.running(self._finish(fc, req, first))
        return await self._finish(fc, req, first)

    @staticmethod
    def _waits(fc: FleetClaimsPort, got: Tried, req: _Asking) -> bool:
        """Whether the answer of a first try means waiting: held, or the fleet out of
        reach under ``on_partition = "fail"``, with time left."""
        from meshd.fleet.claim_grants import FleetHeld

        if req.deadline <= time.monotonic():
            return False
        if isinstance(got, FleetDown):
            return fc.on_partition != "local"
        return isinstance(got, FleetHeld)

    async def _finish(
        self, fc: FleetClaimsPort, req: _Asking, first: tuple[Tried, list[anyio.Event]]
    ) -> pc.ClaimAcquireResult:
        """From the first try's answer to the reply: waited for if it must, decided,
        then recorded here."""
        got = await self._decide(fc, req, first)
        if isinstance(got, pc.ClaimAcquireResult):  # held (in the fleet, or paused meanwhile)
            return self._answered(req.session_id, got, steal=req.steal)
        done = await self._record(fc, req, None if got is None else got.token)
        return self._answered(req.session_id, done, steal=req.steal)

    async def _record(
        self, fc: FleetClaimsPort, req: _Asking, token: int | None
    ) -> pc.ClaimAcquireResult:
        """The set granted in the fleet (``token``; None: here alone) recorded in this
        host's table and committed; given back in the fleet if that fails."""
        st, sid, new = self.svc.state, req.session_id, req.new
        try:
            st.registry.get(sid)  # it may have ended while the fleet answered
            if req.steal:
                outcome: Granted | Held | Queued = st.claims.steal(
                    sid, req.keys, reason=req.reason, mode=req.mode, ttl=req.ttl, token=token,
                )  # fmt: skip
            else:
                outcome = st.claims.acquire(
                    sid, req.keys, mode=req.mode, reason=req.reason, ttl=req.ttl, token=token,
                )  # fmt: skip
            if not isinstance(outcome, Granted):
                await fc.release(sid, [(k.text, token) for k in new if token is not None])
                return held(st, outcome) if isinstance(outcome, Held) else held(st, Held(()))
            if token is None and new:
                fc.granted_alone(sid, new)
                self._marked()
            await self._commit_grant(outcome, outcome.stolen)
        except BaseException:
            if token is not None:
                await fc.release(sid, [(k.text, token) for k in new])
            raise
        return granted(st, outcome)

    async def _decide(
        self, fc: FleetClaimsPort, req: _Asking, first: tuple[Tried, list[anyio.Event]]
    ) -> FleetGrant | pc.ClaimAcquireResult | None:
        """The fleet's answer for the keys ``req.new``: a FleetGrant, None (the fleet is
        out of reach and ``on_partition = "local"``: granted here alone), or the
        ``held`` reply. A session that paused meanwhile keeps nothing (CONFORMANCE
        §5b): a grant its try brought back is given back in the fleet."""
        from meshd.fleet.claim_grants import FleetGrant

        new = req.new
        try:
            got = await self._wait(fc, req, first)
        except FleetDown as exc:
            if fc.on_partition != "local":
                raise MeshUnavailable(
                    f"{new[0].text} is fleet-wide and the fleet cannot be reached "
                    f"({exc}); on_partition = \"fail\"",
                    {"resource": new[0].text, "reason": "fleet"},
                ) from exc  # fmt: skip
            got = None  # granted here alone, marked local-only
        finally:
            self._asking.discard(req)
        waited = time.monotonic() - req.t0
        if req.paused:
            if isinstance(got, FleetGrant):
                await fc.release(req.session_id, [(k.text, got.token) for k in new])
            return held(self.svc.state, Held(()), waited, withdrawn="paused")
        if got is not None and not isinstance(got, FleetGrant):
            return await self._held(req, got, waited)
        return got

    @staticmethod
    async def _try(
        fc: FleetClaimsPort, req: _Asking, waiter: FleetWaiter | None
    ) -> tuple[Tried, list[anyio.Event]]:
        """One try in the fleet: its answer (FleetDown when the fleet is out of reach),
        and the events the watch sets at the next change of the records, armed first
        so a change between the try and a wait is not missed."""
        events = fc.arm(req.new)
        try:
            got: Tried = await fc.acquire(
                req.session_id, req.new, req.mode, waiter=waiter, steal=req.steal,
                reason=req.reason,
            )  # fmt: skip
        except FleetDown as exc:
            got = exc
        return got, events

    async def _wait(
        self, fc: FleetClaimsPort, req: _Asking, first: tuple[Tried, list[anyio.Event]]
    ) -> FleetGrant | FleetHeld:
        """From ``first``, ask the fleet until granted or the wait runs out (in line by
        ticket, woken by the watch on the records); the last answer: a FleetGrant or a
        FleetHeld.

        Under ``on_partition = "fail"`` a request with time left waits out a fleet that
        cannot be reached (a reconnect, a server restart) and tries again once it is
        back; :class:`FleetDown` (UNAVAILABLE) only when the wait runs out first.
        Under ``"local"`` it is raised at once: the caller grants local-only."""
        from meshd.fleet.claim_grants import FleetHeld

        sid = req.session_id
        waiter: FleetWaiter | None = None
        got_it = False
        got, events = first
        try:
            while True:
                left = req.deadline - time.monotonic()
                if isinstance(got, FleetDown):
                    if left <= 0 or fc.on_partition == "local":
                        raise got
                    await fc.back(left)
                    self.svc.state.registry.get(sid)  # ended while waiting: stop
                    got, events = await self._try(fc, req, waiter)
                    continue
                got_it = not isinstance(got, FleetHeld)
                if got_it or left <= 0 or req.paused:
                    return got  # granted, run out, or its session paused: out of line
                if waiter is None:
                    waiter = await fc.enqueue(sid, req.new, req.mode)
                else:  # a lease that runs out changes no record: look again now and then
                    await fc.changed(events, min(left, fc.renew_every))
                    self.svc.state.registry.get(sid)  # ended while waiting: stop
                got, events = await self._try(fc, req, waiter)
        finally:
            if waiter is not None and not got_it:
                await fc.dequeue(waiter)

    async def _held(self, req: _Asking, h: FleetHeld, waited: float) -> pc.ClaimAcquireResult:
        """``held`` by entries in the fleet (perhaps on other hosts), each holder named
        as ``claim.check`` names it (one view, SPEC §12): its own claims on what was
        asked -- the file below a folder asked for, not the folder whose record it met
        -- with its task, since, reason and host. An earlier waiter, or a holder the
        check no longer finds (released meanwhile, or the fleet out of reach), is named
        as the record names it."""
        checked, _, _ = await self._view.holders(req.new, req.session_id)
        claims_of: dict[tuple[str, str | None], list[pc.ClaimHolder]] = {}
        for c in checked:
            claims_of.setdefault((c.session_id, c.host), []).append(c)
        holders: list[pc.ClaimHolder] = []
        named: set[tuple[str, str | None]] = set()
        for resource, e in h.blocking:
            who = (e.session, e.host)
            if not e.ticket and who in claims_of:
                if who not in named:
                    named.add(who)
                    holders += claims_of[who]
                continue
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
