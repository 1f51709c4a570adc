"""The aggregate the service drives: every domain's core state, in one place.

The registry, the claim table, the mailbox, and the cores of shared work (notebook,
signals, ledger, board marks, the board's changed files, jobs, preemptions): the
domains (:mod:`meshd.domains`) act on these and keep no state of their own beyond
the requests they hold open.

Each command mutates memory at once and leaves what must be stored in
:attr:`MeshState.writes`, what must be pushed in :attr:`MeshState.events`, and
the fate of queued claim requests in :attr:`MeshState.outcomes`. The service
drains all three right after the call (:meth:`MeshState.drain`), commits the
writes before it replies, and hands the rest on: the core itself does no I/O.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

import msgspec

from meshd.core.claims.records import RESERVED_HOW, Cancelled, EndHow, Fencing, Notice
from meshd.core.claims.table import ClaimTable
from meshd.core.clock import Clock
from meshd.core.mail.mailbox import Mailbox
from meshd.core.sessions.registry import EndReason, Registration, Registry, Report, Session
from meshd.core.settings import Settings
from meshd.core.work.board import BoardState
from meshd.core.work.jobs import JobBook
from meshd.core.work.ledger import Ledger
from meshd.core.work.marks import Marks
from meshd.core.work.notes import Notebook
from meshd.core.work.preempt import Preemptions
from meshd.core.work.signals import SignalBoard
from meshd.protocol.contract import rfc3339
from meshd.protocol.errors import MeshDisabled
from meshd.protocol.events import CLAIM_EVENTS, ClaimEvent, ClaimLoss, EventBody, kind_of

Write = tuple[Any, ...]
Outcome = Notice | Cancelled

# How a session's end reads to its claims: a clean end, or a loss the next holder is told of.
_END_HOW: dict[str, EndHow] = {
    "ended": "ended",
    "replaced": "ended",
    "expired": "expired",
    "unbound": "expired",
    "died": "died",
}


#: Claim losses kept per session for ``session.heartbeat``'s ``lost_after`` cursor.
RECENT_LOSSES = 64

_HOW = {
    "ttl": "its ttl ran out",
    "expired": "the session expired",
    "unbound": "the session's connection closed",
    "died": "the session's process died",
    "fleet": "this host was cut off from the fleet longer than its lease",
    "fleet-stolen": "another host took it in the fleet (a steal, or this host's lease ran out)",
    "fleet-conflict": "it was granted local-only and another host held it when the fleet came back",
    "fleet-join": "it was granted before this host joined the fleet and another host held it",
}


class Event(msgspec.Struct, gc=False):
    """An event for the subscribers of channel ``session_id`` (usually the session).

    ``gc=False``: an event refers to its body and nothing refers back, and a broadcast
    makes one per recipient; the collector need not walk them.
    """

    session_id: str
    body: EventBody

    @property
    def kind(self) -> str:
        return kind_of(self.body)


class _Outbox(Protocol):
    """A core of shared work: it leaves what must be stored in ``writes``."""

    writes: list[Write]


class Drained(msgspec.Struct):
    writes: list[Write]
    events: list[Event]
    outcomes: list[Outcome]


class MeshState:
    """Everything the daemon holds in memory for one profile.

    (A plain class: as a dataclass it cost every daemon start 0.4 ms to build.)
    """

    def __init__(self, clock: Clock, settings: Settings, profile: str) -> None:
        self.clock = clock
        self.settings = settings
        self.profile = profile
        self.writes: list[Write] = []
        self.events: list[Event] = []
        #: Each session's latest claim losses, newest last (the heartbeat reports them).
        self.losses: dict[str, deque[ClaimLoss]] = {}
        self.registry = Registry(self.clock, self.settings, self.profile)
        self.mailbox = Mailbox(self.clock, self.settings, self.registry)
        self.claims = ClaimTable(
            self.clock,
            ancestors=self.registry.ancestors,
            fencing=Fencing(),
            rank_of=self.registry.rank,
        )
        # shared work (SPEC §5b, §7)
        self.notes = Notebook(self.clock)
        self.signals = SignalBoard(self.clock)
        self.ledger = Ledger(self.clock)
        self.marks = Marks(self.clock)
        self.board = BoardState(self.clock)
        self.jobs = JobBook(self.clock)
        self.preemptions = Preemptions(self.clock)
        self._work: tuple[_Outbox, ...] = (
            self.board, self.notes, self.signals, self.ledger, self.marks, self.jobs,
        )  # fmt: skip

    def check_enabled(self) -> None:
        """Refuse with ``MESH_DISABLED`` when the mesh is switched off in config."""
        if not self.settings.enabled:
            raise MeshDisabled("the mesh is disabled in config (enabled = false)")

    def live(self, sid: str) -> bool:
        """Whether session ``sid`` is registered here now."""
        return sid in self.registry.sessions

    def drain(self) -> Drained:
        """Take the writes, events and waiter outcomes the last commands produced.

        Every durable request drains once or twice, and most leave the claim table
        and the mailbox untouched: then only the lists change hands.
        """
        d = self._drain_claims_and_mail()
        for core in self._work:
            if core.writes:
                d.writes.extend(core.writes)
                core.writes = []
        return d

    def _drain_claims_and_mail(self) -> Drained:
        writes, events = self.writes, self.events
        self.writes, self.events = [], []
        mb = self.mailbox
        if self.claims.outbox.empty() and not mb.writes and not mb.events:
            return Drained(writes, events, [])
        out = self.claims.drain()
        notices = out.notices
        claim_events = [self._claim_event(n) for n in notices] if notices else []
        if mb.writes or mb.events:  # after the claim events: a loss adds an inbox notice
            mail_writes, pushes = mb.drain()
            writes.extend(mail_writes)
            events.extend(Event(*p) for p in pushes)
        if out.reserve_until is not None:  # first, so the block is stored with its grants
            writes.insert(0, ("fencing.reserve", out.reserve_until))
        if out.audit:
            writes.extend([("claim.audit", rec) for rec in out.audit])
        outcomes: list[Outcome] = list(out.cancelled)
        if notices:
            outcomes.extend([n for n in notices if n.waiter_id is not None])
            events.extend([Event(e.session_id, e) for e in claim_events])
        return Drained(writes, events, outcomes)

    def _claim_event(self, n: Notice) -> ClaimEvent:
        """The typed event for a claim notice; a loss is also a durable inbox notice
        (SPEC §5: a holder that was not listening learns it at its next inbox) and
        joins the session's recent losses, which its heartbeats report."""
        at = rfc3339(n.at)
        fields: dict[str, Any] = {
            "session_id": n.session_id, "resources": list(n.resources), "token": n.token,
            "at": at, "how": n.how, "by": n.by, "reason": n.reason,
        }  # fmt: skip
        if n.kind in ("granted", "released"):  # told live, not kept: nothing was lost
            return CLAIM_EVENTS[n.kind](**fields)
        text = loss_text(n)
        m = self.mailbox.notice(n.session_id, text, push=False)
        event = CLAIM_EVENTS[n.kind](
            **fields,
            id=m.id,
            text=m.text,
            created_at=rfc3339(m.created_at),
            state=self.mailbox.items.push_state(m),
        )
        recent = self.losses.setdefault(n.session_id, deque(maxlen=RECENT_LOSSES))
        recent.append(event)  # type: ignore[arg-type]  # every kind but granted is a loss
        return event

    def forget(self, refused: list[Write]) -> None:
        """Writes the disk refused in a foreground commit: forget the items they
        created (a steal that is given back must not leave its loss notice behind; a
        refused pause's checkpoint note, a refused ``notes.add`` or ``notes.remove``)."""
        self.mailbox.forget(refused)
        for w in refused:
            if w[0] == "note.put":
                self.notes.discard(w[1])
            elif w[0] == "note.rm":
                self.notes.put_back(w[1])
        gone = {w[1].id for w in refused if w[0] == "message.put"}
        gone.update(m.id for w in refused if w[0] == "message.put_many" for m in w[1])
        for sid, recent in self.losses.items():
            if any(e.id in gone for e in recent):
                self.losses[sid] = deque((e for e in recent if e.id not in gone), RECENT_LOSSES)

    def losses_after(self, sid: str, after: int) -> list[ClaimLoss]:
        """``sid``'s recent claim losses whose inbox notice id is above ``after``."""
        return [e for e in self.losses.get(sid, ()) if (e.id or 0) > after]

    def unread_losses(self, sid: str) -> list[ClaimLoss]:
        """``sid``'s recent claim losses whose inbox notice it has not read yet: what
        its next claim tells it (SPEC §5: a holder that was not listening learns it)."""
        items = self.mailbox.items
        return [e for e in self.losses.get(sid, ()) if e.id and items.is_unread(sid, e.id)]

    def prune_losses(self) -> None:
        """Forget the recent losses of sessions that are gone (their notices stay in
        the inbox); called with the hourly prune."""
        for sid in [s for s in self.losses if s not in self.registry.sessions]:
            del self.losses[sid]

    def hidden_from(self, asking: str | None) -> bool:
        """Whether a listing asked for by profile ``asking`` must leave this profile out
        (visibility is a default scope set by ``visible_to_profiles``, SPEC §2)."""
        return (
            bool(asking) and asking != self.profile and not self.settings.visible_to(asking or "")
        )

    def reconfigure(self, settings: Settings) -> None:
        self.settings = settings
        self.registry.reconfigure(settings)
        self.mailbox.settings = settings

    # --- sessions ---------------------------------------------------------------------

    def register(self, r: Registration) -> tuple[Session, bool]:
        s, refreshed = self.registry.register(r)
        self.writes.append(("session.put", s))
        return s, refreshed

    def prioritize(self, ranked: Session) -> Session | None:
        """Apply a rank already stored (``ranked``: the session record with it) and
        re-order that session's waits; None if the session ended meanwhile."""
        s = self.registry.sessions.get(ranked.session_id)
        if s is None:
            return None
        s.rank, s.rank_by, s.rank_at = ranked.rank, ranked.rank_by, ranked.rank_at
        self.claims.rerank(s.session_id)
        return s

    def heartbeat(self, sid: str, report: Report | None) -> Session:
        return self.registry.heartbeat(sid, report)

    def end(self, sid: str, reason: EndReason = "ended", *, stored: bool = False) -> Session:
        """End a session and release everything it held (cancelling its waits).

        ``stored``: the caller committed the end itself before applying it
        (``session.end``), so it is not written a second time.
        """
        s = self.registry.end(sid, reason)
        self.mailbox.session_ended(sid)
        if not stored:
            self.writes.append(("session.end", sid, self.clock.now(), reason))
        self.claims.release_session(sid, _END_HOW[reason])
        return s

    def expire_due(self) -> list[tuple[Session, EndReason]]:
        """End every session whose deadline passed, and free claims whose ttl ran out."""
        due = self.registry.due()
        for s, reason in due:
            self.end(s.session_id, reason)
        self.claims.expire_ttls()
        return due

    def snapshot_writes(self) -> list[Write]:
        """Changed reported fields since the last snapshot, as writes."""
        reg = self.registry
        out: list[Write] = [
            ("session.snapshot", reg.sessions[sid]) for sid in reg.dirty if sid in reg.sessions
        ]
        reg.dirty.clear()
        return out


def loss_text(n: Notice) -> str:
    """The durable notice: "your claim on file:/x (token 12) was stolen by B — hotfix"."""
    keys = ", ".join(n.resources)
    what = f"your claim on {keys} (token {n.token})"
    if n.kind == "stolen" and n.how == RESERVED_HOW:
        text = (
            f"{keys}, kept for you in your reserved set while you are paused, was stolen "
            f"by {n.by or 'another session'}"
        )
        text += f" — {n.reason}" if n.reason else ""
        return text + "; resume waits until it is free again"
    if n.kind == "stolen":
        text = f"{what} was stolen by {n.by or 'another session'}"
        return text + (f" — {n.reason}" if n.reason else "")
    if n.kind == "expired":
        return f"{what} expired: its ttl ran out, and it is free now"
    why = _HOW.get(n.how, n.how or "the session ended")
    return f"{what} was released because {why}"
