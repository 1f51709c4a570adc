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
from typing import TYPE_CHECKING

from meshd.core.claims.records import Claim, Granted, Held, Queued
from meshd.domains.claim_replies import granted, held
from meshd.keys import Key
from meshd.ports import FleetAccess, FleetClaimsPort, FleetDown
from meshd.protocol import claims as pc
from meshd.protocol.claims import Mode
from meshd.protocol.errors import BadKey, MeshUnavailable

if TYPE_CHECKING:
    from meshd.fleet.claim_grants import FleetGrant, FleetHeld
    from meshd.service import Conn, Service

CommitGrant = Callable[[Granted, tuple[Claim, ...]], Awaitable[None]]
"""Commit a grant, taking it back (and giving back its victims) if that is refused."""


class _Asking:
    """One fleet-wide request while the fleet decides it: whether its session paused
    meanwhile (:meth:`FleetAcquire.paused`)."""

    __slots__ = ("paused", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.paused = False


class FleetAcquire:
    """The fleet-wide request path of the claims handler: ``fleet`` is the fleet's
    port (who this host is), ``commit_grant`` the handler's."""

    def __init__(self, svc: Service, fleet: FleetAccess, commit_grant: CommitGrant) -> None:
        self.svc = svc
        self._fleet = fleet
        self._commit_grant = commit_grant
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
        ttl: float | None, wait: float, conn: Conn, steal: bool = False,
    ) -> pc.ClaimAcquireResult:  # fmt: skip
        """A fleet-wide set: decided in the fleet first (docs/FLEET.md), then recorded
        here with the fleet's token and committed before the reply."""
        st = self.svc.state
        mine = {c.resource: c for c in st.claims.list_claims(sid)}
        new = [k for k in keys if k.text not in mine or mine[k.text].mode != mode]
        if new and not steal:
            local = [c for c in st.claims.check(keys, sid) if (c.session_id, c.resource)
                     in fc.local_only or not fc.is_fleet(c.key)]  # fmt: skip
            if local:
                return held(st, Held(tuple(local)))
        token: int | None = None
        if new:
            got = await self._decide(fc, sid, new, mode, wait=wait, conn=conn, steal=steal)
            if isinstance(got, pc.ClaimAcquireResult):
                return got  # held (in the fleet, or its session paused meanwhile)
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
                return held(st, outcome) if isinstance(outcome, Held) else held(st, Held(()))
            if token is None and new:
                fc.granted_alone(sid, new)
            await self._commit_grant(outcome, outcome.stolen)
        except BaseException:
            if token is not None:
                await fc.release(sid, [(k.text, token) for k in new])
            raise
        return granted(st, outcome)

    async def _decide(
        self, fc: FleetClaimsPort, sid: str, new: list[Key], mode: Mode, *, wait: float,
        conn: Conn, steal: bool,
    ) -> FleetGrant | pc.ClaimAcquireResult | None:  # fmt: skip
        """The fleet's answer for the keys ``new`` to the session: a FleetGrant, None
        (the fleet is out of reach and ``on_partition = "local"``: granted here alone), or
        the ``held`` reply. A session that paused meanwhile keeps nothing (CONFORMANCE
        §5b): a grant its try brought back is given back in the fleet."""
        from meshd.fleet.claim_grants import FleetGrant

        t0 = time.monotonic()
        asking = _Asking(sid)
        self._asking.add(asking)
        try:
            got = await self._wait(fc, new, mode, asking, wait=wait, conn=conn, steal=steal)
        except FleetDown as exc:
            if fc.on_partition != "local":
                raise MeshUnavailable(
                    f"{new[0].text} is fleet-wide and the fleet cannot be reached "
                    f"({exc}); on_partition = \"fail\"",
                    {"resource": new[0].text, "reason": "fleet"},
                ) from exc  # fmt: skip
            got = None  # granted here alone, marked local-only
        finally:
            self._asking.discard(asking)
        if asking.paused:
            if isinstance(got, FleetGrant):
                await fc.release(sid, [(k.text, got.token) for k in new])
            return held(self.svc.state, Held(()), time.monotonic() - t0, withdrawn="paused")
        if got is not None and not isinstance(got, FleetGrant):
            return self._held(got, time.monotonic() - t0)
        return got

    async def _wait(
        self, fc: FleetClaimsPort, keys: list[Key], mode: Mode, asking: _Asking, *, wait: float,
        conn: Conn, steal: bool,
    ) -> FleetGrant | FleetHeld:  # fmt: skip
        """Ask the fleet until granted or ``wait`` runs out (in line by ticket, woken by
        the watch on the records); the last answer: a FleetGrant or a FleetHeld.

        Under ``on_partition = "fail"`` a request with time left waits out a fleet that
        cannot be reached (a reconnect, a server restart) and tries again once it is
        back; :class:`FleetDown` (UNAVAILABLE) only when the wait runs out first.
        Under ``"local"`` it is raised at once: the caller grants local-only."""
        from meshd.fleet.claim_grants import FleetHeld

        sid = asking.session_id
        deadline = time.monotonic() + wait
        waiter = None
        got_it = False
        got: FleetGrant | FleetHeld | None = None
        try:
            while True:
                if asking.paused and isinstance(got, FleetHeld):
                    return got  # its session paused meanwhile: out of line, held
                events = fc.arm(keys)
                try:
                    got = await fc.acquire(sid, keys, mode, waiter=waiter, steal=steal)
                except FleetDown:
                    left = deadline - time.monotonic()
                    if left <= 0 or fc.on_partition == "local":
                        raise
                    conn.detach()
                    await fc.back(left)
                    self.svc.state.registry.get(sid)  # ended while waiting: stop
                    continue
                left = deadline - time.monotonic()
                got_it = not isinstance(got, FleetHeld)
                if got_it or left <= 0:
                    return got
                if waiter is None:
                    conn.detach()
                    waiter = await fc.enqueue(sid, keys, mode)
                    continue  # try again at once, now with a place in line
                # a lease that runs out changes no record: look again now and then
                await fc.changed(events, min(left, fc.renew_every))
                self.svc.state.registry.get(sid)  # ended while waiting: stop
        finally:
            if waiter is not None and not got_it:
                await fc.dequeue(waiter)

    def _held(self, h: FleetHeld, waited: float) -> pc.ClaimAcquireResult:
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
