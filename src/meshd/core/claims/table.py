"""The lock table: advisory claims, fair queues and fencing tokens (SPEC §5, §5b).

Pure and synchronous: no I/O, no anyio. Time comes from the injected
:class:`~meshd.core.clock.Clock`, read once per command (``monotonic()`` drives
ttl deadlines, ``now()`` is what people read); keys arrive already canonical
(:func:`meshd.keys.canonical_key`). The records it deals in are in
:mod:`meshd.core.claims.records`, the index of claims and waiters by key in
:mod:`meshd.core.claims.path_trie`.

* A session's claims never conflict with its ancestors' or descendants'
  (``ancestors`` callback, following ``parent``); siblings conflict as strangers.
* Waiters are served by rank, highest first (``rank_of`` callback, SPEC §5b),
  FIFO within a rank (the exception, a key already covered, is in
  :mod:`meshd.core.claims.conflicts`). A wait that would close a cycle of waiting
  sessions is refused at once (``deadlock=True``).
* One fencing token per grant, from :class:`Fencing`, which asks the store to
  persist blocks ("tokens up to N may be issued") so tokens never go back.

The table is five objects: :class:`~meshd.core.claims.holdings.Holdings` (the
claims held now, four indexes), :class:`~meshd.core.claims.queue.WaitQueue` (the
waiters and what each is parked on: why enqueue, cancel and wake cost O(log n)
with 10,000 waiters on one key), :class:`~meshd.core.claims.conflicts.Conflicts`
(who blocks a request, deadlock), :class:`~meshd.core.claims.reservations.Reservations`
(paused sessions' reserved sets, whom each admits), and this module's
:class:`ClaimTable`, which decides: grants, drops, steals, and the outbox; what a
pause, a resume and a steal from a reserved set do to it is
:class:`~meshd.core.claims.paused.PausedSets` (``table.paused``).

Every change leaves plain records in :attr:`ClaimTable.outbox` -- audit records for
the log, notices for holders and waiters, cancelled waits, the fencing block to
persist -- which the caller collects with :meth:`ClaimTable.drain` and writes or
sends. Nothing here calls back into I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from meshd.core.claims.conflicts import Conflicts
from meshd.core.claims.holdings import Holdings
from meshd.core.claims.path_trie import PathTrie
from meshd.core.claims.paused import PausedSets
from meshd.core.claims.queue import Request, Waiter, WaitQueue
from meshd.core.claims.records import (
    CLEAN_ENDS,
    MODE_CHANGE,
    Cancelled,
    Claim,
    ClaimStatistics,
    EndHow,
    Fencing,
    Granted,
    Held,
    Notice,
    Outbox,
    Outcome,
    Queued,
    Waiting,
)
from meshd.core.claims.reservations import Reservations
from meshd.protocol.claims import AuditAction, Mode

if TYPE_CHECKING:
    from meshd.core.clock import Clock
    from meshd.keys import Key


def _no_ancestors(session_id: str) -> tuple[str, ...]:
    return ()


def _rank_zero(session_id: str) -> int:
    return 0


class ClaimTable:
    """The live claims, waiters and fencing counter of one profile."""

    def __init__(
        self,
        clock: Clock,
        *,
        ancestors: Callable[[str], tuple[str, ...]] = _no_ancestors,
        fencing: Fencing | None = None,
        rank_of: Callable[[str], int] = _rank_zero,
    ) -> None:
        self.clock = clock
        self.ancestors = ancestors
        self.rank_of = rank_of
        self.fencing = fencing if fencing is not None else Fencing()
        self.outbox = Outbox()
        self._trie: PathTrie[Waiter] = PathTrie()
        self._held: Holdings[Waiter] = Holdings(self._trie)
        self._queue = WaitQueue(self._trie, ancestors)
        # the indexes the hot paths read, by their own names (the same dicts)
        self._by_session = self._held.by_session
        self._waiters = self._queue.waiters
        self.leave = self._queue.leave  # a waiter whose caller left: withdrawn, not granted
        self._conflicts = Conflicts(self._trie, self._queue, self._by_session, self.related)
        self._reservations = Reservations(self._queue, self._by_session)
        self._reserved = self._reservations.by_holder  # (the same dict) empty: none paused
        self.paused = PausedSets(self)
        """Pause, preempt a paused session, resume: the reserved sets' operations."""

    # --- queries ----------------------------------------------------------------

    def related(self, a: str, b: str) -> bool:
        """Same session, or one is an ancestor of the other (never siblings); and a
        reserved set counts as related to whom it admits now (so they pass it, and
        it covers them: earlier waiters there do not count, SPEC §5b)."""
        if a == b or b in self.ancestors(a) or a in self.ancestors(b):
            return True
        return bool(self._reserved) and self._reservations.admits(a, b)

    def departures(self, departed: Callable[[str], bool]) -> None:
        """Tell the table whose callers left (:attr:`WaitQueue.departed`)."""
        self._queue.departed = departed

    def check(self, keys: Iterable[Key], session_id: str | None = None) -> tuple[Claim, ...]:
        """Claims overlapping ``keys`` held by sessions unrelated to ``session_id``."""
        return self._conflicts.overlapping(keys, session_id)

    def list_claims(self, session_id: str | None = None) -> tuple[Claim, ...]:
        """Every live claim, or one session's, oldest grant first."""
        return self._held.listing(session_id)

    def claims_of(self, session_id: str, resources: Iterable[str]) -> tuple[Claim, ...]:
        """``session_id``'s live claims on exactly ``resources``, ordered as
        :meth:`list_claims` orders them: looked up, not picked out of everything the
        session holds (a release of one key by a session holding 10,000 sorted them all)."""
        return self._held.of(session_id, resources)

    def waiting(self, session_id: str | None = None) -> tuple[Waiting, ...]:
        """Queued requests in serving order (rank, then arrival), or one session's."""
        if session_id is None:
            waiters: Iterable[Waiter] = self._waiters.values()
        else:
            waiters = (self._waiters[w] for w in self._queue.of.get(session_id, {}))
        return tuple(w.view() for w in sorted(waiters, key=lambda w: w.order))

    def validate(self, key: Key, token: int) -> bool:
        """Whether ``token`` still holds ``key`` (the fencing check). A claim whose ttl
        has run out is already invalid even if :meth:`expire_ttls` has not swept it."""
        return self._held.valid(key, token, self.clock.monotonic())

    def next_deadline(self) -> float | None:
        """The earliest ttl deadline (monotonic), for the sweeper's sleep; may be early."""
        return self._held.next_deadline()

    def statistics(self) -> ClaimStatistics:
        return ClaimStatistics(
            claims=self._trie.claims,
            sessions=len(self._by_session),
            waiters=len(self._waiters),
            path_nodes=self._trie.nodes,
            exact_keys=len(self._trie.exact),
            ttl_heap=len(self._held.heap),
            last_token=self.fencing.last,
            reserve_until=self.fencing.reserve_until,
        )

    def drain(self) -> Outbox:
        """Hand over everything recorded since the last drain."""
        out, self.outbox = self.outbox, Outbox()
        return out

    # --- acquire, steal ---------------------------------------------------------

    def acquire(
        self,
        session_id: str,
        keys: Iterable[Key],
        *,
        mode: Mode = "exclusive",
        reason: str = "",
        ttl: float | None = None,
        wait: bool = False,
        waiter_id: str | None = None,
        token: int | None = None,
    ) -> Outcome:
        """Claim the whole set, all or nothing.

        Returns :class:`Granted`; or :class:`Held` (with ``deadlock`` when waiting
        would close a cycle); or, with ``wait``, :class:`Queued` -- the grant then
        arrives later as a ``granted`` notice carrying ``waiter_id``.

        ``token``: the fencing token another authority issued for the set (the
        fleet's KV revision, SPEC §12) instead of one from this table's counter.
        """
        now_mono, now_wall = self.clock.monotonic(), self.clock.now()
        req = Request(session_id, _unique(keys), mode, reason, ttl)
        if self._held.holds_all(session_id, req.keys, mode):
            return self._grant(req, now_mono, now_wall)
        order = self._queue.next_order(self.rank_of(session_id))
        blocker = self._conflicts.first_blocker(req, order)
        if blocker is None:
            granted = self._grant(req, now_mono, now_wall, token=token)
            self._settle()
            return granted
        if not wait:
            return self._conflicts.held(req, order)
        if self._conflicts.blocks_anyone(session_id):
            holders, ahead, _ = self._conflicts.blockers(req, order, None)
            blocking = {c.session_id for c in holders} | {w.session_id for w in ahead}
            if self._conflicts.reaches(blocking, session_id):
                return replace(self._conflicts.held(req, order), deadlock=True)
        waiter = self._queue.enqueue(req, order, now_wall, waiter_id)
        self._queue.park(waiter, blocker)
        return Queued(waiter.waiter_id)

    def steal(
        self,
        session_id: str,
        keys: Iterable[Key],
        *,
        reason: str,
        mode: Mode = "exclusive",
        ttl: float | None = None,
        token: int | None = None,
    ) -> Granted:
        """Take the set now: conflicting claims are released (holders get ``stolen``).

        Bypasses the queue; waiters stay queued behind the new holder. ``token`` as
        for :meth:`acquire`.
        """
        if not reason.strip():
            raise ValueError("a steal needs a reason")
        now_mono, now_wall = self.clock.monotonic(), self.clock.now()
        req = Request(session_id, _unique(keys), mode, reason, ttl)
        victims, _, _ = self._conflicts.blockers(req, None, 0)
        for claim in victims:
            self._drop(claim, "steal", now_wall, how="stolen", by=session_id, reason=reason)
        self.paused.stolen(victims, now_wall, session_id, reason)
        granted = self._grant(req, now_mono, now_wall, how="steal", token=token)
        self._settle()
        return replace(granted, stolen=tuple(victims))

    def rerank(self, session_id: str) -> None:
        """``session_id``'s rank changed (``rank_of`` says so now): re-order its waits.

        Its waiters move in line and are looked at again (a higher rank may let
        one go now); so are the waiters parked on them, which may now be ahead.
        """
        rank = self.rank_of(session_id)
        for waiter_id in list(self._queue.of.get(session_id, {})):
            waiter = self._waiters[waiter_id]
            if waiter.rank != rank:
                self._queue.rerank(waiter, rank)
        self._settle()

    # --- release, expiry, cancel ------------------------------------------------

    def release(
        self,
        session_id: str,
        keys: Iterable[Key] | None = None,
    ) -> list[str]:
        """Release some (exact keys) or all of a session's claims; idempotent.

        Returns the resources released. Only exact matches: releasing ``file:/a``
        leaves a claim on ``file:/a/b`` alone.
        """
        mine = self._by_session.get(session_id, {})
        if keys is None:
            gone = list(mine.values())
        else:
            gone = [mine[k.text] for k in _unique(keys) if k.text in mine]
        now_wall = self.clock.now()
        for claim in gone:
            self._drop(claim, "release", now_wall, how="released")
        if gone:  # SPEC §6: ``released`` is a claim notice too (not a loss: no inbox item)
            self.outbox.losses(gone, "released", now_wall, how="released")
        self._settle()
        return [c.resource for c in gone]

    def release_session(self, session_id: str, how: EndHow) -> list[str]:
        """A session ended (cleanly or not): cancel its waits, free every claim.

        ``expired``/``died`` are unclean: the holder gets a ``lost`` notice and the
        next grantee of each key sees ``previous``.
        """
        for waiter_id in list(self._queue.of.get(session_id, {})):
            self.cancel_waiter(waiter_id, why=how, wake=False)
        now_wall = self.clock.now()
        gone = list(self._by_session.get(session_id, {}).values())
        action: AuditAction = "release" if how in CLEAN_ENDS else "lose"
        for claim in gone:
            self._drop(claim, action, now_wall, how=how)
        if how not in CLEAN_ENDS:
            self.outbox.losses(gone, "lost", now_wall, how=how)
        if self._reserved:  # a paused session that ends drops its reservation
            self.paused.unreserve(session_id)
            self._reservations.ended(session_id)
        self._settle()
        return [c.resource for c in gone]

    def lose(self, session_id: str, keys: Iterable[Key], token: int, *, how: str) -> list[str]:
        """Another authority took these claims (the fleet: stolen on another host, this
        host's lease ran out): drop those still held with ``token``, tell the holder
        (``lost``). Returns the resources dropped."""
        mine = self._by_session.get(session_id, {})
        gone = [mine[k.text] for k in _unique(keys) if k.text in mine]
        gone = [c for c in gone if c.token == token]
        now_wall = self.clock.now()
        for claim in gone:
            self._drop(claim, "lose", now_wall, how=how)
        self.outbox.losses(gone, "lost", now_wall, how=how)
        self._settle()
        return [c.resource for c in gone]

    def retoken(
        self, session_id: str, keys: Iterable[Key], old: int, new: int, *, how: str
    ) -> list[str]:
        """Claims held with token ``old`` now hold with ``new`` (the fleet granted a set
        this host had granted alone, SPEC §12): logged as a grant, the holder told
        (``granted``). Returns the resources that changed."""
        mine = self._by_session.get(session_id, {})
        moved = [c for c in (mine.get(k.text) for k in _unique(keys)) if c and c.token == old]
        now_wall = self.clock.now()
        for claim in moved:
            fresh = replace(claim, token=new)
            self._unput(claim, blocks_still=True)
            self._held.put(fresh)
            self.outbox.audit_claim(fresh, "grant", now_wall, how=how)
        if moved:
            resources = tuple(c.resource for c in moved)
            self.outbox.notices.append(
                Notice("granted", session_id, resources, new, now_wall, how=how)
            )
        return [c.resource for c in moved]

    def expire_ttls(self) -> list[Notice]:
        """Free every claim whose ttl has run out.

        Returns the ``expired`` notices (also in the outbox; send them from there).
        """
        gone = self._held.due(self.clock.monotonic())
        if not gone:  # the usual case (every acquire and check asks): nothing to tell
            self._settle()
            return []
        now_wall = self.clock.now()
        for claim in gone:
            self._drop(claim, "expire", now_wall, how="ttl")
        notices = self.outbox.losses(gone, "expired", now_wall, how="ttl")
        self._settle()
        return notices

    def cancel_waiter(
        self,
        waiter_id: str,
        *,
        why: str = "cancelled",
        wake: bool = True,
    ) -> Held | None:
        """Withdraw a wait (connection closed, session ended, wait ran out).

        Returns what held it (for the ``held`` reply), or None if it was not
        waiting (already granted or cancelled). Later waiters it blocked may go.

        ``wake=False`` leaves letting them go to :meth:`wake_deferred` (or the
        next change that wakes anyone) and skips working out the holders, which
        nobody reads: a closing connection withdraws up to 128 waits at once.
        """
        waiter = self._waiters.get(waiter_id)
        if waiter is None:
            return None
        held = self._conflicts.held(waiter.request, waiter.order) if wake else Held(())
        self._queue.unqueue(waiter)
        self.outbox.cancelled.append(Cancelled(waiter_id, waiter.session_id, why, held))
        if wake:
            self._settle()
        return held

    def wake_deferred(self) -> None:
        """Let waiters go that ``wake=False`` withdrawals or a lapsed reservation freed."""
        self._reservations.lapse(self.clock.monotonic(), self.clock.now(), self.outbox.audit)
        self._settle()

    def restore(
        self,
        session_id: str,
        key: Key,
        *,
        mode: Mode,
        token: int,
        reason: str,
        since: float,
        ttl_left: float | None,
    ) -> None:
        """Put back a claim the store kept across a restart (no audit, no token issued)."""
        deadline = None if ttl_left is None else self.clock.monotonic() + max(ttl_left, 0.0)
        self._held.put(Claim(session_id, key, mode, token, reason, since, ttl_left, deadline))

    # --- internals: grant and drop ----------------------------------------------

    def _grant(
        self,
        req: Request,
        now_mono: float,
        now_wall: float,
        *,
        how: str = "",
        waiter_id: str | None = None,
        token: int | None = None,
    ) -> Granted:
        """Record the whole set as held; keys already held in this mode keep their token.
        New keys get ``token`` if given (the fleet's), else the next from the counter."""
        held = self._by_session.get(req.session_id, {})  # changed below: look first
        mine = {k.text: held[k.text] for k in req.keys if k.text in held}
        kept = frozenset(
            k.text for k in req.keys if k.text in mine and mine[k.text].mode == req.mode
        )
        if len(kept) == len(req.keys):
            token = mine[req.keys[0].text].token
        elif token is None:
            token = self._issue()
        deadline = None if req.ttl is None else now_mono + req.ttl
        claims, previous, refreshed = [], [], []
        for key in req.keys:
            old = mine.get(key.text)
            if old is not None and key.text in kept:
                claim = replace(
                    old, reason=req.reason or old.reason, ttl=req.ttl, deadline=deadline
                )
                refreshed.append(old)
            else:
                claim = Claim(
                    req.session_id, key, req.mode, token, req.reason, now_wall, req.ttl, deadline
                )
                if (prev := self._held.previous.pop(key.text, None)) is not None:
                    previous.append(prev)
            if old is not None:
                self._unput(old, blocks_still=key.text in kept)
                if key.text not in kept:  # a mode change: the old claim ends here (SPEC §5)
                    self.outbox.audit_claim(old, "release", now_wall, how=MODE_CHANGE)
            self._held.put(claim)
            action: AuditAction = "refresh" if key.text in kept else "grant"
            self.outbox.audit_claim(claim, action, now_wall, how=how)
            claims.append(claim)
        if len(kept) < len(req.keys):
            self._queue.mark_relatives(req.session_id)
            if self._reserved:
                self._reservations.served(req.session_id, req.keys)
        return Granted(
            req.session_id,
            token,
            tuple(claims),
            already_held=len(kept) == len(req.keys),
            held_before=kept,
            refreshed=tuple(refreshed),
            previous=tuple(previous),
            waiter_id=waiter_id,
        )

    def unrefresh(self, claims: Iterable[Claim]) -> None:
        """Put back claims as they were before a refresh whose commit was refused (their
        ttl, deadline and reason; the disk still has them so): nothing refused takes
        effect. A claim no longer held with the same token since is left alone."""
        for old in claims:
            now = self._by_session.get(old.session_id, {}).get(old.resource)
            if now is not None and now.token == old.token and now.mode == old.mode:
                self._unput(now, blocks_still=True)
                self._held.put(old)

    def _issue(self) -> int:
        before = self.fencing.reserve_until
        token = self.fencing.next()
        if self.fencing.reserve_until != before:
            self.outbox.reserve_until = self.fencing.reserve_until
        return token

    def _drop(
        self,
        claim: Claim,
        action: AuditAction,
        now_wall: float,
        *,
        how: str,
        by: str | None = None,
        reason: str = "",
    ) -> None:
        """Remove a claim, log it, and remember an unclean end for the next grantee."""
        self._unput(claim)
        why = reason or claim.reason
        self.outbox.audit_claim(claim, action, now_wall, how=how, by=by, reason=why)
        self._held.ended(claim, how, now_wall)
        if self._reserved and self._reservations.serving(claim.session_id):
            self._reservations.let_go(claim, self._by_session.get(claim.session_id, {}))

    def _unput(self, claim: Claim, *, blocks_still: bool = False) -> None:
        """Take a claim out; waiters parked on it are looked at again (unless a
        refresh puts the same claim straight back: ``blocks_still``)."""
        self._held.unput(claim)
        if not blocks_still:
            self._queue.release_ref(("c", claim.session_id, claim.resource))

    def _settle(self) -> None:
        """Look again at every marked waiter, first served first: grant it, or park it
        on what blocks it now. A grant marks those it frees (and a release does)."""
        now: tuple[float, float] | None = None  # read once, and only if someone is granted
        while (waiter := self._queue.next_marked()) is not None:  # none whose caller left
            blocker = self._conflicts.first_blocker(waiter.request, waiter.order)
            if blocker is not None:
                self._queue.park(waiter, blocker)
                continue
            if now is None:
                now = (self.clock.monotonic(), self.clock.now())
            wid = waiter.waiter_id
            self._queue.unqueue(waiter)
            granted = self._grant(waiter.request, *now, how="wait", waiter_id=wid)
            resources = tuple(c.resource for c in granted.claims)
            self.outbox.notices.append(
                Notice(
                    "granted", waiter.session_id, resources, granted.token, now[1],
                    reason=waiter.request.reason, waiter_id=wid, granted=granted,
                )
            )  # fmt: skip


def _unique(keys: Iterable[Key]) -> tuple[Key, ...]:
    """The set's keys in the caller's order, duplicates dropped."""
    seen: dict[str, Key] = {}
    for key in keys:
        seen.setdefault(key.text, key)
    if not seen:
        raise ValueError("a claim needs at least one key")
    return tuple(seen.values())
