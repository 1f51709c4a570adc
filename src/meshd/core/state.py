"""The aggregate the service drives: registry (and, as they land, claims and mailboxes).

Each command mutates memory at once and appends what must be stored to
:attr:`MeshState.writes` and what must be pushed to :attr:`MeshState.events`.
The service drains both right after the call, commits the writes before it
replies, and hands the events to the server: the core itself does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meshd.core.clock import Clock
from meshd.core.registry import EndReason, Registration, Registry, Report, Session
from meshd.core.settings import Settings

Write = tuple[Any, ...]


@dataclass(slots=True)
class Event:
    """A notice for one session's subscribers."""

    session_id: str
    kind: str
    payload: dict[str, Any]


@dataclass
class MeshState:
    """Everything the daemon holds in memory for one profile."""

    clock: Clock
    settings: Settings
    profile: str
    registry: Registry = field(init=False)
    writes: list[Write] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.registry = Registry(self.clock, self.settings, self.profile)

    def drain(self) -> tuple[list[Write], list[Event]]:
        """Take the writes and events the last commands produced."""
        writes, events = self.writes, self.events
        self.writes, self.events = [], []
        return writes, events

    def reconfigure(self, settings: Settings) -> None:
        self.settings = settings
        self.registry.settings = settings

    # --- sessions ---------------------------------------------------------------------

    def register(self, r: Registration) -> tuple[Session, bool]:
        s, refreshed = self.registry.register(r)
        self.writes.append(("session.put", s))
        return s, refreshed

    def heartbeat(self, sid: str, report: Report | None) -> Session:
        return self.registry.heartbeat(sid, report)

    def end(self, sid: str, reason: EndReason = "ended") -> Session:
        """End a session and release everything it held."""
        s = self.registry.end(sid, reason)
        self.writes.append(("session.end", sid, self.clock.now(), reason))
        return s

    def expire_due(self) -> list[tuple[Session, EndReason]]:
        """End every session whose deadline passed (sweeper)."""
        due = self.registry.due()
        for s, reason in due:
            self.end(s.session_id, reason)
        return due

    def snapshot_writes(self) -> list[Write]:
        """Changed reported fields since the last snapshot, as writes."""
        reg = self.registry
        out: list[Write] = [
            ("session.snapshot", reg.sessions[sid]) for sid in reg.dirty if sid in reg.sessions
        ]
        reg.dirty.clear()
        return out
