"""The lock table's live claims: by session, by resource, in the trie, by ttl deadline
(and the last unclean end of each key, for its next holder).

Split from :mod:`meshd.core.claims.table` (the table) by object: :class:`Holdings` keeps
the four indexes of the claims held now consistent, and answers what is held; the
table decides what to grant and what to drop. Whoever takes a claim out also tells
the queue that waiters parked on it may go (:meth:`WaitQueue.release_ref`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import TYPE_CHECKING, Generic, TypeVar

from meshd.core.claims.path_trie import PathTrie
from meshd.core.claims.records import CLEAN_ENDS, MAX_PREVIOUS, RESERVED, Previous

if TYPE_CHECKING:
    from meshd.core.claims.records import Claim
    from meshd.keys import Key
    from meshd.protocol.claims import Mode

W = TypeVar("W")
Deadline = tuple[float, int, str, str]  # (deadline, token, session, resource)


class Holdings(Generic[W]):
    """Every claim held now, indexed four ways (the trie's waiters are the queue's)."""

    def __init__(self, trie: PathTrie[W]) -> None:
        self.trie = trie
        self.by_session: dict[str, dict[str, Claim]] = {}
        self.by_resource: dict[str, dict[str, Claim]] = {}
        self.heap: list[Deadline] = []  # ttl deadlines, lazily deleted
        self.previous: dict[str, Previous] = {}  # resource -> its last unclean end

    def put(self, claim: Claim) -> None:
        self.by_session.setdefault(claim.session_id, {})[claim.resource] = claim
        self.by_resource.setdefault(claim.resource, {})[claim.session_id] = claim
        self.trie.add_claim(claim)
        if claim.deadline is not None:
            entry = (claim.deadline, claim.token, claim.session_id, claim.resource)
            heapq.heappush(self.heap, entry)

    def unput(self, claim: Claim) -> None:
        mine = self.by_session[claim.session_id]
        del mine[claim.resource]
        if not mine:
            del self.by_session[claim.session_id]
        holders = self.by_resource[claim.resource]
        del holders[claim.session_id]
        if not holders:
            del self.by_resource[claim.resource]
        self.trie.remove_claim(claim)

    def ended(self, claim: Claim, how: str, at: float) -> None:
        """``claim`` was dropped ``how``: an unclean end is remembered for the key's
        next grantee (``previous``), a clean one forgets an older unclean one."""
        self.previous.pop(claim.resource, None)
        if how in CLEAN_ENDS:
            return
        # a reserved set's holder is named as its paused session, never as ``reserved:ID``
        who = claim.session_id.removeprefix(RESERVED)
        self.previous[claim.resource] = Previous(claim.resource, who, how, at)
        if len(self.previous) > MAX_PREVIOUS:
            del self.previous[next(iter(self.previous))]

    def listing(self, session_id: str | None = None) -> tuple[Claim, ...]:
        """Every live claim, or one session's, oldest grant first."""
        if session_id is not None:
            mine = self.by_session.get(session_id)
            if not mine:  # most sessions, in every listing: nothing to sort
                return ()
            claims: Iterable[Claim] = mine.values()
        else:
            claims = (c for mine in self.by_session.values() for c in mine.values())
        return tuple(sorted(claims, key=lambda c: (c.token, c.resource)))

    def of(self, session_id: str, resources: Iterable[str]) -> tuple[Claim, ...]:
        """``session_id``'s claims on exactly ``resources``, ordered as :meth:`listing`
        orders them: looked up, not picked out of all the session holds."""
        mine = self.by_session.get(session_id)
        if not mine:
            return ()
        found = [mine[r] for r in set(resources) if r in mine]
        found.sort(key=lambda c: (c.token, c.resource))
        return tuple(found)

    def holds_all(self, session_id: str, keys: Iterable[Key], mode: Mode) -> bool:
        """Whether ``session_id`` holds every one of ``keys`` in ``mode`` already."""
        mine = self.by_session.get(session_id, {})
        return all(k.text in mine and mine[k.text].mode == mode for k in keys)

    def valid(self, key: Key, token: int, now_mono: float) -> bool:
        """Whether ``token`` still holds ``key``: a claim whose ttl ran out by
        ``now_mono`` is invalid even before the sweep drops it."""
        for claim in self.by_resource.get(key.text, {}).values():
            if claim.token == token:
                return claim.deadline is None or now_mono < claim.deadline
        return False

    def next_deadline(self) -> float | None:
        """The earliest ttl deadline (monotonic), for the sweeper's sleep; may be early."""
        while self.heap and not self._live(self.heap[0]):
            heapq.heappop(self.heap)
        return self.heap[0][0] if self.heap else None

    def due(self, now_mono: float) -> list[Claim]:
        """The claims whose ttl ran out by ``now_mono`` (still held: the caller drops them)."""
        if not self.heap or self.heap[0][0] > now_mono:
            return []
        gone: dict[tuple[str, str], Claim] = {}  # a refresh may have pushed it twice
        while self.heap and self.heap[0][0] <= now_mono:
            entry = heapq.heappop(self.heap)
            if self._live(entry):
                gone[(entry[2], entry[3])] = self.by_session[entry[2]][entry[3]]
        return list(gone.values())

    def _live(self, entry: Deadline) -> bool:
        claim = self.by_session.get(entry[2], {}).get(entry[3])
        return claim is not None and claim.deadline == entry[0] and claim.token == entry[1]
