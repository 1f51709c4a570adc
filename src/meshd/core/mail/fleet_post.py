"""The fleet's post office (SPEC §12, docs/FLEET.md): outbox rows and seen keys. Pure.

What one host sends to others (inbox items, broadcasts, signals) is first an
**outbox row** -- key, subject, payload -- stored in the same commit as everything
else the call stored; the shell's forwarder publishes rows in order and forgets each
once JetStream acknowledged it (``("fleet.sent", key)``). What arrives is taken only
if its key was never **seen**: the key is stored with the items it made, in one
commit, before the stream is acknowledged, so a redelivered item is dropped and an
item is delivered exactly once.

No I/O: keys come from an injected factory (the shell's is random), time from the
injected clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from meshd.core.clock import Clock, SteadyWall

Write = tuple[Any, ...]
SEEN_DAYS = 8.0
"""Seen keys are kept this long: longer than the stream keeps anything (7 days)."""


class Outgoing(msgspec.Struct, frozen=True):
    """One outbox row: published as ``payload`` on ``subject`` with ``Nats-Msg-Id: key``."""

    key: str
    subject: str
    payload: bytes
    created_at: float


class FleetPost:
    """The outbox waiting to be published and the keys already taken in."""

    def __init__(self, clock: Clock, new_key: Callable[[], str]) -> None:
        self.clock = clock
        self.steady = SteadyWall(clock)
        self.new_key = new_key
        self.pending: dict[str, Outgoing] = {}  # in posting order
        self.seen: dict[str, float] = {}
        self.writes: list[Write] = []

    def restore(self, pending: Iterable[Outgoing], seen: Iterable[tuple[str, float]]) -> None:
        for out in pending:
            self.pending[out.key] = out
        self.seen.update(seen)

    def post(self, subject: str, payload: Callable[[str], bytes]) -> Outgoing:
        """Queue ``payload(key)`` for ``subject`` under a new key (the payload carries
        it too: the receiver's own check); stored with the caller's commit."""
        key = self.new_key()
        out = Outgoing(key, subject, payload(key), self.clock.now())
        self.pending[out.key] = out
        self.writes.append(("fleet.out", out))
        return out

    def sent(self, key: str) -> None:
        """JetStream acknowledged ``key``: the row goes (a later crash re-sends it, and
        the receivers drop the copy by its key)."""
        if self.pending.pop(key, None) is not None:
            self.writes.append(("fleet.sent", key))

    def is_new(self, key: str) -> bool:
        return key not in self.seen

    def take(self, key: str) -> None:
        """Record ``key`` as taken in, with the items it made (same commit)."""
        at = self.steady.now()
        self.seen[key] = at
        self.writes.append(("fleet.seen", key, at))

    def forget(self, refused: Iterable[Write]) -> None:
        """Writes the disk refused: the rows and keys they created never happened."""
        for w in refused:
            if w[0] == "fleet.out":
                self.pending.pop(w[1].key, None)
            elif w[0] == "fleet.seen":
                self.seen.pop(w[1], None)

    def prune(self) -> None:
        cutoff = self.steady.now() - SEEN_DAYS * 86400
        for key in [k for k, at in self.seen.items() if at < cutoff]:
            del self.seen[key]
        self.writes.append(("fleet.seen_prune", cutoff))

    def drain(self) -> list[Write]:
        writes, self.writes = self.writes, []
        return writes
