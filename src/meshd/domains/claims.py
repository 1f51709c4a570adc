"""``claim.*`` and ``audit.log``: advisory claims with fencing tokens (SPEC §5).

:class:`ClaimHandlers` is the domain: it
registers the methods, answers the hooks (restore, prune, resolve, the fleet's),
and owns the write side -- acquire, steal, release, and the commit of a grant that
takes it back when the disk refuses it. Its parts, one object each:

* :mod:`meshd.domains.claim_keys` -- keys as the user typed them, made canonical
  (that reads the filesystem, so it is not the core's job);
* :mod:`meshd.domains.claim_waits` -- queued requests (``wait``), answered by a
  record when their grant is committed or their deadline passes (one timer);
* :mod:`meshd.domains.claim_fleet` -- the request path of a fleet-wide set;
* :mod:`meshd.domains.claim_view` -- who holds these keys: the one answer every
  read gives, from this host's table or, for a fleet-wide key, the fleet;
* :mod:`meshd.domains.claim_reads` -- ``claim.check``/``list``/``validate`` and
  ``audit.log``;
* :mod:`meshd.domains.claim_replies` -- the replies all of them shape.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from meshd.core.claims.records import (
    ENDING,
    MODE_CHANGE,
    AuditRecord,
    Claim,
    Fencing,
    Granted,
    Held,
)
from meshd.core.state import Outcome, Write
from meshd.domain import Domain
from meshd.domains.claim_alone import LocalOnlyMarks
from meshd.domains.claim_fleet import FleetAcquire
from meshd.domains.claim_keys import ClaimKeys
from meshd.domains.claim_reads import ClaimReads
from meshd.domains.claim_replies import granted, held
from meshd.domains.claim_view import ClaimView
from meshd.domains.claim_waits import ClaimWaits
from meshd.keys import Key, from_canonical
from meshd.ports import FleetAccess, FleetClaimsPort
from meshd.protocol import claims as pc
from meshd.protocol.claims import AuditAction, Mode
from meshd.protocol.errors import InvalidParams, MeshError, MeshUnavailable
from meshd.protocol.jsonrpc import Later
from meshd.service import Conn, Service
from meshd.store.claims import load_claims, load_fencing

if TYPE_CHECKING:
    from meshd.core.state import Event


def _release_record(c: Claim, now_wall: float) -> AuditRecord:
    """The audit line (and live-claims delete) of ``c``'s clean release."""
    return AuditRecord(
        now_wall, "release", c.session_id, c.resource, c.mode, c.token, c.reason, "released",
        None, c.ttl,
    )  # fmt: skip


class ClaimHandlers(Domain):
    """The claims domain; to the fleet, this host's lock table (:class:`ClaimTable`)."""

    name = "claims"

    def __init__(self, svc: Service, *, fleet: FleetAccess, view: ClaimView) -> None:
        super().__init__(svc)
        self.view = view
        """Who holds these keys: the table, or the fleet for a fleet-wide key (the
        sessions domain asks the same object)."""
        self.keys = ClaimKeys(svc)
        """Canonical keys for what a request names (the reads start there too)."""
        self.waits = ClaimWaits(svc, self._take_back)
        self.reads = ClaimReads(svc, view, self.keys)
        self.alone = LocalOnlyMarks()
        """The local-only claims, kept in the database across a restart."""
        self.fleet_path = FleetAcquire(
            svc, fleet, self._commit_grant, self.answered, view, marked=self._keep_marks
        )

    def install(self) -> None:
        svc = self.svc
        spec = {s.name: s for s in pc.CLAIM_METHODS}
        svc.add(spec["claim.acquire"], self.acquire, is_async=True, concurrent=True)
        svc.add(spec["claim.release"], self.release, is_async=True)
        svc.add(spec["claim.check"], self.reads.check, is_async=True)
        svc.add(spec["claim.list"], self.reads.list, is_async=True)
        svc.add(spec["claim.validate"], self.reads.validate, is_async=True)
        svc.add(spec["claim.steal"], self.steal, is_async=True)
        svc.add(spec["audit.log"], self.reads.audit, is_async=True)

    # --- the fleet (SPEC §12): what the fleet's claims ask of this host's table -------

    def fleet(self) -> FleetClaimsPort | None:
        """This host's fleet claims, or None when it is alone (no ``[fleet]``)."""
        return self.view.fleet_claims()

    def _no_fleet_yet(self, keys: Sequence[Key]) -> None:
        """``[fleet]`` is configured but its link is not running -- the sweep tick after
        a reload added it, the daemon's first moments, the pause after the fleet failed:
        a fleet-wide key cannot be decided here alone (SPEC §12: never silently granted
        twice). Refused UNAVAILABLE (``reason: fleet``), under either ``on_partition``:
        ``local`` grants are the fleet link's to mark and reconcile."""
        cfg = self.svc.state.settings.fleet
        if cfg is None:
            return
        from meshd.fleet.claim_records import fleet_wide

        for key in keys:  # as FleetClaims.is_fleet decides it
            if fleet_wide(key, cfg.shared_kinds, cfg.shared_paths):
                raise MeshUnavailable(
                    f"{key.text} is fleet-wide and this daemon's fleet link is not running "
                    "yet (it starts a moment after [fleet] is configured); retry, and see "
                    "`meshctl fleet status`",
                    {"resource": key.text, "reason": "fleet"},
                )

    def paused(self, session_id: str) -> None:
        """``session_id`` paused: its fleet-wide waits leave the line too, answered
        ``held`` (the table withdrew its local ones, :meth:`PausedSets.pause`), and
        a grant their try in flight brings is given back."""
        if (fc := self.fleet()) is not None:
            fc.paused(session_id)
            self.fleet_path.paused(session_id)

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
        self._keep_marks()
        self.svc.flush_background()

    def fleet_lost(self, session_id: str, resources: list[str], token: int, how: str) -> None:
        self.svc.state.claims.lose(
            session_id, [from_canonical(r) for r in resources], token, how=how
        )
        self._keep_marks()
        self.svc.flush_background()

    def restored_local_only(self) -> set[tuple[str, str]]:
        return self.alone.restored(self.svc.state.claims.list_claims())

    def _keep_marks(self) -> bool:
        """Store the local-only marks with the change that made them (a grant here
        alone, a heal, a loss: the same transaction); whether they changed."""
        fc = self.fleet()
        w = (
            None
            if fc is None
            else self.alone.write(self.svc.state.claims.list_claims(), fc.local_only)
        )
        if w is not None:
            self.svc.state.writes.append(w)
        return w is not None

    def related(self, a: str, b: str) -> bool:
        return self.svc.state.claims.related(a, b)

    def committed(self, writes: list[Write], events: list[Event]) -> None:
        """Fleet-wide claims that ended here (session end, death, ttl, a local steal)
        leave the fleet too; a clean release does so itself (:meth:`release`)."""
        fc = self.fleet()
        if fc is None:
            return
        ended = False
        for w in writes:
            # a mode change's release row: the key is still held, under the new grant
            if w[0] == "claim.audit" and w[1].action in ENDING and w[1].how != MODE_CHANGE:
                rec: AuditRecord = w[1]
                ended = True
                fc.local_only.discard((rec.session_id, rec.resource))
                if (rec.session_id, rec.resource) in fc.by_claim:
                    fc.release_soon(rec.session_id, [(rec.resource, rec.token)])
        if ended and self.alone.stored and self._keep_marks():
            self.svc.flush_background()  # a local-only claim ended: its mark goes too

    def prune(self, history_days: float) -> None:
        """The audit log older than ``history_days`` (SPEC §2), and the recent losses
        of sessions that are gone."""
        cutoff = self.svc.clock.now() - history_days * 86400
        self.svc.state.writes.append(("audit.prune", cutoff))
        self.svc.state.prune_losses()

    def restore(self, db: sqlite3.Connection) -> None:
        """Claims of restored sessions come back (the local-only marks too, for the fleet
        to heal: :mod:`meshd.domains.claim_alone`); tokens resume above every stored block."""
        self.alone.restore(db)
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

    def resolve(self, outcomes: list[Outcome], error: BaseException | None) -> None:
        """Answer the queued requests the last commit granted or withdrew."""
        self.waits.resolve(outcomes, error)

    def connection_closed(self, conn: Conn) -> None:
        """Waits of ``conn`` left in line by a failed withdrawal go (SPEC §5: a waiter
        is cancelled when its connection closes): :meth:`ClaimWaits.closed`."""
        self.waits.closed(conn)

    # --- acquire / steal --------------------------------------------------------------

    async def _prepare(
        self, session_id: str, resources: list[str], broad: bool
    ) -> list[Key] | None:
        """The checks acquire and steal share: None when the mesh is switched off."""
        st = self.svc.state
        if not st.settings.enabled:
            return None
        st.registry.get(session_id)
        keys = await self.keys.keys_for(resources, broad)
        st.registry.get(session_id)  # it may have ended while the paths were resolved
        self.keys.expire()
        return keys

    def answered(
        self, sid: str, result: pc.ClaimAcquireResult, *, steal: bool = False
    ) -> pc.ClaimAcquireResult:
        """An acquire's answer with the session's unread claim losses (``lost``: SPEC
        §5, the holder learns them at its next claim; not a steal's) and its local-only
        keys marked (SPEC §12)."""
        if not steal:
            result.lost = self.svc.state.unread_losses(sid)
        self.view.mark_local_only(sid, result)
        return result

    async def acquire(self, p: pc.ClaimAcquireParams, conn: Conn) -> pc.ClaimAcquireResult | Later:
        """``claim.acquire``: the answer now (with :meth:`answered`'s additions), or the
        :class:`Later` a queued request is answered by."""
        st = self.svc.state
        keys = await self._prepare(p.session_id, p.resources, p.broad)
        if keys is None:
            return pc.ClaimAcquireResult(status="granted", disabled=True)
        wait = min(p.wait, st.settings.max_query_timeout)
        if (fc := self.fleet()) is not None and self.fleet_path.is_fleet_set(fc, keys):
            return await self.fleet_path.acquire(
                fc, p.session_id, keys, mode=p.mode, reason=p.reason, ttl=p.ttl, wait=wait
            )  # answered (FleetAcquire calls answered() at the end)
        if fc is None:
            self._no_fleet_yet(keys)
        waiter_id = self.waits.waiter_id(conn, wait)
        outcome = st.claims.acquire(
            p.session_id, keys, mode=p.mode, reason=p.reason, ttl=p.ttl,
            wait=waiter_id is not None, waiter_id=waiter_id,
        )  # fmt: skip
        if isinstance(outcome, Granted):
            await self._commit_grant(outcome)
            return self.answered(p.session_id, granted(self.svc.state, outcome))
        if isinstance(outcome, Held):
            return self.answered(p.session_id, held(self.svc.state, outcome))
        return self.waits.queue(outcome, wait, conn)  # answered later; the connection reads on

    async def keys_of(self, resources: list[str], broad: bool) -> list[Key]:
        """Canonical keys for what the user typed (after a ttl sweep)."""
        return await self.keys.keys_of(resources, broad)

    async def acquire_keys(
        self, sid: str, keys: Sequence[Key], *, mode: Mode, reason: str, wait: float, conn: Conn
    ) -> pc.ClaimAcquireResult | Later:
        """``claim.acquire`` for canonical keys (``session.resume`` queues with it): the
        answer now, or the :class:`Later` a queued request is answered by."""
        st = self.svc.state
        waiter_id = self.waits.waiter_id(conn, wait)
        outcome = st.claims.acquire(
            sid, keys, mode=mode, reason=reason, wait=waiter_id is not None, waiter_id=waiter_id
        )
        if isinstance(outcome, Granted):
            await self._commit_grant(outcome)
            return granted(self.svc.state, outcome)
        if isinstance(outcome, Held):
            return held(self.svc.state, outcome)
        return self.waits.queue(outcome, wait, conn)

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

    async def steal(self, p: pc.ClaimStealParams, conn: Conn) -> pc.ClaimAcquireResult:
        st = self.svc.state
        keys = await self._prepare(p.session_id, p.resources, p.broad)
        if keys is None:
            return pc.ClaimAcquireResult(status="granted", disabled=True)
        if not p.reason.strip():
            raise InvalidParams("a steal needs a reason", {"path": "$.reason"})
        if (fc := self.fleet()) is not None and self.fleet_path.is_fleet_set(fc, keys):
            taken = await self.fleet_path.acquire(
                fc, p.session_id, keys, mode=p.mode, reason=p.reason, ttl=p.ttl, wait=0.0,
                steal=True,
            )  # fmt: skip
            assert not isinstance(taken, Later), "a steal never waits (wait=0)"
            return taken
        if fc is None:
            self._no_fleet_yet(keys)
        got = st.claims.steal(p.session_id, keys, reason=p.reason, mode=p.mode, ttl=p.ttl)
        await self._commit_grant(got, victims=got.stolen)
        return granted(st, got)

    # --- release ----------------------------------------------------------------------

    async def release(self, p: pc.ClaimReleaseParams, conn: Conn) -> pc.ClaimReleaseResult:
        svc, st = self.svc, self.svc.state
        if not st.settings.enabled:
            return pc.ClaimReleaseResult(disabled=True)
        st.registry.get(p.session_id)
        keys = None if p.resources is None else await self.keys.keys_for(p.resources, True)
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
