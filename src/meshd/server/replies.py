"""Where the reply of a request that did not answer in line goes.

A batch frame is answered as one array once its last element is done (SPEC §3:
batches are not atomic): :class:`Batch` collects the elements' replies in order.
A request that waits as a record (a :class:`~meshd.protocol.jsonrpc.Later`, e.g. a
queued ``claim.acquire``) is answered by an :class:`Answer` once settled, into its
connection or into its batch. The frame loop that starts them is the server's
(:mod:`meshd.server.serve`).
"""

from __future__ import annotations

from msgspec import Raw

from meshd.protocol.framing import DELIMITER
from meshd.protocol.jsonrpc import Later, reply
from meshd.server.connection import Connection


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
    its batch's, once the last element is done), its slot freed. The request it
    answers (method, id) is on the :class:`Later` itself (the server sets them), so a
    connection's requests that wait on their own share one ``Answer``
    (:attr:`Connection.answer`), and only a batch element gets its own (``b``, ``i``):
    a queued request costs no object for the collector beyond its record."""

    __slots__ = ("b", "c", "i")

    def __init__(self, c: Connection, b: Batch | None = None, i: int = 0) -> None:
        self.c = c
        self.b = b
        self.i = i

    def __call__(self, later: Later) -> None:
        c, b = self.c, self.b
        c.later.discard(later)
        c.inflight.release()
        frame = reply(later, later.method, later.rid, later.notify)
        if b is None:
            if frame is not None:
                c.write(frame + DELIMITER, 0)
            return
        b.replies[self.i] = frame
        b.open -= 1
        b.done(c)
