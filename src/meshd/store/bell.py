"""How the writer thread tells the event loop that a batch is committed: its *bell*.

The thread hands finished batches back through a queue and one byte on a pipe the
loop watches, and the loop wakes each batch's callers (the daemon runs anyio on its
asyncio backend). That hand-off costs about one thread switch -- where
``anyio.to_thread`` cost four times that. The bell replaced
``call_soon_threadsafe``, whose wake-up reads the loop's own self-pipe until it fails
(a second ``recv`` and a ``BlockingIOError`` every commit) beside the callback it
queues: ~5 µs of a lone claim round trip.

:class:`Pending` is what a caller handed over (its writes, and how to tell it);
:func:`wake` tells a batch's callers, on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger("meshd.store")

Write = tuple[Any, ...]


class Pending:
    """Writes handed to the writer thread, and how to tell the caller."""

    __slots__ = ("error", "on_done", "waiter", "writes")

    def __init__(
        self,
        writes: list[Write],
        *,
        waiter: asyncio.Future[None] | None = None,
        on_done: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        self.writes = writes
        self.waiter = waiter
        self.on_done = on_done
        self.error: BaseException | None = None


class Bell:
    """The pipe the writer thread rings after each batch, and the batches it finished."""

    def __init__(self) -> None:
        self.done: collections.deque[list[Pending]] = collections.deque()
        """Batches the writer finished, for the loop to wake (see :meth:`rung`)."""
        self._pipe: tuple[int, int] | None = None
        """(read end, write end)."""
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make the pipe and have ``loop`` watch it; on the loop."""
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._loop = loop
        loop.add_reader(r, self.rung)

    def tell(self, batch: list[Pending]) -> None:
        """Have the loop wake ``batch``'s callers: queue it and ring the bell (one byte;
        a full pipe means the loop has bytes to read already). Without a running loop
        (not started, stopped, closed) they are woken here."""
        pipe, loop = self._pipe, self._loop
        if pipe is None or loop is None or loop.is_closed():
            wake(batch)
            return
        self.done.append(batch)
        try:  # noqa: SIM105 (suppress() would build a context manager every batch)
            os.write(pipe[1], b"\0")
        except OSError:  # full (the loop has a ring to read already), or closed
            pass

    def rung(self) -> None:
        """On the loop: wake the callers of every batch the writer finished, in order.

        The bell is read once, before the queue: a batch queued after that read rings
        again, so none is left behind (at worst a ring finds the queue empty)."""
        if self._pipe is not None:
            try:  # noqa: SIM105 (suppress() would build a context manager every batch)
                os.read(self._pipe[0], 4096)
            except BlockingIOError:
                pass
        done = self.done
        while done:
            wake(done.popleft())

    def close(self) -> None:
        """Stop watching the pipe and close it; wake what the writer finished last.
        Only once the writer thread has ended: a writer that did not stop in time
        keeps its pipe, as it may still ring, and a closed descriptor's number may be
        another file's by then."""
        pipe = self._pipe
        if pipe is None:
            return
        self._pipe = None
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(pipe[0])
        for fd in pipe:
            os.close(fd)
        self.rung()


def wake(batch: list[Pending]) -> None:
    """On the event loop: tell each caller its batch is done.

    An ``on_done`` that raises (a bug in what it tells) is logged and the rest are
    still woken: raised out of this one callback, it left every later caller of the
    batch waiting for good.
    """
    for p in batch:
        waiter = p.waiter
        if waiter is not None and not waiter.done():  # done: its caller was cancelled
            waiter.set_result(None)
        if p.on_done is not None:
            try:
                p.on_done(p.error)
            except Exception:
                log.exception("telling a commit's outcome failed")
