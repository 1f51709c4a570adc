"""Who keeps a request from being granted: the lock table's conflict search.

Split from :mod:`meshd.core.claims.table` (the table) by object. :class:`Conflicts`
reads the shared :class:`~meshd.core.claims.path_trie.PathTrie` (claims and waiters by
key) and the :class:`~meshd.core.claims.queue.WaitQueue` and changes neither: it
answers "what blocks this request" (to park a waiter on), "who holds and who is
ahead" (the ``held`` answer), and "would this wait close a cycle" (deadlock).

A request never passes a waiter of the same or a higher rank it conflicts with,
except on a key that it (or a related session) already covers at least as
strongly -- it takes nothing from that waiter there, and making it queue would
only deadlock it behind its own claim. Deadlock detection walks the wait-for
graph only when the asking session blocks someone at all (it waits already, or
a waiter overlaps one of its claims).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from meshd.core.claims.path_trie import Node, Order, PathTrie, before
from meshd.core.claims.records import MAX_AHEAD, Claim, Held
from meshd.protocol.claims import Mode

if TYPE_CHECKING:
    from meshd.core.claims.queue import Ref, Request, Waiter, WaitQueue
    from meshd.keys import Key


def _above(held: Key, wanted: Key) -> bool:
    """``held`` is ``wanted`` or (path kinds) one of its ancestors."""
    if held.is_path and wanted.is_path:
        return held.parts == wanted.parts[: len(held.parts)]
    return held.text == wanted.text


class Conflicts:
    """The read-only search over claims and waiters for one table."""

    def __init__(
        self,
        trie: PathTrie[Waiter],
        queue: WaitQueue,
        by_session: dict[str, dict[str, Claim]],
        related: Callable[[str, str], bool],
    ) -> None:
        self._trie = trie
        self._queue = queue
        self._waiters = queue.waiters
        self._by_session = by_session
        self.related = related

    def overlapping(self, keys: Iterable[Key], session_id: str | None) -> tuple[Claim, ...]:
        """Claims overlapping ``keys`` held by sessions unrelated to ``session_id`` (any
        session's if None), oldest grant first: what ``claim.check`` answers."""
        found: dict[tuple[str, str], Claim] = {}
        for key in keys:
            for claim in self._trie.claims_over(key):
                if session_id is None or not self.related(session_id, claim.session_id):
                    found[(claim.session_id, claim.resource)] = claim
        return tuple(sorted(found.values(), key=lambda c: (c.since, c.token, c.resource)))

    def first_blocker(self, req: Request, order: Order) -> Ref | None:
        """One thing that keeps ``req`` (served at ``order``) from being granted now:
        the nearest waiter ahead of it that it may not pass (parking on the nearest
        keeps a wake O(1): a grant frees only the next in line), else a conflicting
        claim, else None."""
        nearest = self.nearest_ahead(req, order) if self._waiters else None
        if nearest is not None:
            return ("w", nearest.waiter_id)
        exclusive = req.mode == "exclusive"
        for key in req.keys:
            for claim in self._trie.claims_over(key, exclusive=not exclusive):
                if not self.related(req.session_id, claim.session_id):
                    return ("c", claim.session_id, claim.resource)
        return None

    def nearest_ahead(self, req: Request, order: Order) -> Waiter | None:
        """The nearest waiter ahead of ``order`` that ``req`` may not pass, by a binary
        search per overlapping node; waiters on a covered key do not count."""
        sid, exclusive = req.session_id, req.mode == "exclusive"
        mine = frozenset(k.text for k in req.keys)
        nearest: Waiter | None = None
        for key in req.keys:
            found: Waiter | None = None  # a stranger's, unless the key is covered
            for node in self._trie.overlap(key, waiters=True):
                if not (node.queue if exclusive else node.xqueue):
                    continue  # the folders above a key: nobody waits on them (_scan_back)
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
                and not self.covered(sid, key, req.mode)
            ):
                nearest = found
        return nearest

    def _scan_back(
        self, node: Node[Waiter], req: Request, order: Order, mine: frozenset[str],
        floor: Order | None,
    ) -> Waiter | None:  # fmt: skip
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

    def covered(self, session_id: str, key: Key, mode: Mode) -> bool:
        """Whether ``session_id`` or a related session holds ``key`` or a path above it
        at least as strongly as ``mode``: waiters there take nothing from it."""
        for node in self._trie.path(key):
            claims = node.xclaims if mode == "exclusive" else node.claims
            for claim in claims.values():
                if _above(claim.key, key) and self.related(session_id, claim.session_id):
                    return True
        return False

    def blockers(
        self, req: Request, order: Order | None, limit: int | None
    ) -> tuple[list[Claim], list[Waiter], bool]:
        """Every conflicting claim, and up to ``limit`` waiters ahead of ``order`` it
        may not pass, first served first (``order`` None: none), and whether there
        were more than ``limit``.

        Waiters are not counted on a key the session (or a related one) already
        covers at least as strongly: it takes nothing from them there.
        """
        holders: dict[tuple[str, str], Claim] = {}
        ahead: dict[str, Waiter] = {}
        sid, exclusive = req.session_id, req.mode == "exclusive"

        def related(other: str) -> bool:
            return self.related(sid, other)

        for key in req.keys:
            for claim in self._trie.claims_over(key, exclusive=not exclusive):
                if not related(claim.session_id):
                    holders[(claim.session_id, claim.resource)] = claim
            if order is None or limit == 0 or not self._waiters:
                continue
            here: list[Waiter] = []
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
            if here and not self.covered(sid, key, req.mode):
                ahead.update((w.waiter_id, w) for w in here)
        first = sorted(ahead.values(), key=lambda w: w.order)
        more = limit is not None and len(first) > limit
        return list(holders.values()), first[:limit], more

    def held(self, req: Request, order: Order) -> Held:
        """The ``held`` answer: every conflicting claim, the first waiters ahead."""
        holders, ahead, more = self.blockers(req, order, MAX_AHEAD)
        return Held(tuple(holders), tuple(w.view() for w in ahead), more_ahead=more)

    def blocks_anyone(self, session_id: str) -> bool:
        """Whether any waiter could be waiting on ``session_id``: it waits itself, or a
        waiter overlaps one of its claims. If not, no wait of it can close a cycle."""
        if session_id in self._queue.of:
            return True
        for claim in self._by_session.get(session_id, {}).values():
            if any(node.waiters for node in self._trie.overlap(claim.key, waiters=True)):
                return True
        return False

    def reaches(self, start: set[str], target: str) -> bool:
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
            for wid in self._queue.of.get(sid, {}):
                waiter = self._waiters[wid]
                holders, ahead, _ = self.blockers(waiter.request, waiter.order, None)
                stack.extend(c.session_id for c in holders)
                stack.extend(w.session_id for w in ahead)
        return False
