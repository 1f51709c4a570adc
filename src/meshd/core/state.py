"""The aggregate the service drives: the registry and the claim table (mailboxes next).

Each command mutates memory at once and leaves what must be stored in
:attr:`MeshState.writes`, what must be pushed in :attr:`MeshState.events`, and
the fate of queued claim requests in :attr:`MeshState.outcomes`. The service
drains all three right after the call (:meth:`MeshState.drain`), commits the
writes before it replies, and hands the rest on: the core itself does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meshd.core.claims import Cancelled, ClaimTable, EndHow, Fencing, Notice
from meshd.core.clock import Clock
from meshd.core.mailbox import Mailbox
from meshd.core.registry import EndReason, Registration, Registry, Report, Session
from meshd.core.settings import Settings

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


@dataclass(slots=True)
class Event:
    """A notice for one session's subscribers."""

    session_id: str
    kind: str
    payload: dict[str, Any]


@dataclass(slots=True)
class Drained:
    writes: list[Write]
    events: list[Event]
    outcomes: list[Outcome]


@dataclass
class MeshState:
    """Everything the daemon holds in memory for one profile."""

    clock: Clock
    settings: Settings
    profile: str
    registry: Registry = field(init=False)
    claims: ClaimTable = field(init=False)
    mailbox: Mailbox = field(init=False)
    writes: list[Write] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.registry = Registry(self.clock, self.settings, self.profile)
        self.mailbox = Mailbox(self.clock, self.settings, self.registry)
        self.claims = ClaimTable(ancestors=self.registry.ancestors, fencing=Fencing())

    def drain(self) -> Drained:
        """Take the writes, events and waiter outcomes the last commands produced."""
        out = self.claims.drain()
        mail_writes, pushes = self.mailbox.drain()
        self.writes.extend(mail_writes)
        self.events.extend(Event(*p) for p in pushes)
        writes, events = self.writes, self.events
        self.writes, self.events = [], []
        if out.reserve_until is not None:  # first, so the block is stored with its grants
            writes.insert(0, ("fencing.reserve", out.reserve_until))
        writes.extend(("claim.audit", rec) for rec in out.audit)
        outcomes: list[Outcome] = list(out.cancelled)
        for n in out.notices:
            if n.waiter_id is not None:
                outcomes.append(n)
            events.append(Event(n.session_id, f"claim.{n.kind}", _notice_payload(n)))
        return Drained(writes, events, outcomes)

    def hidden_from(self, asking: str | None) -> bool:
        """Whether a listing asked for by profile ``asking`` must leave this profile out
        (visibility is a default scope set by ``visible_to_profiles``, SPEC §2)."""
        return (
            bool(asking) and asking != self.profile and not self.settings.visible_to(asking or "")
        )

    def reconfigure(self, settings: Settings) -> None:
        self.settings = settings
        self.registry.settings = settings
        self.mailbox.settings = settings

    # --- sessions ---------------------------------------------------------------------

    def register(self, r: Registration) -> tuple[Session, bool]:
        s, refreshed = self.registry.register(r)
        self.writes.append(("session.put", s))
        return s, refreshed

    def heartbeat(self, sid: str, report: Report | None) -> Session:
        return self.registry.heartbeat(sid, report)

    def end(self, sid: str, reason: EndReason = "ended") -> Session:
        """End a session and release everything it held (cancelling its waits)."""
        s = self.registry.end(sid, reason)
        self.mailbox.session_ended(sid)
        self.writes.append(("session.end", sid, self.clock.now(), reason))
        self.claims.release_session(
            sid, _END_HOW[reason], now_mono=self.clock.monotonic(), now_wall=self.clock.now()
        )
        return s

    def expire_due(self) -> list[tuple[Session, EndReason]]:
        """End every session whose deadline passed, and free claims whose ttl ran out."""
        due = self.registry.due()
        for s, reason in due:
            self.end(s.session_id, reason)
        self.claims.expire_ttls(self.clock.monotonic(), self.clock.now())
        return due

    def snapshot_writes(self) -> list[Write]:
        """Changed reported fields since the last snapshot, as writes."""
        reg = self.registry
        out: list[Write] = [
            ("session.snapshot", reg.sessions[sid]) for sid in reg.dirty if sid in reg.sessions
        ]
        reg.dirty.clear()
        return out


def _notice_payload(n: Notice) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "resources": list(n.resources),
        "token": n.token,
        "at": n.at,
        "framing": "claim notice from the mesh daemon (not from the user)",
    }
    if n.how:
        payload["how"] = n.how
    if n.by:
        payload["by"] = n.by
    if n.reason:
        payload["reason"] = n.reason
    return payload
