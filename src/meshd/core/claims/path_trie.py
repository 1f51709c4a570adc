"""Where claims and waiters live: one path trie for ``file:``/``repo:``, a dict for the rest.

A node holds the claims and waiters on exactly its path plus counts of those in
its subtree, so "what overlaps P" walks P's ancestors and then only the
non-empty part of P's subtree: O(depth + overlaps), never O(number of claims).
Every other kind is an exact-match slot of its own.

A node's waiters are also kept in serving order -- ``(-rank, seq)``, a sorted
list searched with :mod:`bisect` -- so "the nearest earlier waiter here" is a
binary search and a short walk back, not a scan of the queue.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from meshd.core.claims.records import Claim
    from meshd.keys import Key

W = TypeVar("W")
Order = tuple[int, int]  # (-rank, seq): smaller is served first
Entry = tuple[int, int, str]  # (-rank, seq, key text): one waiter's place in one node


class Node(Generic[W]):
    """A path in the trie (or an exact key): its own entries and subtree counts.

    Exclusive claims and waiters are also indexed on their own: a shared request
    conflicts only with those, so a crowd of readers costs it nothing.
    """

    __slots__ = (
        "children", "claims", "n_claims", "n_waiters", "name", "parent", "queue", "sessions",
        "waiters", "xclaims", "xqueue",
    )  # fmt: skip

    def __init__(self, name: str, parent: Node[W] | None) -> None:
        self.name = name
        self.parent = parent
        self.children: dict[str, Node[W]] = {}
        self.claims: dict[tuple[str, str], Claim] = {}
        self.xclaims: dict[tuple[str, str], Claim] = {}  # the exclusive ones
        self.waiters: dict[tuple[int, str], W] = {}  # (seq, key text) -> waiter
        self.queue: list[Entry] = []  # serving order
        self.xqueue: list[Entry] = []  # the exclusive ones, in serving order
        self.sessions: dict[str, int] = {}  # waiting session -> its entries here
        self.n_claims = 0
        self.n_waiters = 0

    def waiter(self, entry: Entry) -> W:
        return self.waiters[(entry[1], entry[2])]

    def only(self, related: Callable[[str], bool]) -> bool:
        """Whether every waiter here is of a few sessions all ``related``: a session
        waiting 500 times on one key is then passed over in O(1), not O(500)."""
        return len(self.sessions) <= 4 and all(related(s) for s in self.sessions)


def before(queue: list[Entry], order: Order) -> int:
    """How many entries of ``queue`` are served before ``order``."""
    return bisect_left(queue, (order[0], order[1], ""))


class PathTrie(Generic[W]):
    """The index of live claims and queued waiters by key."""

    def __init__(self) -> None:
        self.root: Node[W] = Node("", None)
        self.exact: dict[str, Node[W]] = {}
        self.nodes = 1

    @property
    def claims(self) -> int:
        return self.root.n_claims + sum(n.n_claims for n in self.exact.values())

    # --- claims and waiters in and out -----------------------------------------

    def add_claim(self, claim: Claim) -> None:
        node = self.node(claim.key)
        node.claims[(claim.session_id, claim.resource)] = claim
        if claim.mode == "exclusive":
            node.xclaims[(claim.session_id, claim.resource)] = claim
        self._count(node, 1, 0)

    def remove_claim(self, claim: Claim) -> None:
        node = self.node(claim.key)
        del node.claims[(claim.session_id, claim.resource)]
        node.xclaims.pop((claim.session_id, claim.resource), None)
        self._count(node, -1, 0)

    def add_waiter(self, key: Key, order: Order, session_id: str, exclusive: bool, w: W) -> None:
        node = self.node(key)
        node.waiters[(order[1], key.text)] = w
        entry = (order[0], order[1], key.text)
        insort(node.queue, entry)
        if exclusive:
            insort(node.xqueue, entry)
        node.sessions[session_id] = node.sessions.get(session_id, 0) + 1
        self._count(node, 0, 1)

    def remove_waiter(self, key: Key, order: Order, session_id: str, exclusive: bool) -> None:
        node = self.node(key)
        del node.waiters[(order[1], key.text)]
        entry = (order[0], order[1], key.text)
        _remove(node.queue, entry)
        if exclusive:
            _remove(node.xqueue, entry)
        left = node.sessions[session_id] - 1
        if left:
            node.sessions[session_id] = left
        else:
            del node.sessions[session_id]
        self._count(node, 0, -1)

    def move_waiter(self, key: Key, old: Order, new: Order, exclusive: bool) -> None:
        """A rank changed: the waiter's place in its node's serving order moves."""
        node = self.node(key)
        for queue in (node.queue, node.xqueue) if exclusive else (node.queue,):
            _remove(queue, (old[0], old[1], key.text))
            insort(queue, (new[0], new[1], key.text))

    # --- lookups ---------------------------------------------------------------

    def claims_over(self, key: Key, *, exclusive: bool = False) -> Iterator[Claim]:
        """Claims on ``key``, on its ancestors and in its subtree (only exclusive ones)."""
        for node in self.overlap(key, waiters=False):
            yield from (node.xclaims if exclusive else node.claims).values()

    def path(self, key: Key) -> Iterator[Node[W]]:
        """The existing nodes of ``key`` and its ancestors: where claims above it live."""
        if not key.is_path:
            exact = self.exact.get(key.text)
            if exact is not None:
                yield exact
            return
        node = self.root
        yield node
        for part in key.parts:
            child = node.children.get(part)
            if child is None:
                return
            node = child
            yield node

    def overlap(self, key: Key, *, waiters: bool) -> Iterator[Node[W]]:
        """``key``'s ancestors, then the non-empty part of its subtree: O(depth + hits)."""
        if not key.is_path:
            exact = self.exact.get(key.text)
            if exact is not None:
                yield exact
            return
        node = self.root
        for part in key.parts:
            yield node
            child = node.children.get(part)
            if child is None:
                return
            node = child
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(
                c for c in current.children.values() if (c.n_waiters if waiters else c.n_claims)
            )

    def node(self, key: Key) -> Node[W]:
        """The node for ``key``, created (with its path) if missing."""
        if not key.is_path:
            exact = self.exact.get(key.text)
            if exact is None:
                exact = self.exact[key.text] = Node(key.text, None)
            return exact
        node = self.root
        for part in key.parts:
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = Node(part, node)
                self.nodes += 1
            node = child
        return node

    def _count(self, node: Node[W], claims: int, waiters: int) -> None:
        """Adjust subtree counts from ``node`` up, pruning nodes left empty."""
        current: Node[W] | None = node
        while current is not None:
            current.n_claims += claims
            current.n_waiters += waiters
            parent = current.parent
            if current.n_claims == 0 and current.n_waiters == 0:
                if parent is not None:
                    del parent.children[current.name]
                    self.nodes -= 1
                elif current is not self.root:
                    del self.exact[current.name]
            current = parent


def _remove(queue: list[Entry], entry: Entry) -> None:
    i = bisect_left(queue, entry)
    assert queue[i] == entry
    del queue[i]
