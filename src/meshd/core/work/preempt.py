"""Preemption requests and their grace (SPEC §5b): who asked whom to make way, until when.

Pure and synchronous, on the injected clock. A preemption never takes a claim:
it records that ``by`` asked the lower-ranked ``holders`` to checkpoint and pause,
and when the grace runs out with a holder still holding, :meth:`Preemptions.due`
hands it over once so the preemptor can be told (it may then ``steal``). A holder
that pauses satisfies every preemption naming it; their preemptors are the ones
its reserved set is kept for first (:meth:`meshd.core.claims.paused.PausedSets.pause`).

Not durable: a daemon restart forgets pending preemptions (the holders' inbox
notices stay); the preemptor asks again.
"""

from __future__ import annotations

import heapq
import itertools

import msgspec

from meshd.core.clock import Clock


class Preemption(msgspec.Struct):
    """``by`` asked ``holders`` (session -> the resources it wants of theirs) to pause."""

    id: int
    by: str
    holders: dict[str, tuple[str, ...]]
    reason: str
    grace: float
    at: float  # wall, for people
    deadline: float  # monotonic
    told: bool = False


class Preemptions:
    """The pending preemptions of one profile."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._ids = itertools.count(1)
        self._pending: dict[int, Preemption] = {}
        self._heap: list[tuple[float, int]] = []
        #: Each paused session's checkpoint note, and its status before the pause.
        self.checkpoints: dict[str, str] = {}
        self.before: dict[str, str] = {}

    def add(
        self, by: str, holders: dict[str, tuple[str, ...]], reason: str, grace: float
    ) -> Preemption:
        p = Preemption(
            next(self._ids), by, dict(holders), reason, grace, self.clock.now(),
            self.clock.monotonic() + grace,
        )  # fmt: skip
        self._pending[p.id] = p
        heapq.heappush(self._heap, (p.deadline, p.id))
        return p

    def pending(self, holder: str | None = None) -> list[Preemption]:
        """Pending preemptions (naming ``holder``), oldest first."""
        return [p for p in self._pending.values() if holder is None or holder in p.holders]

    def paused(self, holder: str) -> list[Preemption]:
        """``holder`` paused: each preemption naming it is satisfied for it. Returns
        them (their preemptors are served first); one with no holder left is done."""
        out = []
        for p in self.pending(holder):
            del p.holders[holder]
            out.append(p)
            if not p.holders:
                del self._pending[p.id]
        return out

    def drop(self, preemption_id: int) -> None:
        """Forget one (its notices could not be stored: it never happened)."""
        self._pending.pop(preemption_id, None)

    def forget(self, session_id: str) -> None:
        """A session ended: its own preemptions go, and it is no holder of any."""
        for p in list(self._pending.values()):
            p.holders.pop(session_id, None)
            if p.by == session_id or not p.holders:
                del self._pending[p.id]

    def due(self) -> list[Preemption]:
        """Preemptions whose grace ran out with a holder still not paused, each once."""
        now, out = self.clock.monotonic(), []
        while self._heap and self._heap[0][0] <= now:
            _, pid = heapq.heappop(self._heap)
            p = self._pending.get(pid)
            if p is not None and not p.told:
                p.told = True
                out.append(p)
        return out
