"""``claim.preempt``, ``session.pause``, ``session.resume`` (SPEC §5b).

Preemption is cooperative: the preemptor must out-rank every holder it asks,
and nothing is taken. Each holder gets a ``preempt`` event carrying a durable
inbox notice (who asks, why, the grace); when the grace runs out with a holder
still holding, the preemptor gets a ``preempt.expired`` event and notice and
may ``steal``. ``pause`` stores the checkpoint note (a shared note in the
session's notebook and an unaddressed handoff) and releases the session's
claims into a reserved set (:meth:`meshd.core.claims.paused.PausedSets.pause`);
``resume`` queues for that set and answers with the note.

Reservations and pending preemptions live in memory only: a daemon restart
drops them, and ``resume`` then says ``reservation: lost`` and asks for the
set like anyone (the note, a handoff, and the ``paused`` status are durable).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeVar, get_args

import msgspec

from meshd.core.claims.records import RESERVED
from meshd.core.sessions.registry import Report
from meshd.core.state import Event, Write
from meshd.core.work.notes import Reader
from meshd.core.work.preempt import Preemption
from meshd.domain import Domain
from meshd.domains.claims import ClaimHandlers
from meshd.protocol import claims as pc
from meshd.protocol import preempt as pp
from meshd.protocol.contract import rfc3339
from meshd.protocol.events import PreemptEvent, PreemptExpiredEvent
from meshd.protocol.jsonrpc import Later
from meshd.protocol.methods import Status
from meshd.service import Conn, Service

if TYPE_CHECKING:
    from meshd.core.claims.records import Claim

STATUSES = frozenset(get_args(Status))
#: The audit row's ``how`` when a preemptor of a session paused already is served first.
SERVED_FIRST = "served first on the reserved set"
CHECKPOINT = "checkpoint: "
"""What the shared note of a pause starts with; the limit is the note's own, without it."""
T = TypeVar("T")


class PreemptHandlers(Domain):
    name = "preempt"

    def __init__(self, svc: Service, *, claims: ClaimHandlers) -> None:
        super().__init__(svc)
        self.claims = claims
        self.pre = svc.state.preemptions

    def install(self) -> None:
        self.svc.add(pp.PREEMPT, self.preempt, is_async=True)
        self.svc.add(pp.PAUSE, self.pause, is_async=True)
        self.svc.add(pp.RESUME, self.resume, is_async=True, concurrent=True)

    # --- preempt ---------------------------------------------------------------------

    async def preempt(self, p: pp.PreemptParams, conn: Conn) -> pp.PreemptResult:
        svc, st = self.svc, self.svc.state
        reg = st.registry
        keys = await self.claims.keys_of(p.resources, p.broad)
        me = reg.get(p.session_id)  # after: it may have ended while paths were resolved
        by_holder: dict[str, list[Claim]] = {}
        for c in st.claims.check(keys, p.session_id):
            # a paused session's reserved set: the session is the holder (it is not asked)
            by_holder.setdefault(c.session_id, []).append(c)
        holders = [
            pp.PreemptHolder(
                session_id=sid.removeprefix(RESERVED), resources=[c.resource for c in mine],
                rank=reg.rank(sid.removeprefix(RESERVED)),
                task=s.task if (s := reg.sessions.get(sid.removeprefix(RESERVED))) else "",
                paused=sid.startswith(RESERVED),
            )
            for sid, mine in by_holder.items()
        ]  # fmt: skip
        if not holders:
            return pp.PreemptResult(status="free", rank=me.rank)
        if any(h.rank >= me.rank for h in holders):
            return pp.PreemptResult(status="held", reason="rank", holders=holders, rank=me.rank)
        grace = st.settings.preempt_grace
        live = [h for h in holders if not h.paused]
        pre = self.pre.add(
            p.session_id, {h.session_id: tuple(h.resources) for h in live}, p.reason, grace
        )
        deadline = rfc3339(pre.at + grace)
        events: list[Event] = []
        audit: list[Write] = []
        paused = [h for h in holders if h.paused]
        for h in paused:
            audit += self.claims.audit_rows(h.session_id, h.resources, "preempt",
                                            by=p.session_id, reason=p.reason,
                                            how=SERVED_FIRST)  # fmt: skip
        for h in live:
            text = (
                f"{p.session_id} (rank {me.rank}) asks you (rank {h.rank}) to checkpoint and "
                f"pause: it needs {', '.join(h.resources)}"
                + (f" — {p.reason}" if p.reason else "")
                + f". Grace {grace:g} s (until {deadline}): meshctl pause --note TEXT. "
                "Nothing is taken from you by force."
            )
            m = st.mailbox.notice(h.session_id, text, push=False)
            events.append(Event(h.session_id, PreemptEvent(
                session_id=h.session_id, preemption_id=pre.id, by=p.session_id,
                resources=h.resources, reason=p.reason, grace_s=grace, deadline=deadline,
                id=m.id, text=m.text, created_at=rfc3339(m.created_at),
                state=st.mailbox.items.push_state(m),
            )))  # fmt: skip
            audit += self.claims.audit_rows(h.session_id, h.resources, "preempt",
                                            by=p.session_id, reason=p.reason,
                                            how=f"grace {grace:g} s")  # fmt: skip
        until = svc.clock.monotonic() + grace

        def apply() -> None:
            st.events.extend(events)
            for h in paused:
                st.claims.paused.prefer(h.session_id, p.session_id, until)

        await self._store_first(audit, apply, undo=lambda: self.pre.drop(pre.id))
        if not live:
            self.pre.drop(pre.id)  # nobody to tell when the grace runs out
        svc.flush_background()
        return pp.PreemptResult(
            status="asked", holders=holders, rank=me.rank, grace_s=grace,
            preemption_id=pre.id if live else None, deadline=deadline,
        )  # fmt: skip

    def sweep(self) -> None:
        """Tell each preemptor whose grace ran out who still holds (it may steal)."""
        for pre in self.pre.due():
            self._expired(pre)
        if self.pre.checkpoints:  # someone is paused: its preemptors' turn may have run out
            # the set is its owner's again (a queued resume is granted); the core logs
            # the lapse, whichever wake finds it first (Reservations.lapse)
            self.svc.state.claims.wake_deferred()

    def _expired(self, pre: Preemption) -> None:
        st = self.svc.state
        if pre.by not in st.registry.sessions:
            return
        still = {
            sid: res for sid, res in pre.holders.items()
            if any(c.resource in res for c in st.claims.list_claims(sid))
        }  # fmt: skip
        if not still:
            return
        resources = sorted({r for res in still.values() for r in res})
        text = (
            f"The grace of your preemption ran out: {', '.join(sorted(still))} still "
            f"hold{'s' if len(still) == 1 else ''} {', '.join(resources)}. Nothing was "
            "taken; you may steal "
            "(meshctl steal RES --reason R)."
        )
        m = st.mailbox.notice(pre.by, text, push=False)
        st.events.append(Event(pre.by, PreemptExpiredEvent(
            session_id=pre.by, preemption_id=pre.id, by=pre.by, resources=resources,
            reason=pre.reason, grace_s=pre.grace, deadline=rfc3339(pre.at + pre.grace),
            holders=sorted(still), id=m.id, text=m.text, created_at=rfc3339(m.created_at),
            state=st.mailbox.items.push_state(m),
        )))  # fmt: skip
        st.writes += self.claims.audit_rows(pre.by, resources, "preempt", how="grace ran out",
                                            reason=pre.reason)  # fmt: skip

    # --- pause / resume --------------------------------------------------------------

    async def pause(self, p: pp.PauseParams, conn: Conn) -> pp.PauseResult:
        svc, st = self.svc, self.svc.state
        s = st.registry.get(p.session_id)
        st.mailbox.items.check_body(p.note, "$.note")  # the note given, not its prefix
        note = st.notes.add(
            Reader(s.session_id, s.reg),
            CHECKPOINT + p.note,
            private=False,
            limit=st.settings.max_body_bytes + len(CHECKPOINT),
        )
        await self.svc.commit()
        handoff = st.mailbox.write_handoff(p.session_id, p.note)
        paused = msgspec.structs.replace(s, status="paused")

        def apply() -> tuple[list[str], list[str]]:
            # one preemptor asking for several keys apart is first once, in asking order
            first = list(dict.fromkeys(pre.by for pre in self.pre.paused(p.session_id)))
            until = self.svc.clock.monotonic() + st.settings.preempt_grace
            reserved = st.claims.paused.pause(p.session_id, first, until)
            self.claims.paused(p.session_id)  # its fleet-wide waits, as pause did its own
            if s.status != "paused":
                self.pre.before[p.session_id] = s.status
            self.pre.checkpoints[p.session_id] = p.note
            st.registry.heartbeat(p.session_id, Report(status="paused"))
            st.writes += self.claims.audit_rows(p.session_id, reserved, "pause",
                                                reason=p.note[:200])  # fmt: skip
            return first, reserved

        first, reserved = await self._store_first([("session.snapshot", paused)], apply)
        # the releases are stored before the reply (SPEC §8: a kill -9 right after it
        # must not give the paused session its claims back); the reservation is not durable
        await svc.commit()
        return pp.PauseResult(
            session_id=p.session_id, reserved=reserved, first=first, handoff_id=handoff.id,
            note_id=note.id,
        )  # fmt: skip

    async def resume(self, p: pp.ResumeParams, conn: Conn) -> pp.ResumeResult | Later:
        st = self.svc.state
        sid = p.session_id
        s = st.registry.get(sid)
        note = self.pre.checkpoints.get(sid)
        if note is None and (h := st.mailbox.handoff_for(sid, sid)) is not None:
            note = h.summary
        held = st.claims.paused.view(sid)
        if held is None:
            # lost: paused by a pause (its checkpoint handoff is durable) that this daemon
            # does not remember, so a restart came between; a status "paused" a heartbeat
            # set, with no pause behind it, had no reservation to lose
            lost = s.status == "paused" and sid not in self.pre.checkpoints and note is not None
            how: Literal["lost", "none"] = "lost" if lost else "none"
            await self._resumed(sid)
            return pp.ResumeResult(session_id=sid, status="resumed", note=note or "",
                                   reservation=how)  # fmt: skip
        keys, mode, _first, reason = held
        wait = min(p.wait if p.wait is not None else st.settings.max_query_timeout,
                   st.settings.max_query_timeout)  # fmt: skip
        t0 = time.monotonic()
        got = await self.claims.acquire_keys(
            sid, keys, mode=mode, reason=reason, wait=wait, conn=conn
        )
        if isinstance(got, Later):  # queued: the reservation's turn comes later
            return Later.running(self._resume_when(sid, note, t0, got))
        return await self._resumed_with(sid, note, t0, got)

    async def _resume_when(
        self, sid: str, note: str | None, t0: float, queued: Later
    ) -> pp.ResumeResult:
        reply: pc.ClaimAcquireResult = await queued.outcome()
        return await self._resumed_with(sid, note, t0, reply)

    async def _resumed_with(
        self, sid: str, note: str | None, t0: float, reply: pc.ClaimAcquireResult
    ) -> pp.ResumeResult:
        """The resume's answer once its set is granted or held."""
        st = self.svc.state
        if reply.status != "granted":
            return pp.ResumeResult(
                session_id=sid, status="held", note=note or "", reservation="kept",
                holders=reply.holders, waited_s=round(time.monotonic() - t0, 3),
            )  # fmt: skip
        st.claims.paused.unreserve(sid)
        await self._resumed(sid)
        return pp.ResumeResult(
            session_id=sid, status="resumed", note=note or "", reservation="kept",
            resources=[c.resource for c in reply.claims], token=reply.token,
            waited_s=round(time.monotonic() - t0, 3),
        )  # fmt: skip

    async def _resumed(self, sid: str) -> None:
        """Status back to what it was before the pause (stored first)."""
        st = self.svc.state
        s = st.registry.sessions.get(sid)
        if s is not None and s.status == "paused":
            status = _status(self.pre.before.get(sid, "idle"))
            rows = self.claims.audit_rows(sid, [], "resume")
            back = msgspec.structs.replace(s, status=status)

            def apply() -> None:
                st.registry.heartbeat(sid, Report(status=status))
                self._forget_pause(sid)

            await self._store_first([("session.snapshot", back), *rows], apply)
        self._forget_pause(sid)

    def _forget_pause(self, sid: str) -> None:
        """``sid`` resumed: the status it had before the pause and its note go."""
        self.pre.before.pop(sid, None)
        self.pre.checkpoints.pop(sid, None)

    async def _store_first(
        self, writes: list[Write], apply: Callable[[], T], undo: Callable[[], None] | None = None
    ) -> T:
        """Commit ``writes`` with what the mailbox wrote meanwhile, then ``apply()``: a
        refused write changes nothing (the mailbox forgets its items, ``undo()``); a
        caller cancelled meanwhile still applies what landed (:meth:`Service.store_first`)."""
        st = self.svc.state
        mail, pushes = st.mailbox.drain()

        def refused() -> None:
            st.mailbox.forget(mail)
            if undo is not None:
                undo()

        def stored() -> T:
            st.events.extend(Event(*push) for push in pushes)
            return apply()

        return await self.svc.store_first([*mail, *writes], stored, refused)

    def connection_closed(self, conn: Conn) -> None:
        """Forget the preemptions of sessions that are gone (checked lazily here): the cost
        follows the pending preemptions, not the live sessions (1,000 closing connections
        each copied the whole session table)."""
        live = self.svc.state.registry.sessions
        for sid in {pre.by for pre in self.pre.pending() if pre.by not in live}:
            self.pre.forget(sid)


def _status(status: str) -> Status:
    return status if status in STATUSES else "idle"  # type: ignore[return-value]
