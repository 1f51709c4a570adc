"""Where the reply of a request that did not answer in line goes.

A batch frame is answered as one array once its last element is done (SPEC §3:
batches are not atomic): :class:`Batch` collects the elements' replies in order.
A request that waits as a record (a :class:`~meshd.protocol.jsonrpc.Later`, e.g. a
queued ``claim.acquire``) is answered by an :class:`Answer` once settled, into its
connection or into its batch. The frame loop that starts them is the server's
(:mod:`meshd.server`).
"""

from __future__ import annotations

from msgspec import Raw

from meshd.connection import Connection
from meshd.protocol.framing import DELIMITER
from meshd.protocol.jsonrpc import Call, Later, reply


class Batch:
    """A batch frame being served: its elements, the next to start, how many of those
    started are not done, and their replies in element order."""

    __slots__ = ("items", "next", "open", "replies")

    def __init__(self, items: list[Raw]) -> None:
        self.items = items
        self.next = 0
        self.open = 0
        self.replies: list[bytes | None] = [None] * len(items)

    def done(self, c: Connection) -> None:
        """Write the batch's reply to ``c`` if every element is started and done."""
        if self.open or self.next < len(self.items):
            return
        replies = [r for r in self.replies if r is not None]
        if replies:
            c.write(b"[" + b",".join(replies) + b"]" + DELIMITER, 0)


class Answer:
    """What a :class:`Later` of a connection does once settled: its reply written (or
    its batch's, once the last element is done), its slot freed. It keeps the request's
    method and id, not the :class:`Call` (whose decoded params a waiting request has
    no more use for: fewer objects for the collector to track per waiter)."""

    __slots__ = ("b", "c", "i", "method", "notify", "rid")

    def __init__(self, c: Connection, call: Call, b: Batch | None, i: int) -> None:
        self.c = c
        self.method, self.rid, self.notify = call.method, call.rid, call.notify
        self.b = b
        self.i = i

    def __call__(self, later: Later) -> None:
        c, b = self.c, self.b
        c.later.discard(later)
        c.inflight.release()
        frame = reply(later, self.method, self.rid, self.notify)
        if b is None:
            if frame is not None:
                c.write(frame + DELIMITER, 0)
            return
        b.replies[self.i] = frame
        b.open -= 1
        b.done(c)
