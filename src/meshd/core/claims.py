"""The lock table: advisory claims, fair queues and fencing tokens (SPEC §5, §5b).

Pure and synchronous: no I/O, no anyio, no clock of its own. Times come in as
arguments (``now_mono`` drives ttl deadlines, ``now_wall`` is what people read);
keys arrive already canonical (:func:`meshd.keys.canonical_key`). The records it
deals in are in :mod:`meshd.core.claim_records`, the index of claims and waiters
by key in :mod:`meshd.core.path_trie`.

* A session's claims never conflict with its ancestors' or descendants'
  (``ancestors`` callback, following ``parent``); siblings conflict as strangers.
* Waiters are served by rank, highest first (``rank_of`` callback, SPEC §5b),
  FIFO within a rank: a request never passes a waiter of the same or a higher
  rank it conflicts with, except on a key that it (or a related session)
  already covers at least as strongly -- it takes nothing from that waiter
  there, and making it queue would only deadlock it behind its own claim. A
  wait that would close a cycle of waiting sessions is refused at once
  (``deadlock=True``).
* One fencing token per grant, from :class:`Fencing`, which asks the store to
  persist blocks ("tokens up to N may be issued") so tokens never go back.

How the queue stays cheap with 10,000 waiters on one key: each waiter is
*parked* on one thing that blocks it -- the nearest earlier waiter it conflicts
with, else a conflicting claim -- found once, by a binary search in each
overlapping node's serving order. It is looked at again only when that thing
goes (the waiter is granted or withdrawn, the claim released), when its rank
or its blocker's rank changes, or when a related session's new claim may now
cover its key. So a release looks at the one waiter parked on it, not at the
whole queue, and enqueue, cancel and wake cost O(log n) each on a plain queue.
Deadlock detection walks the wait-for graph only when the asking session blocks
someone at all (it waits already, or a waiter overlaps one of its claims).

Every change leaves plain records in :attr:`ClaimTable.outbox` -- audit records for
the log, notices for holders and waiters, cancelled waits, the fencing block to
persist -- which the caller collects with :meth:`ClaimTable.drain` and writes or
sends. Nothing here calls back into I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from meshd.core.claim_records import (
    CLEAN_ENDS,
    MAX_AHEAD,
    MAX_PREVIOUS,
    AuditAction,
    AuditRecord,
    Cancelled,
    Claim,
    ClaimStatistics,
    EndHow,
    Fencing,
    Granted,
    Held,
    Mode,
    Notice,
    NoticeKind,
    Outbox,
    Outcome,
    Previous,
    Queued,
    Waiting,
)
from meshd.core.path_trie import Node, Order, PathTrie, before

if TYPE_CHECKING:
    from meshd.keys import Key

__all__ = [
    "CLEAN_ENDS", "MAX_AHEAD", "MAX_PREVIOUS", "AuditAction", "AuditRecord", "Cancelled",
    "Claim", "ClaimStatistics", "ClaimTable", "EndHow", "Fencing", "Granted", "Held", "Mode",
    "Notice", "NoticeKind", "Outbox", "Outcome", "Previous", "Queued", "Waiting",
]  # fmt: skip

# What a waiter is parked on: ("w", waiter_id) or ("c", session_id, resource).
Ref = tuple[str, ...]


def _no_ancestors(session_id: str) -> tuple[str, ...]:
    return ()


def _rank_zero(session_id: str) -> int:
    return 0


@dataclass(frozen=True, slots=True)
class _Request:
    """What one acquire asks for."""

    session_id: str
    keys: tuple[Key, ...]
    mode: Mode
    reason: str = ""
    ttl: float | None = None


class _Waiter:
    """A queued request: its place in line and what it is parked on."""

    __slots__ = ("parked", "rank", "request", "seq", "since", "waiter_id")

    def __init__(self, waiter_id: str, seq: int, rank: int, request: _Request, since: float):
        self.waiter_id = waiter_id
        self.seq = seq
        self.rank = rank
        self.request = request
        self.since = since
        self.parked: Ref | None = None

    @property
    def order(self) -> Order:
        return (-self.rank, self.seq)

    @property
    def session_id(self) -> str:
        return self.request.session_id

    @property
    def mode(self) -> Mode:
        return self.request.mode

    def view(self) -> Waiting:
        req = self.request
        resources = tuple(k.text for k in req.keys)
        return Waiting(self.waiter_id, req.session_id, resources, req.mode, self.since, self.rank)


RESERVED = "reserved:"  # a reserved set is held by the pseudo-session "reserved:<owner>"


@dataclass(slots=True)
class _Reservation:
    """What a paused session released (SPEC §5b), held for whom may pass it:
    the preemptors in ``first`` until each is served, then only the owner."""

    owner: str
    keys: tuple[Key, ...]
    mode: Mode
    first: set[str]

    @property
    def holder(self) -> str:
        return RESERVED + self.owner

    def admits(self, session_id: str) -> bool:
        return session_id in self.first if self.first else session_id == self.owner


def _conflict(a: Mode, b: Mode) -> bool:
    return a == "exclusive" or b == "exclusive"


def _covers(held: Mode, wanted: Mode) -> bool:
    return held == "exclusive" or wanted == "shared"


def _above(held: Key, wanted: Key) -> bool:
    """``held`` is ``wanted`` or (path kinds) one of its ancestors."""
    if held.is_path and wanted.is_path:
        return held.parts == wanted.parts[: len(held.parts)]
    return held.text == wanted.text


class ClaimTable:
    """The live claims, waiters and fencing counter of one profile."""

    def __init__(
        self,
        *,
        ancestors: Callable[[str], tuple[str, ...]] = _no_ancestors,
        fencing: Fencing | None = None,
        rank_of: Callable[[str], int] = _rank_zero,
    ) -> None:
        self.ancestors = ancestors
        self.rank_of = rank_of
        self.fencing = fencing if fencing is not None else Fencing()
        self.outbox = Outbox()
        self._trie: PathTrie[_Waiter] = PathTrie()
        self._by_session: dict[str, dict[str, Claim]] = {}
        self._by_resource: dict[str, dict[str, Claim]] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._waiters_of: dict[str, dict[str, None]] = {}
        self._lineage: dict[str, tuple[str, ...]] = {}  # waiting session -> its ancestors
        self._below: dict[str, dict[str, None]] = {}  # session -> its waiting descendants
        self._parked: dict[Ref, dict[str, None]] = {}  # blocker -> waiters parked on it
        self._dirty: list[tuple[int, int, str]] = []  # waiters to look at again, first first
        self._dirty_ids: set[str] = set()
        self._seq = 0
        self._heap: list[tuple[float, int, str, str]] = []
        self._previous: dict[str, Previous] = {}
        self._reserved: dict[str, _Reservation] = {}  # by holder ("reserved:<owner>")

    # --- queries ----------------------------------------------------------------

    def related(self, a: str, b: str) -> bool:
        """Same session, or one is an ancestor of the other (never siblings); and a
        reserved set counts as related to whom it admits now (so they pass it, and
        it covers them: earlier waiters there do not count, SPEC §5b)."""
        if a == b or b in self.ancestors(a) or a in self.ancestors(b):
            return True
        if self._reserved:
            if (r := self._reserved.get(b)) is not None:
                return r.admits(a)
            if (r := self._reserved.get(a)) is not None:
                return r.admits(b)
        return False

    def reservation(self, owner: str) -> tuple[tuple[Key, ...], Mode, tuple[str, ...]] | None:
        """A paused session's reserved set: its keys, mode, and the preemptors still
        to be served first; None if it holds no reservation."""
        r = self._reserved.get(RESERVED + owner)
        return None if r is None else (r.keys, r.mode, tuple(sorted(r.first)))

    def check(self, keys: Iterable[Key], session_id: str | None = None) -> tuple[Claim, ...]:
        """Claims overlapping ``keys`` held by sessions unrelated to ``session_id``."""
        found: dict[tuple[str, str], Claim] = {}
        for key in keys:
            for claim in self._trie.claims_over(key):
                if session_id is None or not self.related(session_id, claim.session_id):
                    found[(claim.session_id, claim.resource)] = claim
        return tuple(sorted(found.values(), key=lambda c: (c.since, c.token, c.resource)))

    def list_claims(self, session_id: str | None = None) -> tuple[Claim, ...]:
        """Every live claim, or one session's, oldest grant first."""
        if session_id is not None:
            claims: Iterable[Claim] = self._by_session.get(session_id, {}).values()
        else:
            claims = (c for mine in self._by_session.values() for c in mine.values())
        return tuple(sorted(claims, key=lambda c: (c.token, c.resource)))

    def waiting(self, session_id: str | None = None) -> tuple[Waiting, ...]:
        """Queued requests in serving order (rank, then arrival), or one session's."""
        if session_id is None:
            waiters: Iterable[_Waiter] = self._waiters.values()
        else:
            waiters = (self._waiters[w] for w in self._waiters_of.get(session_id, {}))
        return tuple(w.view() for w in sorted(waiters, key=lambda w: w.order))

    def validate(self, key: Key, token: int, now_mono: float | None = None) -> bool:
        """Whether ``token`` still holds ``key`` (the fencing check).

        With ``now_mono``, a claim whose ttl has run out is already invalid even if
        :meth:`expire_ttls` has not swept it yet.
        """
        for claim in self._by_resource.get(key.text, {}).values():
            if claim.token == token:
                return now_mono is None or claim.deadline is None or now_mono < claim.deadline
        return False

    def next_deadline(self) -> float | None:
        """The earliest ttl deadline (monotonic), for the sweeper's sleep; may be early."""
        while self._heap and not self._live_deadline(self._heap[0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def statistics(self) -> ClaimStatistics:
        return ClaimStatistics(
            claims=self._trie.claims,
            sessions=len(self._by_session),
            waiters=len(self._waiters),
            path_nodes=self._trie.nodes,
            exact_keys=len(self._trie.exact),
            ttl_heap=len(self._heap),
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
        now_mono: float,
        now_wall: float,
        wait: bool = False,
        waiter_id: str | None = None,
    ) -> Outcome:
        """Claim the whole set, all or nothing.

        Returns :class:`Granted`; or :class:`Held` (with ``deadlock`` when waiting
        would close a cycle); or, with ``wait``, :class:`Queued` -- the grant then
        arrives later as a ``granted`` notice carrying ``waiter_id``.
        """
        req = _Request(session_id, _unique(keys), mode, reason, ttl)
        if self._holds_all(req):
            return self._grant(req, now_mono, now_wall)
        order = (-self.rank_of(session_id), self._seq + 1)  # behind every waiter of its rank
        blocker = self._first_blocker(req, order)
        if blocker is None:
            granted = self._grant(req, now_mono, now_wall)
            self._settle(now_mono, now_wall)
            return granted
        if not wait:
            return self._held(req, order)
        if self._blocks_anyone(session_id):
            holders, ahead, _ = self._blockers(req, order, None)
            blocking = {c.session_id for c in holders} | {w.session_id for w in ahead}
            if self._reaches(blocking, session_id):
                return replace(self._held(req, order), deadlock=True)
        waiter = self._enqueue(req, order, now_wall, waiter_id)
        self._park(waiter, blocker)
        return Queued(waiter.waiter_id, tuple(self._blockers(req, None, 0)[0]))

    def steal(
        self,
        session_id: str,
        keys: Iterable[Key],
        *,
        reason: str,
        mode: Mode = "exclusive",
        ttl: float | None = None,
        now_mono: float,
        now_wall: float,
    ) -> Granted:
        """Take the set now: conflicting claims are released (holders get ``stolen``).

        Bypasses the queue; waiters stay queued behind the new holder.
        """
        if not reason.strip():
            raise ValueError("a steal needs a reason")
        req = _Request(session_id, _unique(keys), mode, reason, ttl)
        victims, _, _ = self._blockers(req, None, 0)
        for claim in victims:
            self._drop(claim, "steal", now_wall, how="stolen", by=session_id, reason=reason)
        self._notify_losses(victims, "stolen", now_wall, how="stolen", by=session_id, reason=reason)
        granted = self._grant(req, now_mono, now_wall, how="steal")
        self._settle(now_mono, now_wall)
        return replace(granted, stolen=tuple(victims))

    def rerank(self, session_id: str, *, now_mono: float, now_wall: float) -> None:
        """``session_id``'s rank changed (``rank_of`` says so now): re-order its waits.

        Its waiters move in line and are looked at again (a higher rank may let
        one go now); so are the waiters parked on them, which may now be ahead.
        """
        rank = self.rank_of(session_id)
        for waiter_id in list(self._waiters_of.get(session_id, {})):
            waiter = self._waiters[waiter_id]
            if waiter.rank == rank:
                continue
            old = waiter.order
            waiter.rank = rank
            for key in waiter.request.keys:
                self._trie.move_waiter(key, old, waiter.order, waiter.mode == "exclusive")
            self._mark(waiter)
            self._release_ref(("w", waiter_id))
        self._settle(now_mono, now_wall)

    def pause(
        self, owner: str, first: Iterable[str], *, now_mono: float, now_wall: float
    ) -> list[str]:
        """``owner`` pauses (SPEC §5b): its claims are released into a reserved set that
        admits the preemptors ``first`` until each has been granted on it, then only
        ``owner`` (its :meth:`acquire` passes every earlier waiter there). Returns
        the resources. A session holding nothing reserves nothing."""
        mine = list(self._by_session.get(owner, {}).values())
        if not mine:
            return []
        if RESERVED + owner in self._reserved:
            self.unreserve(owner, now_mono=now_mono, now_wall=now_wall)
        for claim in mine:
            self._drop(claim, "release", now_wall, how="paused")
        mode: Mode = "exclusive" if any(c.mode == "exclusive" for c in mine) else "shared"
        keys = tuple(c.key for c in mine)
        r = _Reservation(owner, keys, mode, set(first) - {owner})
        self._reserved[r.holder] = r
        self._grant(_Request(r.holder, keys, mode, f"reserved for {owner}"), now_mono,
                    now_wall, how="reserve")  # fmt: skip
        for sid in (owner, *r.first):
            for wid in self._waiters_of.get(sid, {}):
                self._mark(self._waiters[wid])
        self._settle(now_mono, now_wall)
        return [c.resource for c in mine]

    def unreserve(self, owner: str, *, now_mono: float, now_wall: float) -> list[str]:
        """Drop ``owner``'s reserved set (it resumed, or ended); returns its resources."""
        r = self._reserved.pop(RESERVED + owner, None)
        if r is None:
            return []
        gone = list(self._by_session.get(r.holder, {}).values())
        for claim in gone:
            self._drop(claim, "release", now_wall, how="unreserved")
        self._settle(now_mono, now_wall)
        return [c.resource for c in gone]

    def _served_first(self, session_id: str, keys: Iterable[Key]) -> None:
        """``session_id`` was granted keys: a reserved set it was admitted to first
        now admits the next (at last its owner), whose waits are looked at again."""
        for r in list(self._reserved.values()):
            if session_id in r.first and any(k.overlaps(x) for k in keys for x in r.keys):
                r.first.discard(session_id)
                if not r.first:
                    for claim in self._by_session.get(r.holder, {}).values():
                        self._release_ref(("c", claim.session_id, claim.resource))
                    for wid in self._waiters_of.get(r.owner, {}):
                        self._mark(self._waiters[wid])

    # --- release, expiry, cancel ------------------------------------------------

    def release(
        self,
        session_id: str,
        keys: Iterable[Key] | None = None,
        *,
        now_mono: float,
        now_wall: float,
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
        for claim in gone:
            self._drop(claim, "release", now_wall, how="released")
        self._settle(now_mono, now_wall)
        return [c.resource for c in gone]

    def release_session(
        self, session_id: str, how: EndHow, *, now_mono: float, now_wall: float
    ) -> list[str]:
        """A session ended (cleanly or not): cancel its waits, free every claim.

        ``expired``/``died`` are unclean: the holder gets a ``lost`` notice and the
        next grantee of each key sees ``previous``.
        """
        for waiter_id in list(self._waiters_of.get(session_id, {})):
            self.cancel_waiter(waiter_id, now_mono=now_mono, now_wall=now_wall, why=how, wake=False)
        gone = list(self._by_session.get(session_id, {}).values())
        action: AuditAction = "release" if how in CLEAN_ENDS else "lose"
        for claim in gone:
            self._drop(claim, action, now_wall, how=how)
        if how not in CLEAN_ENDS:
            self._notify_losses(gone, "lost", now_wall, how=how)
        if self._reserved:  # a paused session that ends drops its reservation
            self.unreserve(session_id, now_mono=now_mono, now_wall=now_wall)
            self._served_first(session_id, [k for r in self._reserved.values() for k in r.keys])
        self._settle(now_mono, now_wall)
        return [c.resource for c in gone]

    def expire_ttls(self, now_mono: float, now_wall: float) -> list[Notice]:
        """Free every claim whose ttl ran out by ``now_mono``.

        Returns the ``expired`` notices (also in the outbox; send them from there).
        """
        gone: list[Claim] = []
        while self._heap and self._heap[0][0] <= now_mono:
            entry = heapq.heappop(self._heap)
            if self._live_deadline(entry):
                claim = self._by_session[entry[2]][entry[3]]
                self._drop(claim, "expire", now_wall, how="ttl")
                gone.append(claim)
        notices = self._notify_losses(gone, "expired", now_wall, how="ttl")
        self._settle(now_mono, now_wall)
        return notices

    def cancel_waiter(
        self,
        waiter_id: str,
        *,
        now_mono: float,
        now_wall: float,
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
        held = self._held(waiter.request, waiter.order) if wake else Held(())
        self._unqueue(waiter)
        self.outbox.cancelled.append(Cancelled(waiter_id, waiter.session_id, why, held))
        if wake:
            self._settle(now_mono, now_wall)
        return held

    def wake_deferred(self, now_mono: float, now_wall: float) -> None:
        """Let waiters go that withdrawals with ``wake=False`` may have unblocked."""
        self._settle(now_mono, now_wall)

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
        now_mono: float,
    ) -> None:
        """Put back a claim the store kept across a restart (no audit, no token issued)."""
        deadline = None if ttl_left is None else now_mono + max(ttl_left, 0.0)
        self._put(Claim(session_id, key, mode, token, reason, since, ttl_left, deadline))

    # --- internals: grant and drop ----------------------------------------------

    def _holds_all(self, req: _Request) -> bool:
        mine = self._by_session.get(req.session_id, {})
        return all(k.text in mine and mine[k.text].mode == req.mode for k in req.keys)

    def _grant(
        self,
        req: _Request,
        now_mono: float,
        now_wall: float,
        *,
        how: str = "",
        waiter_id: str | None = None,
    ) -> Granted:
        """Record the whole set as held; keys already held in this mode keep their token."""
        mine = dict(self._by_session.get(req.session_id, {}))
        kept = frozenset(
            k.text for k in req.keys if k.text in mine and mine[k.text].mode == req.mode
        )
        token = self._issue() if len(kept) < len(req.keys) else mine[req.keys[0].text].token
        deadline = None if req.ttl is None else now_mono + req.ttl
        claims, previous = [], []
        for key in req.keys:
            old = mine.get(key.text)
            if old is not None and key.text in kept:
                claim = replace(
                    old, reason=req.reason or old.reason, ttl=req.ttl, deadline=deadline
                )
            else:
                claim = Claim(
                    req.session_id, key, req.mode, token, req.reason, now_wall, req.ttl, deadline
                )
                if (prev := self._previous.pop(key.text, None)) is not None:
                    previous.append(prev)
            if old is not None:
                self._unput(old, blocks_still=key.text in kept)
            self._put(claim)
            self._audit(claim, "refresh" if key.text in kept else "grant", now_wall, how=how)
            claims.append(claim)
        if len(kept) < len(req.keys):
            self._mark_relatives(req.session_id)
            if self._reserved:
                self._served_first(req.session_id, req.keys)
        return Granted(
            req.session_id,
            token,
            tuple(claims),
            already_held=len(kept) == len(req.keys),
            held_before=kept,
            previous=tuple(previous),
            waiter_id=waiter_id,
        )

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
        self._audit(claim, action, now_wall, how=how, by=by, reason=reason or claim.reason)
        self._previous.pop(claim.resource, None)
        if how in CLEAN_ENDS:
            return
        self._previous[claim.resource] = Previous(claim.resource, claim.session_id, how, now_wall)
        if len(self._previous) > MAX_PREVIOUS:
            del self._previous[next(iter(self._previous))]

    def _audit(
        self,
        claim: Claim,
        action: AuditAction,
        now_wall: float,
        *,
        how: str = "",
        by: str | None = None,
        reason: str | None = None,
    ) -> None:
        why = claim.reason if reason is None else reason
        self.outbox.audit.append(
            AuditRecord(
                now_wall, action, claim.session_id, claim.resource, claim.mode, claim.token,
                why, how, by, claim.ttl,
            )
        )  # fmt: skip

    def _notify_losses(
        self,
        claims: Iterable[Claim],
        kind: NoticeKind,
        now_wall: float,
        *,
        how: str,
        by: str | None = None,
        reason: str = "",
    ) -> list[Notice]:
        """One notice per holder and grant (token) that lost claims."""
        groups: dict[tuple[str, int], list[str]] = {}
        for claim in claims:
            groups.setdefault((claim.session_id, claim.token), []).append(claim.resource)
        notices = [
            Notice(kind, sid, tuple(res), token, now_wall, how=how, by=by, reason=reason)
            for (sid, token), res in groups.items()
        ]
        self.outbox.notices.extend(notices)
        return notices

    def _put(self, claim: Claim) -> None:
        self._by_session.setdefault(claim.session_id, {})[claim.resource] = claim
        self._by_resource.setdefault(claim.resource, {})[claim.session_id] = claim
        self._trie.add_claim(claim)
        if claim.deadline is not None:
            entry = (claim.deadline, claim.token, claim.session_id, claim.resource)
            heapq.heappush(self._heap, entry)

    def _unput(self, claim: Claim, *, blocks_still: bool = False) -> None:
        """Take a claim out; waiters parked on it are looked at again (unless a
        refresh puts the same claim straight back: ``blocks_still``)."""
        mine = self._by_session[claim.session_id]
        del mine[claim.resource]
        if not mine:
            del self._by_session[claim.session_id]
        holders = self._by_resource[claim.resource]
        del holders[claim.session_id]
        if not holders:
            del self._by_resource[claim.resource]
        self._trie.remove_claim(claim)
        if not blocks_still:
            self._release_ref(("c", claim.session_id, claim.resource))

    def _live_deadline(self, entry: tuple[float, int, str, str]) -> bool:
        claim = self._by_session.get(entry[2], {}).get(entry[3])
        return claim is not None and claim.deadline == entry[0] and claim.token == entry[1]

    # --- internals: the queue ---------------------------------------------------

    def _enqueue(
        self, req: _Request, order: Order, now_wall: float, waiter_id: str | None
    ) -> _Waiter:
        self._seq += 1
        assert order[1] == self._seq
        wid = waiter_id if waiter_id is not None else f"w{self._seq}"
        if wid in self._waiters:
            raise ValueError(f"waiter id {wid!r} is already waiting")
        waiter = _Waiter(wid, self._seq, -order[0], req, now_wall)
        self._waiters[wid] = waiter
        sid = req.session_id
        mine = self._waiters_of.get(sid)
        if mine is None:
            mine = self._waiters_of[sid] = {}
            lineage = self._lineage[sid] = self.ancestors(sid)
            for ancestor in lineage:
                self._below.setdefault(ancestor, {})[sid] = None
        mine[wid] = None
        for key in req.keys:
            self._trie.add_waiter(key, order, sid, req.mode == "exclusive", waiter)
        return waiter

    def _unqueue(self, waiter: _Waiter) -> None:
        """Take a waiter out of line; those parked on it are looked at again."""
        wid, sid = waiter.waiter_id, waiter.session_id
        del self._waiters[wid]
        mine = self._waiters_of[sid]
        del mine[wid]
        if not mine:
            del self._waiters_of[sid]
            for ancestor in self._lineage.pop(sid):
                below = self._below[ancestor]
                del below[sid]
                if not below:
                    del self._below[ancestor]
        for key in waiter.request.keys:
            self._trie.remove_waiter(key, waiter.order, sid, waiter.mode == "exclusive")
        self._park(waiter, None)
        self._release_ref(("w", wid))

    def _park(self, waiter: _Waiter, ref: Ref | None) -> None:
        """Note what blocks ``waiter`` now (None: nothing, it is leaving or dirty)."""
        if waiter.parked is not None:
            parked = self._parked[waiter.parked]
            del parked[waiter.waiter_id]
            if not parked:
                del self._parked[waiter.parked]
        waiter.parked = ref
        if ref is not None:
            self._parked.setdefault(ref, {})[waiter.waiter_id] = None

    def _release_ref(self, ref: Ref) -> None:
        """``ref`` no longer blocks: every waiter parked on it is looked at again."""
        parked = self._parked.pop(ref, None)
        if parked is None:
            return
        for wid in parked:
            waiter = self._waiters[wid]
            waiter.parked = None
            self._mark(waiter)

    def _mark(self, waiter: _Waiter) -> None:
        if waiter.waiter_id not in self._dirty_ids:
            self._dirty_ids.add(waiter.waiter_id)
            heapq.heappush(self._dirty, (-waiter.rank, waiter.seq, waiter.waiter_id))

    def _mark_relatives(self, session_id: str) -> None:
        """A new claim of ``session_id`` may cover a key a related session waits for:
        the waiters ahead of it there no longer count (see :meth:`_blockers`)."""
        if not self._waiters_of:
            return
        for sid in (session_id, *self.ancestors(session_id), *self._below.get(session_id, {})):
            for wid in self._waiters_of.get(sid, {}):
                waiter = self._waiters[wid]
                if waiter.parked is not None and waiter.parked[0] == "w":
                    self._mark(waiter)

    def _settle(self, now_mono: float, now_wall: float) -> None:
        """Look again at every marked waiter, first served first: grant it, or park it
        on what blocks it now. A grant marks those it frees (and a release does)."""
        while self._dirty:
            wid = heapq.heappop(self._dirty)[2]
            self._dirty_ids.discard(wid)
            waiter = self._waiters.get(wid)
            if waiter is None:
                continue
            blocker = self._first_blocker(waiter.request, waiter.order)
            if blocker is not None:
                self._park(waiter, blocker)
                continue
            self._unqueue(waiter)
            granted = self._grant(waiter.request, now_mono, now_wall, how="wait", waiter_id=wid)
            resources = tuple(c.resource for c in granted.claims)
            self.outbox.notices.append(
                Notice(
                    "granted", waiter.session_id, resources, granted.token, now_wall,
                    reason=waiter.request.reason, waiter_id=wid, granted=granted,
                )
            )  # fmt: skip

    def _first_blocker(self, req: _Request, order: Order) -> Ref | None:
        """One thing that keeps ``req`` (served at ``order``) from being granted now:
        the nearest waiter ahead of it that it may not pass (parking on the nearest
        keeps a wake O(1): a grant frees only the next in line), else a conflicting
        claim, else None."""
        nearest = self._nearest_ahead(req, order) if self._waiters else None
        if nearest is not None:
            return ("w", nearest.waiter_id)
        exclusive = req.mode == "exclusive"
        for key in req.keys:
            for claim in self._trie.claims_over(key, exclusive=not exclusive):
                if not self.related(req.session_id, claim.session_id):
                    return ("c", claim.session_id, claim.resource)
        return None

    def _nearest_ahead(self, req: _Request, order: Order) -> _Waiter | None:
        """The nearest waiter ahead of ``order`` that ``req`` may not pass, by a binary
        search per overlapping node; waiters on a covered key do not count."""
        sid = req.session_id
        mine = frozenset(k.text for k in req.keys)
        nearest: _Waiter | None = None
        for key in req.keys:
            found: _Waiter | None = None  # a stranger's, unless the key is covered
            for node in self._trie.overlap(key, waiters=True):
                floor = max((w.order for w in (nearest, found) if w is not None), default=None)
                other = self._scan_back(node, req, order, mine, floor)
                if other is None:
                    continue
                if other.session_id == sid:
                    nearest = other
                else:
                    found = other
            if (
                found is not None
                and (nearest is None or found.order > nearest.order)
                and not self._covered(sid, key, req.mode)
            ):
                nearest = found
        return nearest

    def _scan_back(
        self, node: Node[_Waiter], req: _Request, order: Order, mine: frozenset[str],
        floor: Order | None,
    ) -> _Waiter | None:  # fmt: skip
        """The nearest waiter in ``node`` served before ``order`` (and after ``floor``)
        that ``req`` may not pass -- or an earlier wait of the same session for no
        more than ``mine``, in no stronger a mode, which stands in for whatever
        blocks that one: it cannot go while that one waits (so a session's 500
        waits on one key queue in line instead of each walking past the others)."""
        sid, exclusive = req.session_id, req.mode == "exclusive"
        queue = node.queue if exclusive else node.xqueue
        if not queue or node.only(lambda other: self.related(sid, other)):
            return None
        i = before(queue, order)
        while i > 0:
            i -= 1
            other = node.waiter(queue[i])
            if floor is not None and other.order <= floor:
                return None
            if other.session_id == sid:
                if (exclusive or other.mode == "shared") and {
                    k.text for k in other.request.keys
                } <= mine:
                    return other
            elif not self.related(sid, other.session_id):
                return other
        return None

    def _covered(self, session_id: str, key: Key, mode: Mode) -> bool:
        """Whether ``session_id`` or a related session holds ``key`` or a path above it
        at least as strongly as ``mode``: waiters there take nothing from it."""
        for node in self._trie.path(key):
            claims = node.xclaims if mode == "exclusive" else node.claims
            for claim in claims.values():
                if _above(claim.key, key) and self.related(session_id, claim.session_id):
                    return True
        return False

    def _blockers(
        self, req: _Request, order: Order | None, limit: int | None
    ) -> tuple[list[Claim], list[_Waiter], bool]:
        """Every conflicting claim, and up to ``limit`` waiters ahead of ``order`` it
        may not pass, first served first (``order`` None: none), and whether there
        were more than ``limit``.

        Waiters are not counted on a key the session (or a related one) already
        covers at least as strongly: it takes nothing from them there.
        """
        holders: dict[tuple[str, str], Claim] = {}
        ahead: dict[str, _Waiter] = {}
        sid, exclusive = req.session_id, req.mode == "exclusive"

        def related(other: str) -> bool:
            return self.related(sid, other)

        for key in req.keys:
            for claim in self._trie.claims_over(key, exclusive=not exclusive):
                if not related(claim.session_id):
                    holders[(claim.session_id, claim.resource)] = claim
            if order is None or limit == 0 or not self._waiters:
                continue
            here: list[_Waiter] = []
            for node in self._trie.overlap(key, waiters=True):
                queue = node.queue if exclusive else node.xqueue
                if not queue or node.only(related):
                    continue
                found = 0
                for i in range(before(queue, order)):
                    other = node.waiter(queue[i])
                    if not related(other.session_id):
                        here.append(other)
                        found += 1
                        if limit is not None and found > limit:
                            break
            if here and not self._covered(sid, key, req.mode):
                ahead.update((w.waiter_id, w) for w in here)
        first = sorted(ahead.values(), key=lambda w: w.order)
        more = limit is not None and len(first) > limit
        return list(holders.values()), first[:limit], more

    def _held(self, req: _Request, order: Order) -> Held:
        """The ``held`` answer: every conflicting claim, the first waiters ahead."""
        holders, ahead, more = self._blockers(req, order, MAX_AHEAD)
        return Held(tuple(holders), tuple(w.view() for w in ahead), more_ahead=more)

    def _blocks_anyone(self, session_id: str) -> bool:
        """Whether any waiter could be waiting on ``session_id``: it waits itself, or a
        waiter overlaps one of its claims. If not, no wait of it can close a cycle."""
        if session_id in self._waiters_of:
            return True
        for claim in self._by_session.get(session_id, {}).values():
            if any(node.waiters for node in self._trie.overlap(claim.key, waiters=True)):
                return True
        return False

    def _reaches(self, start: set[str], target: str) -> bool:
        """Whether waiting on ``start`` would close a cycle back to ``target``."""
        seen: set[str] = set()
        stack = list(start)
        while stack:
            sid = stack.pop()
            if sid == target:
                return True
            if sid in seen:
                continue
            seen.add(sid)
            for wid in self._waiters_of.get(sid, {}):
                waiter = self._waiters[wid]
                holders, ahead, _ = self._blockers(waiter.request, waiter.order, None)
                stack.extend(c.session_id for c in holders)
                stack.extend(w.session_id for w in ahead)
        return False


def _unique(keys: Iterable[Key]) -> tuple[Key, ...]:
    """The set's keys in the caller's order, duplicates dropped."""
    seen: dict[str, Key] = {}
    for key in keys:
        seen.setdefault(key.text, key)
    if not seen:
        raise ValueError("a claim needs at least one key")
    return tuple(seen.values())
