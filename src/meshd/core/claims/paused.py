"""Paused sessions' reserved sets, as operations on the lock table (SPEC §5b).

A session that pauses gives its claims back into a set held for it: the preemptors
it names are served first there, then only the paused session, which takes the set
back when it resumes. :class:`~meshd.core.claims.reservations.Reservations` keeps the
sets and whom each admits; :class:`PausedSets` is what a pause, a later preemptor, a
resume and a steal from a set do to the table (drop, grant, settle, tell the owner).
Pure and synchronous, as the table is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from msgspec.structs import replace

from meshd.core.claims.queue import Request
from meshd.core.claims.records import RESERVED, RESERVED_HOW, Claim

if TYPE_CHECKING:
    from meshd.core.claims.queue import WaitQueue
    from meshd.core.claims.records import Granted, Held, Outbox
    from meshd.core.claims.reservations import Reservations
    from meshd.core.clock import Clock
    from meshd.keys import Key
    from meshd.protocol.claims import AuditAction, Mode


class _Table(Protocol):
    """What of :class:`~meshd.core.claims.table.ClaimTable` a reserved set works on
    (named here, not imported: the table owns its :class:`PausedSets`)."""

    clock: Clock
    outbox: Outbox
    _queue: WaitQueue
    _by_session: dict[str, dict[str, Claim]]
    _reservations: Reservations

    def cancel_waiter(self, waiter_id: str, *, why: str = ..., wake: bool = ...) -> Held | None: ...

    def _grant(
        self, req: Request, now_mono: float, now_wall: float, *, how: str = ...,
        waiter_id: str | None = ..., token: int | None = ...,
    ) -> Granted: ...  # fmt: skip

    def _drop(
        self, claim: Claim, action: AuditAction, now_wall: float, *, how: str,
        by: str | None = ..., reason: str = ...,
    ) -> None: ...  # fmt: skip

    def _settle(self) -> None: ...


class PausedSets:
    """The reserved sets of one :class:`~meshd.core.claims.table.ClaimTable`."""

    def __init__(self, table: _Table) -> None:
        self.table = table

    def view(self, owner: str) -> tuple[tuple[Key, ...], Mode, tuple[str, ...], str] | None:
        """A paused session's reserved set: its keys, mode, the preemptors still to be
        served first, and the reason its claims had; None if it holds no reservation."""
        return self.table._reservations.view(owner)

    def pause(self, owner: str, first: Iterable[str], until: float = float("inf")) -> list[str]:
        """``owner`` pauses (SPEC §5b): its claims are released into a reserved set that admits
        the preemptors ``first`` until each has been granted on it and released what it took
        (one not granted by ``until``, monotonic, loses its turn), then only ``owner`` (its
        acquire passes every earlier waiter there). Returns the resources; holding
        nothing, it reserves nothing. Its queued waits are withdrawn (``held``, why
        ``paused``: granted while it did no work, a key was kept from everyone); not a resume."""
        t = self.table
        for waiter_id in list(t._queue.of.get(owner, {})):
            t.cancel_waiter(waiter_id, why="paused")
        mine = list(t._by_session.get(owner, {}).values())
        if not mine:
            return []
        if t._reservations.holds(owner):
            self.unreserve(owner)
        now_mono, now_wall = t.clock.monotonic(), t.clock.now()
        for claim in mine:
            t._drop(claim, "release", now_wall, how="paused")
        r = t._reservations.reserve(owner, mine, first, until)
        t._grant(Request(r.holder, r.keys, r.mode, f"reserved for {owner}"), now_mono,
                 now_wall, how="reserve")  # fmt: skip
        t._reservations.mark(r)
        t._settle()
        return [c.resource for c in mine]

    def prefer(self, owner: str, session_id: str, until: float = float("inf")) -> bool:
        """``session_id`` preempts ``owner``, paused already: it is served first on the
        reserved set, as a preemptor that asked before the pause is (SPEC §5b), until
        ``until`` (monotonic) unless granted by then. False if nothing is reserved."""
        preferred = self.table._reservations.prefer(owner, session_id, until)
        self.table._settle()
        return preferred

    def unreserve(self, owner: str) -> list[str]:
        """Drop ``owner``'s reserved set (it resumed, or ended); returns its resources."""
        t = self.table
        r = t._reservations.drop(owner)
        if r is None:
            return []
        gone = list(t._by_session.get(r.holder, {}).values())
        now_wall = t.clock.now()
        for claim in gone:
            t._drop(claim, "release", now_wall, how="unreserved")
        t._settle()
        return [c.resource for c in gone]

    def stolen(self, victims: Iterable[Claim], now_wall: float, by: str, reason: str) -> None:
        """Tell whom a steal took from: a holder, or, for claims of a reserved set, the
        paused session it is held for (SPEC §5: the holders told)."""
        held: list[Claim] = []
        kept: list[Claim] = []
        for c in victims:
            (kept if c.session_id.startswith(RESERVED) else held).append(c)
        out = self.table.outbox
        out.losses(held, "stolen", now_wall, how="stolen", by=by, reason=reason)
        if kept:
            owners = [replace(c, session_id=c.session_id.removeprefix(RESERVED)) for c in kept]
            out.losses(owners, "stolen", now_wall, how=RESERVED_HOW, by=by, reason=reason)
