"""The state of shared work (SPEC §7) behind the notes, signal, once and board handlers.

One :class:`SharedWork` per service holds the pure cores -- notebook, signals,
ledger, board marks -- and what they share:

* **Restore** at start-up (:meth:`SharedWork.restore`, before anything is
  served): notes, the newest signal and the counter of every name, the ledger
  and the marks. A ledger entry whose runner did not come back turns ``unknown``
  at the first sweep, and in any case before anyone is told anything about it.
* **Commit**: the cores' writes leave through :meth:`SharedWork.drain` (the
  domain's outbox); :meth:`SharedWork.commit` stores them (ledger writes synced)
  before the reply.
* **Sweep** (every tick of the daemon's sweeper): runners that are gone turn
  their keys ``unknown``, marks of ended sessions go. **Prune** (hourly): notes,
  signals and board posts older than ``history_days``.

It is a :class:`~meshd.domain.Domain` of its own with no methods, listed in
``app.DOMAINS`` before the handlers that use it; they find it with :func:`shared_of`.
"""

from __future__ import annotations

import sqlite3

from meshd.core.state import Event, Write
from meshd.core.work.ledger import Ledger
from meshd.core.work.marks import Marks
from meshd.core.work.notes import Notebook
from meshd.core.work.signals import SignalBoard
from meshd.domain import NOTHING, Domain
from meshd.protocol.errors import MeshDisabled
from meshd.service import Service
from meshd.store import shared as storage_shared


def shared_of(svc: Service) -> SharedWork:
    """The service's shared-work state (a domain listed before its handlers)."""
    return svc.domain(SharedWork)


class SharedWork(Domain):
    """Notebook, signals, ledger and board marks of one profile, in memory."""

    name = "shared"

    def __init__(self, svc: Service) -> None:
        super().__init__(svc)
        self.notes = Notebook(svc.clock)
        self.signals = SignalBoard(svc.clock)
        self.ledger = Ledger(svc.clock)
        self.marks = Marks(svc.clock)

    def live(self, sid: str) -> bool:
        return sid in self.svc.state.registry.sessions

    def enabled(self) -> None:
        if not self.svc.state.settings.enabled:
            raise MeshDisabled("the mesh is disabled in config (enabled = false)")

    def restore(self, db: sqlite3.Connection) -> None:
        """Take back what the database holds (start-up, before anything is served)."""
        got = storage_shared.load(db)
        self.notes.restore(got.notes)
        self.signals.restore(got.signals, got.counters)
        self.ledger.restore(got.ledger)
        self.marks.restore(got.marks)

    def install(self) -> None:
        """No methods of its own: the notes, signal and ledger handlers serve them."""

    def drain(self) -> tuple[list[Write], list[Event]]:
        """The cores' writes, committed with the service's next commit."""
        if not (self.notes.writes or self.signals.writes or self.ledger.writes
                or self.marks.writes):  # fmt: skip
            return NOTHING
        writes: list[Write] = []
        for core in (self.notes, self.signals, self.ledger, self.marks):
            if core.writes:
                writes.extend(core.drain())
        return writes, []

    def forget(self, refused: list[Write]) -> None:
        """Notes a refused commit would have stored are not kept (a refused pause's
        checkpoint note, a refused notes.add)."""
        for w in refused:
            if w[0] == "note.put":
                self.notes.discard(w[1])

    async def commit(self) -> None:
        """Store what the cores wrote; nothing is acknowledged before it is on disk."""
        await self.svc.commit()

    def sweep(self) -> None:
        self.ledger.sweep(self.live)
        self.marks.sweep(self.live)

    def prune(self, history_days: float) -> None:
        """Notes, signals (not their counters) and board posts older than ``history_days``."""
        self.notes.prune(history_days)
        self.signals.prune(history_days)
        cutoff = self.notes.steady.now() - history_days * 86400  # steps do not age posts
        self.svc.state.writes.append(("board.post_prune", cutoff))
