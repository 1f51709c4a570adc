"""``session.*``: register, heartbeat, end, list, get.

The claims a listing or ``session.get`` shows are :class:`ClaimView`'s answer (SPEC
§12, one view): this host's table for its own sessions, and for another host's
session its claims on fleet-wide keys as the fleet holds them now.
"""

from __future__ import annotations

import sqlite3
from operator import attrgetter

import msgspec

from meshd.core.claims.records import AuditRecord
from meshd.core.sessions.registry import Registration, Report, Session
from meshd.core.state import Write
from meshd.domain import Domain
from meshd.domains.claim_view import ClaimView
from meshd.domains.listing import Listing, claim_infos, ms, session_info
from meshd.pidwatch import alive, start_time
from meshd.ports import FleetAccess
from meshd.protocol import methods as m
from meshd.protocol.contract import DAEMON_SENDER, REPORTED, rfc3339
from meshd.protocol.errors import IdInUse, InvalidParams, MeshError
from meshd.service import Conn, Service
from meshd.store.sessions import load_sessions

_SESSION_ID = attrgetter("session_id")
_HB_OK = m.HeartbeatResult()
_HB_DISABLED = m.HeartbeatResult(disabled=True)


class SessionHandlers(Domain):
    name = "sessions"

    def __init__(self, svc: Service, *, fleet: FleetAccess, view: ClaimView) -> None:
        super().__init__(svc)
        self._fleet = fleet
        """The fleet (its registry lists the other hosts' sessions)."""
        self.view = view
        """Who holds what (the claims domain's own): the table, the fleet for fleet-wide keys."""
        self._listing = Listing()

    def install(self) -> None:
        svc = self.svc
        svc.add(m.REGISTER, self.register, is_async=True)
        svc.add(m.HEARTBEAT, self.heartbeat)
        svc.add(m.END, self.end, is_async=True)
        svc.add(m.LIST, self.list, is_async=True)
        svc.add(m.GET, self.get, is_async=True)
        svc.add(m.ATTACH, self.attach, is_async=True)
        svc.add(m.PRIORITIZE, self.prioritize, is_async=True)

    def restore(self, db: sqlite3.Connection) -> None:
        """Live sessions come back; their processes are watched again once serving."""
        self.svc.state.registry.restore_all(load_sessions(db))

    async def register(self, p: m.RegisterParams, conn: Conn) -> m.RegisterResult:
        svc = self.svc
        st = svc.state.settings
        not_the_daemon(p.session_id)
        if not st.enabled:
            sid = p.session_id or svc.state.registry.new_id(p.source)
            return m.RegisterResult(session_id=sid, disabled=True, liveness=p.liveness)
        pid_start = None
        if p.pid is not None:
            pid_start = start_time(p.pid)
            if pid_start is None:
                raise InvalidParams(f"pid {p.pid} is not running", {"path": "$.pid"})
        # Registration is the params plus what only the daemon knows.
        fields = msgspec.structs.asdict(p)
        fields.update(pid_start=pid_start, host=p.host or svc.host, conn_id=conn.id)
        r = Registration(**fields)
        before = svc.state.registry.sessions.get(p.session_id or "")
        try:
            s, refreshed = svc.state.register(r)
        except IdInUse:
            old = svc.state.registry.sessions[p.session_id or ""]
            if old.pid is None:  # a live heartbeat session with no process
                if not p.replace:
                    raise
                await self._replace(old)
            elif alive(old.pid, old.pid_start):
                raise
            else:
                svc.end_session(old.session_id, "died")
            before = None
            r = msgspec.structs.replace(r, replace=False)
            s, refreshed = svc.state.register(r)
        for pid, start in s.pids():
            svc.pids.watch(s.session_id, pid, start)
        try:
            await svc.commit()
        except MeshError:  # not stored: not acknowledged, so not kept either
            svc.state.registry.undo_register(s, before if refreshed else None)
            svc.pids.unwatch(s.session_id)
            if before is not None and refreshed:
                for pid, start in before.pids():
                    svc.pids.watch(before.session_id, pid, start)
            raise
        return m.RegisterResult(
            session_id=s.session_id,
            refreshed=refreshed,
            heartbeat_interval=st.heartbeat_interval,
            stale_after=st.stale_after,
            expire_after=s.expire_after or st.expire_after,
            liveness=s.liveness,
        )

    async def _replace(self, old: Session) -> None:
        """End ``old`` for a ``replace`` registration. Stored before it is applied, as
        ``session.end`` is: a disk that refuses the end leaves it exactly as it was."""
        svc = self.svc
        svc.state.writes.append(("session.end", old.session_id, svc.clock.now(), "replaced"))
        await svc.commit()
        now = svc.state.registry.sessions.get(old.session_id)
        if now is not None and now.started_at == old.started_at:
            svc.end_session(old.session_id, "replaced", stored=True)

    def heartbeat(self, p: m.HeartbeatParams, conn: Conn) -> m.HeartbeatResult:
        svc = self.svc
        if not svc.state.settings.enabled:
            return _HB_DISABLED
        changed = {name: value for name in REPORTED if (value := getattr(p, name)) is not None}
        report = Report(**changed) if changed else None
        svc.state.heartbeat(p.session_id, report)
        if p.lost_after is not None and (
            lost := svc.state.losses_after(p.session_id, p.lost_after)
        ):
            return m.HeartbeatResult(lost=lost)
        return _HB_OK

    async def end(self, p: m.EndParams, conn: Conn) -> m.EndResult:
        """End a session. The end is stored *before* it is applied: releasing claims
        and waking waiters cannot be undone, so a disk that refuses the write leaves
        the session exactly as it was (UNAVAILABLE, nothing acknowledged)."""
        svc = self.svc
        if not svc.state.settings.enabled and p.session_id not in svc.state.registry.sessions:
            # The id a disabled register handed out (SPEC §2): its end is a no-op too.
            return m.EndResult(session_id=p.session_id, ended=False, disabled=True)
        began = svc.state.registry.get(p.session_id).started_at
        handoff_id = None
        if p.handoff:  # the final handoff, stored in the same commit as the end
            handoff_id = svc.state.mailbox.write_handoff(p.session_id, p.handoff).id
        # Service.commit drains the mailbox with the rest and, if the disk refuses the
        # commit, forgets the handoff (MeshState.forget): one place for both.
        svc.state.writes.append(("session.end", p.session_id, svc.clock.now(), "ended"))
        await svc.commit()
        now = svc.state.registry.sessions.get(p.session_id)
        if now is None or now.started_at != began:
            # It ended meanwhile (its process died, it expired, another end), which
            # released what it held; or it was registered anew, which this end must
            # not touch. This end is stored all the same: it stands, and says so.
            return m.EndResult(session_id=p.session_id, ended=True, handoff_id=handoff_id)
        released = [c.resource for c in svc.state.claims.list_claims(p.session_id)]
        svc.end_session(p.session_id, "ended", stored=True)  # releases exactly what it held
        # The end is stored; what it sets off (releases, grants to waiters) follows in
        # the background, kept by the store until the disk takes it.
        svc.flush_background()
        return m.EndResult(
            session_id=p.session_id, ended=True, released=released, handoff_id=handoff_id
        )

    async def prioritize(self, p: m.PrioritizeParams, conn: Conn) -> m.PrioritizeResult:
        """Store the rank first, then apply it: re-ordering may grant waits, which
        cannot be taken back, so a disk that refuses the write changes nothing."""
        svc = self.svc
        s = svc.state.registry.get(p.session_id)
        previous, by, at = s.rank, p.by or "a person", svc.clock.now()
        ranked = msgspec.structs.replace(s, rank=p.rank, rank_by=by, rank_at=at)
        how = f"rank {p.rank} (was {previous})"  # SPEC §5b: all of it in the audit log
        row = AuditRecord(at, "rank", p.session_id, "", "exclusive", 0, how=how, by=by)
        stored: list[Write] = [("session.snapshot", ranked), ("claim.audit", row)]
        if await svc.store_first(stored, lambda: svc.state.prioritize(ranked)) is None:
            svc.state.registry.get(p.session_id)  # ended meanwhile: SESSION_EXPIRED
        await svc.commit()  # grants the new order made, stored before the reply
        return m.PrioritizeResult(
            session_id=p.session_id, rank=p.rank, rank_by=by, rank_at=rfc3339(at),
            previous=previous,
        )  # fmt: skip

    async def attach(self, p: m.AttachParams, conn: Conn) -> m.AttachResult:
        svc = self.svc
        start = start_time(p.pid)
        if start is None:
            raise InvalidParams(f"pid {p.pid} is not running", {"path": "$.pid"})
        s = svc.state.registry.get(p.session_id)
        before = (s.pid, s.pid_start, s.anchors)
        fresh = (p.pid, start) not in s.pids()
        svc.state.registry.attach(p.session_id, p.pid, start)
        svc.state.writes.append(("session.put", s))
        try:
            await svc.commit()
        except MeshError:  # not stored: the session lives with the processes it had
            s.pid, s.pid_start, s.anchors = before
            raise
        if fresh:
            svc.pids.watch(s.session_id, p.pid, start)
        return m.AttachResult(session_id=s.session_id, pids=[pid for pid, _ in s.pids()])

    def info(
        self, s: Session, now_mono: float, now_wall: float, claims: int | None = None
    ) -> m.SessionInfo:
        """``s`` as listings show it, with at most ``claims`` of its claims (all: None)."""
        reg = self.svc.state.registry
        held = self.svc.state.claims.list_claims(s.session_id)
        alone = self.view.local_only() or None
        return session_info(
            s,
            s.host,
            age_s=ms(now_wall - s.last_heartbeat),
            stale=reg.is_stale(s, now_mono),
            claims=claim_infos(held[:claims], alone),
            claims_total=len(held),
            idle_s=ms(now_wall - s.last_activity),
        )

    def listed(self) -> list[m.SessionInfo]:
        """Every live session of this host as listings show them (what the fleet's
        registry mirrors: :class:`~meshd.ports.SessionSource`)."""
        clock = self.svc.clock
        now_m, now_w = clock.monotonic(), clock.now()
        return [
            self.info(s, now_m, now_w, m.LISTED_CLAIMS)
            for s in self.svc.state.registry.sessions.values()
        ]

    async def list(self, p: m.ListParams, conn: Conn) -> m.ListResult | msgspec.Raw:
        """Encoded by :class:`Listing`, which keeps each session's unchanged fields
        encoded (listings are read far more often than sessions change). In a fleet,
        every host's sessions, another host's with its fleet-wide claims as the fleet
        holds them now (:meth:`ClaimView.sessions`)."""
        st = self.svc.state
        if st.hidden_from(p.for_profile):
            return m.ListResult(profile=st.profile, visible=False)
        clock = self.svc.clock
        now_m, now_w = clock.monotonic(), clock.now()
        reg = st.registry
        sessions = list(reg.sessions.values())
        stale = reg.stale_flags(sessions, now_m)
        if p.fresh and any(stale):
            sessions = [s for s, old in zip(sessions, stale, strict=True) if not old]
            stale = [False] * len(sessions)
        held = list(map(st.claims.list_claims, map(_SESSION_ID, sessions)))
        fleet = self._fleet.fleet
        if fleet is None:
            return self._listing.encode(st.profile, sessions, stale, held, now_wall=now_w)
        # SPEC §12: every host's sessions, each with its host
        more = [] if p.local else await self.view.sessions(fleet.remote_sessions(fresh=p.fresh))
        alone = self.view.local_only() or None
        return self._listing.encode(
            st.profile, sessions, stale, held, now_wall=now_w, host=fleet.host, more=more,
            local_only=alone,
        )  # fmt: skip

    async def get(self, p: m.GetParams, conn: Conn) -> m.SessionInfo:
        clock = self.svc.clock
        fleet = self._fleet.fleet
        if fleet is not None and p.session_id not in self.svc.state.registry.sessions:
            for info in fleet.remote_sessions():
                if info.session_id == p.session_id:  # another host's
                    return (await self.view.sessions([info], whole=True))[0]
        s = self.svc.state.registry.get(p.session_id)
        return self.info(s, clock.monotonic(), clock.now())


def not_the_daemon(sid: str | None) -> None:
    """Refuse the daemon's own sender name as a session id: what a session sends is
    framed as another session's (SPEC §6), never as the daemon's notices."""
    if sid == DAEMON_SENDER:
        raise InvalidParams(
            f"{DAEMON_SENDER!r} is the mesh daemon's own name (the sender of its notices); "
            "choose another session id",
            {"path": "$.session_id"},
        )
