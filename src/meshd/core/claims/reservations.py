"""The lock table's reserved sets (SPEC §5b): what paused sessions released, and for whom.

Split from :mod:`meshd.core.claims.table` (the table) by object: :class:`Reservations`
keeps each paused session's :class:`~meshd.core.claims.records.Reservation` -- the
keys its claims were on and who may pass it (the preemptors still to be served
first, then only the owner) -- and tells the queue whom to look at again when that
changes. The table holds each set as the claims of the pseudo-session
``reserved:<owner>`` and decides when to pause, resume and grant.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from meshd.core.claims.records import RESERVED, AuditRecord, Reservation
from meshd.protocol.claims import REASON_MAX, Mode

#: The audit row's ``how`` when a set's preemptors lose their turn (:meth:`Reservations.lapse`).
LAPSED = "the preemptor's turn ran out"

if TYPE_CHECKING:
    from meshd.core.claims.queue import WaitQueue
    from meshd.core.claims.records import Claim
    from meshd.keys import Key


class Reservations:
    """The reserved sets of one profile, by holder (``reserved:<owner>``)."""

    def __init__(self, queue: WaitQueue, by_session: dict[str, dict[str, Claim]]) -> None:
        self.queue = queue
        self.by_session = by_session  # the holdings' index: the sets' claims, by holder
        self.by_holder: dict[str, Reservation] = {}
        #: Until when (monotonic) each set's preemptors may be served on it first; then
        #: it admits its owner (:meth:`lapse`). Only sets with preemptors still to serve
        #: (dropped with its set).
        self.until: dict[str, float] = {}

    def admits(self, a: str, b: str) -> bool:
        """Whether one of the two is a reserved set that admits the other now (so the
        other passes it, and it covers the other: earlier waiters there do not count)."""
        if (r := self.by_holder.get(b)) is not None:
            return r.admits(a)
        if (r := self.by_holder.get(a)) is not None:
            return r.admits(b)
        return False

    def view(self, owner: str) -> tuple[tuple[Key, ...], Mode, tuple[str, ...], str] | None:
        """``owner``'s set: its keys, mode, the preemptors still to be served first,
        and the reason its claims had; None if it holds no reservation."""
        r = self.by_holder.get(RESERVED + owner)
        return None if r is None else (r.keys, r.mode, tuple(sorted(r.first)), r.reason)

    def holds(self, owner: str) -> bool:
        return RESERVED + owner in self.by_holder

    def reserve(
        self, owner: str, claims: list[Claim], first: Iterable[str], until: float
    ) -> Reservation:
        """Record the set ``owner``'s ``claims`` (released by its pause) leave behind:
        exclusive if any of them was, their distinct reasons joined (capped); its
        preemptors ``first`` are served first until ``until`` (monotonic)."""
        mode: Mode = "exclusive" if any(c.mode == "exclusive" for c in claims) else "shared"
        keys = tuple(c.key for c in claims)
        reason = "; ".join(dict.fromkeys(c.reason for c in claims if c.reason))[:REASON_MAX]
        r = Reservation(owner, keys, mode, set(first) - {owner}, reason)
        self.by_holder[r.holder] = r
        if r.first:
            self.until[r.holder] = until
        return r

    def prefer(self, owner: str, session_id: str, until: float) -> bool:
        """``session_id`` preempted ``owner`` after it paused: it joins the set's
        preemptors, served first (its turn lapses at ``until`` unless granted by then,
        as theirs does). False if ``owner`` holds no reservation."""
        r = self.by_holder.get(RESERVED + owner)
        if r is None or session_id == owner:
            return False
        if session_id not in r.first:
            r.first.add(session_id)
            self.until[r.holder] = max(self.until.get(r.holder, until), until)
        self.queue.mark_session(session_id)
        return True

    def mark(self, r: Reservation) -> None:
        """Look again at the waits of whom ``r`` admits (its owner and preemptors)."""
        for sid in (r.owner, *r.first):
            self.queue.mark_session(sid)

    def drop(self, owner: str) -> Reservation | None:
        self.until.pop(RESERVED + owner, None)
        return self.by_holder.pop(RESERVED + owner, None)

    def served(self, session_id: str, keys: Iterable[Key]) -> None:
        """``session_id`` was granted keys: a reserved set it was admitted to first and
        that they overlap is being served to it. It keeps its turn there -- it may take
        the rest of the set a key at a time -- until it holds none of the set
        (:meth:`let_go`): SPEC §5b, the owner is next "when it releases"."""
        keys = tuple(keys)
        for r in self.by_holder.values():
            if session_id in r.first and any(k.overlaps(x) for k in keys for x in r.keys):
                r.taken.add(session_id)

    def serving(self, session_id: str) -> bool:
        """Whether a reserved set is being served to ``session_id`` (a preemptor)."""
        return any(session_id in r.taken for r in self.by_holder.values())

    def let_go(self, dropped: Claim, holds: dict[str, Claim]) -> None:
        """A preemptor gave up ``dropped`` (released, expired, stolen, paused) and now
        holds ``holds``: each set it was served on and holds nothing of any more admits
        the next (at last its owner), whose waits are looked at again."""
        sid = dropped.session_id
        for r in list(self.by_holder.values()):
            if sid not in r.taken or not any(dropped.key.overlaps(x) for x in r.keys):
                continue
            if not any(c.key.overlaps(x) for c in holds.values() for x in r.keys):
                self._done(r, sid)

    def _done(self, r: Reservation, session_id: str) -> None:
        r.first.discard(session_id)
        r.taken.discard(session_id)
        if not r.first:
            self._to_owner(r)

    def lapse(self, now: float, at: float, audit: list[AuditRecord]) -> None:
        """Preemptors not served on a set by its ``until`` lose their turn: the set
        admits its owner, whose waits (a queued resume) are looked at again. A
        preemptor that never takes the set must not keep the paused session out for
        ever (SPEC §5b is silent: docs/CONFORMANCE.md). Each lapse adds its rows to
        ``audit`` (wall time ``at``) here, whoever's wake found it (SPEC §5b: "all of
        it is in the audit log")."""
        if not self.until or min(self.until.values()) > now:
            return
        for holder, until in list(self.until.items()):
            r = self.by_holder.get(holder)
            if until > now or r is None:
                continue
            del self.until[holder]
            late = r.first - r.taken  # one being served keeps its turn until it releases
            if not late:
                continue
            by = ", ".join(sorted(late))
            audit.extend(
                AuditRecord(at, "preempt", r.owner, k.text, "exclusive", 0, "", LAPSED, by)
                for k in r.keys
            )
            r.first -= late
            if not r.first:
                self._to_owner(r)

    def _to_owner(self, r: Reservation) -> None:
        """``r`` admits its owner alone now: waits parked on the set look again."""
        self.until.pop(r.holder, None)
        for claim in self.by_session.get(r.holder, {}).values():
            self.queue.release_ref(("c", claim.session_id, claim.resource))
        self.queue.mark_session(r.owner)

    def ended(self, session_id: str) -> None:
        """``session_id`` ended: no set waits for it to be served first any more."""
        for r in list(self.by_holder.values()):
            if session_id in r.first:
                self._done(r, session_id)
