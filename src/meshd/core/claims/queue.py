"""The lock table's queue: waiters, what each is parked on, and who to look at again.

Split from :mod:`meshd.core.claims.table` (the table) by object: this module owns the
line of waiting requests and nothing else; the table decides who is granted.

How the queue stays cheap with 10,000 waiters on one key: each waiter is
*parked* on one thing that blocks it -- the nearest earlier waiter it conflicts
with, else a conflicting claim (a :data:`Ref`) -- found once, by a binary search
in each overlapping node's serving order (:mod:`meshd.core.claims.conflicts`). It
is looked at again (*marked*) only when that thing goes (the waiter is granted or
withdrawn, the claim released), when its rank or its blocker's rank changes, or
when a related session's new claim may now cover its key. So a release looks at
the one waiter parked on it, not at the whole queue.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from meshd.core.claims.path_trie import Order, PathTrie
from meshd.core.claims.records import Waiting
from meshd.protocol.claims import Mode

if TYPE_CHECKING:
    from meshd.keys import Key

# What a waiter is parked on: ("w", waiter_id) or ("c", session_id, resource).
Ref = tuple[str, ...]


class Request(msgspec.Struct, frozen=True, gc=False):
    """What one acquire asks for.

    ``gc=False`` (plain values and keys, never part of a cycle): 10,000 queued requests
    are 10,000 objects fewer for the cyclic collector to walk."""

    session_id: str
    keys: tuple[Key, ...]
    mode: Mode
    reason: str = ""
    ttl: float | None = None


class Waiter(msgspec.Struct, gc=False, eq=False):
    """A queued request: its place in line and what it is parked on.

    ``gc=False``: it holds only strings, numbers, its (untracked) :class:`Request` and
    a :data:`Ref` of strings, and nothing it holds leads back to it, so it can never
    be part of a reference cycle; its reference count frees it. 10,000 queued in a
    storm are 10,000 objects fewer for the collector to walk (and to count towards
    its next collection)."""

    waiter_id: str
    seq: int
    rank: int
    request: Request
    since: float
    parked: Ref | None = None
    leaving: bool = False
    """Its caller left: withdrawn when it comes up, never granted (:meth:`WaitQueue.leave`)."""

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


class WaitQueue:
    """Every waiter by id and by session, the waiters parked on each blocker, and
    the marked ones (to look at again, first served first).

    The waiters themselves sit in the shared :class:`PathTrie` (by key, in serving
    order), which the table's claims share.
    """

    def __init__(self, trie: PathTrie[Waiter], ancestors: Callable[[str], tuple[str, ...]]):
        self.trie = trie
        self.ancestors = ancestors
        self.waiters: dict[str, Waiter] = {}
        self.of: dict[str, dict[str, None]] = {}  # session -> its waiter ids, in arrival
        self.below: dict[str, dict[str, None]] = {}  # session -> its waiting descendants
        self.seq = 0
        self._lineage: dict[str, tuple[str, ...]] = {}  # waiting session -> its ancestors
        self._parked: dict[Ref, dict[str, None]] = {}  # blocker -> waiters parked on it
        self._dirty: list[tuple[int, int, str]] = []  # marked waiters, first served first
        self._dirty_ids: set[str] = set()
        self._key_sets: dict[str | tuple[str, ...], tuple[Key, ...]] = {}
        """Each waiting key set, by its keys' texts: the one tuple of keys its waiters
        share (:meth:`_share`); :attr:`_key_users` counts them."""
        self._key_users: dict[str | tuple[str, ...], int] = {}
        self.departed: Callable[[str], bool] = _nobody
        """Whether a waiter's caller left although it is not marked ``leaving`` (the
        shell's: its connection's hang-up was read, its waits are withdrawn by turns):
        O(1) per hang-up instead of a mark per wait (:meth:`ClaimTable.departures`)."""

    def next_order(self, rank: int) -> Order:
        """Where a request of ``rank`` would stand: behind every waiter of its rank."""
        return (-rank, self.seq + 1)

    def enqueue(self, req: Request, order: Order, since: float, waiter_id: str | None) -> Waiter:
        self.seq += 1
        assert order[1] == self.seq
        wid = waiter_id if waiter_id is not None else f"w{self.seq}"
        if wid in self.waiters:
            raise ValueError(f"waiter id {wid!r} is already waiting")
        keys = self._share(req.keys)
        if keys is not req.keys:
            req = msgspec.structs.replace(req, keys=keys)
        waiter = Waiter(wid, self.seq, -order[0], req, since)
        self.waiters[wid] = waiter
        sid = req.session_id
        mine = self.of.get(sid)
        if mine is None:
            mine = self.of[sid] = {}
            lineage = self._lineage[sid] = self.ancestors(sid)
            for ancestor in lineage:
                self.below.setdefault(ancestor, {})[sid] = None
        mine[wid] = None
        for key in req.keys:
            self.trie.add_waiter(key, order, sid, req.mode == "exclusive", waiter)
        return waiter

    def unqueue(self, waiter: Waiter) -> None:
        """Take a waiter out of line; those parked on it are looked at again."""
        wid, sid = waiter.waiter_id, waiter.session_id
        del self.waiters[wid]
        mine = self.of[sid]
        del mine[wid]
        if not mine:
            del self.of[sid]
            for ancestor in self._lineage.pop(sid):
                below = self.below[ancestor]
                del below[sid]
                if not below:
                    del self.below[ancestor]
        for key in waiter.request.keys:
            self.trie.remove_waiter(key, waiter.order, sid, waiter.mode == "exclusive")
        self._unshare(waiter.request.keys)
        self.park(waiter, None)
        self.release_ref(("w", wid))

    def _share(self, keys: tuple[Key, ...]) -> tuple[Key, ...]:
        """The tuple of keys that waiters on the same set as ``keys`` share (``keys``
        itself for the first of them). Each request's keys are new objects (made
        canonical from what its caller typed), and a queue forms on one key: 10,000
        waiters held 10,000 equal keys and tuples of them, each tracked by the cyclic
        collector while it waited; now they hold one. Keys are immutable, so sharing
        them changes nothing else."""
        ident = keys[0].text if len(keys) == 1 else tuple(k.text for k in keys)
        users = self._key_users
        shared = self._key_sets.setdefault(ident, keys)
        users[ident] = users.get(ident, 0) + 1
        return shared

    def _unshare(self, keys: tuple[Key, ...]) -> None:
        """A waiter on ``keys`` left the line: the set is forgotten with its last one."""
        ident = keys[0].text if len(keys) == 1 else tuple(k.text for k in keys)
        users = self._key_users
        left = users[ident] - 1
        if left:
            users[ident] = left
        else:
            del users[ident], self._key_sets[ident]

    def leave(self, waiter_id: str) -> None:
        """Its caller left (its connection closed) and the wait is withdrawn shortly:
        the table withdraws it instead of granting it meanwhile (SPEC §5: a waiter is
        cancelled when its connection closes), whatever lets it go first -- a release,
        or the withdrawal of an earlier wait of the same connection."""
        waiter = self.waiters.get(waiter_id)
        if waiter is not None:
            waiter.leaving = True

    def rerank(self, waiter: Waiter, rank: int) -> None:
        """Move ``waiter`` in line to ``rank``; it and those parked on it are marked."""
        old = waiter.order
        waiter.rank = rank
        for key in waiter.request.keys:
            self.trie.move_waiter(key, old, waiter.order, waiter.mode == "exclusive")
        self.mark(waiter)
        self.release_ref(("w", waiter.waiter_id))

    def park(self, waiter: Waiter, ref: Ref | None) -> None:
        """Note what blocks ``waiter`` now (None: nothing, it is leaving or dirty)."""
        if waiter.parked is not None:
            parked = self._parked[waiter.parked]
            del parked[waiter.waiter_id]
            if not parked:
                del self._parked[waiter.parked]
        waiter.parked = ref
        if ref is not None:
            self._parked.setdefault(ref, {})[waiter.waiter_id] = None

    def release_ref(self, ref: Ref) -> None:
        """``ref`` no longer blocks: every waiter parked on it is looked at again."""
        parked = self._parked.pop(ref, None)
        if parked is None:
            return
        for wid in parked:
            waiter = self.waiters[wid]
            waiter.parked = None
            self.mark(waiter)

    def mark(self, waiter: Waiter) -> None:
        if waiter.waiter_id not in self._dirty_ids:
            self._dirty_ids.add(waiter.waiter_id)
            heapq.heappush(self._dirty, (-waiter.rank, waiter.seq, waiter.waiter_id))

    def mark_session(self, session_id: str) -> None:
        """Look again at every wait of ``session_id``."""
        for wid in self.of.get(session_id, {}):
            self.mark(self.waiters[wid])

    def mark_relatives(self, session_id: str) -> None:
        """A new claim of ``session_id`` may cover a key a related session waits for:
        the waiters ahead of it there no longer count (see ``Conflicts.blockers``)."""
        if not self.of:
            return
        for sid in (session_id, *self.ancestors(session_id), *self.below.get(session_id, {})):
            for wid in self.of.get(sid, {}):
                waiter = self.waiters[wid]
                if waiter.parked is not None and waiter.parked[0] == "w":
                    self.mark(waiter)

    def next_marked(self) -> Waiter | None:
        """The first served marked waiter still in line (unmarked now), or None.

        A waiter whose caller left (``leaving``, or :attr:`departed`) is passed over:
        never granted, and withdrawn within a few turns by its connection; left unparked
        until then. Withdrawing it when it came up marked the next waiter, as often
        leaving too -- 100 clients hanging up with 10,000 waits cascaded through the
        whole line in one pass -- and parking it again cost a search per withdrawal for
        a waiter about to go."""
        departed = self.departed
        while self._dirty:
            wid = heapq.heappop(self._dirty)[2]
            self._dirty_ids.discard(wid)
            waiter = self.waiters.get(wid)
            if waiter is not None and not waiter.leaving and not departed(wid):
                return waiter
        return None


def _nobody(waiter_id: str) -> bool:
    return False
