"""Cutting a connection's bytes into frames, with the memory of unfinished ones bounded.

A frame is one line of JSON; the limit is exact and lives in one place,
:func:`meshd.protocol.framing.frame_too_large` (the clients check the same before
sending): a frame of ``MAX_FRAME`` bytes, the newline not counted, is read; one byte
more is refused, whether or not its newline has arrived yet.

Partial frames cost memory until their newline comes. Each connection may hold up to
:data:`FREE_PARTIAL` bytes of them on its own (a receive's worth: every ordinary
request fits); beyond that it draws on one budget shared by all connections
(:class:`PartialBudget`). A connection that would overdraw it is refused
(:class:`OverBudget`): 1,500 clients each sending 1 MiB without a newline cannot
make the daemon hold 1.5 GB.

Reading costs little per request: the socket stays registered with the event loop
while the connection waits for its next frame, and the loop's callback reads what
arrived straight into the buffer (as asyncio's own transports do). The generic
stream read it replaces paid, per request, a failed ``recv``, an ``epoll_ctl`` to
watch the socket and another to stop, a fresh future and an extra pass of the loop.
While the connection is busy (a commit in flight, a batch running) the callback reads
no further than :data:`FREE_PARTIAL` bytes and stops watching, so a client that
pipelines faster than it is served backs up in its own socket, not in the daemon's
memory, and never draws on the budget for unfinished frames.

A frame loop that needs more bytes first tries a receive of its own, in case they
came since the loop last looked: when they did (a client that pipelines, or one on
the same CPU that sent its next request while the daemon was still on the way to
read it), that saves two passes of the loop. When they did not -- a client on
another CPU waiting for its reply before it sends again, nearly every client under
load -- that failed ``recv`` (a system call and a ``BlockingIOError``) cost every
request ~1.5 µs for nothing. So the early receive backs off while it fails: after
1, 3, 7 and then every 15 reads it is tried again, and a success (or bytes the
callback found while the loop was busy) makes it the first thing again.
"""

from __future__ import annotations

import asyncio
import socket

import anyio

from meshd.protocol.framing import DELIMITER, frame_too_large

RECEIVE_SIZE = 65536
"""Bytes asked of the socket per receive."""
EARLY_BACKOFF = 15
"""At most this many reads in a row skip the early receive once it keeps failing."""
FREE_PARTIAL = 65536
"""Unfinished-frame bytes a connection may hold without drawing on the shared budget."""
PARTIAL_BUDGET = 64 * 1024 * 1024
"""Unfinished-frame bytes beyond :data:`FREE_PARTIAL`, summed over every connection."""


class FrameTooLong(Exception):
    """The frame being read is over the limit; the rest of it cannot be framed."""


class OverBudget(Exception):
    """Taking more of this connection's unfinished frame would overdraw the shared budget."""


class PartialBudget:
    """Bytes of unfinished frames held beyond each connection's free allowance."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = PARTIAL_BUDGET) -> None:
        self.limit = limit
        self.used = 0


class FrameReader:
    """One connection's frames: ``await reader.frame()`` returns the next line, newline cut.

    Raises ``anyio.EndOfStream`` when the peer closes (an unfinished frame is dropped),
    ``anyio.BrokenResourceError`` when the socket fails, :class:`FrameTooLong` and
    :class:`OverBudget` as above. Call :meth:`release` when the connection ends (before
    the socket is closed), to stop watching the socket and give back what it held of
    the budget.
    """

    __slots__ = (
        "_backoff", "_budget", "_buf", "_eof", "_error", "_fd", "_held", "_loop", "_skip",
        "_sock", "_waiter", "_watching",
    )  # fmt: skip

    def __init__(self, sock: socket.socket, budget: PartialBudget) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._budget = budget
        self._buf = bytearray()
        self._held = 0
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self._watching = False
        self._error: OSError | None = None
        """Why the socket failed; raised (as anyio's error) once the buffer is used up."""
        self._eof = False
        self._skip = 0
        """Reads left that wait for the callback without an early receive (see the
        module's docstring); ``_backoff`` is how many the next failure skips."""
        self._backoff = 0

    def buffered(self) -> bool:
        """Whether bytes were read that no frame has taken yet."""
        return bool(self._buf)

    async def frame(self) -> bytes:
        buf = self._buf
        scanned = 0
        while True:
            end = buf.find(DELIMITER, scanned)
            if end >= 0:
                if frame_too_large(end):
                    raise FrameTooLong
                line = bytes(buf[:end])
                if end > FREE_PARTIAL:  # a big frame: let its allocation go, keep the rest
                    self._buf = bytearray(buf[end + 1 :])
                else:
                    del buf[: end + 1]
                if self._held or len(self._buf) > FREE_PARTIAL:
                    self._account()
                return line
            if frame_too_large(len(buf)):
                raise FrameTooLong
            self._account()
            scanned = len(buf)
            if self._eof:  # fresh exceptions: a kept one would hold this frame, and buf
                if self._error is not None:
                    raise anyio.BrokenResourceError from self._error
                raise anyio.EndOfStream
            await self._more()
            buf = self._buf

    async def _more(self) -> None:
        """Read more: at once when it is there already, else once the callback has."""
        if self._skip:
            self._skip -= 1
        elif self._recv():  # the next request is in already: no pass of the loop
            self._backoff = 0
            return
        else:  # not there: the client waits for its replies; try less often
            self._skip = self._backoff = min(2 * self._backoff + 1, EARLY_BACKOFF)
        if not self._watching:
            self._loop.add_reader(self._fd, self._readable)
            self._watching = True
        self._waiter = waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _recv(self, size: int = RECEIVE_SIZE) -> bool:
        """One receive into the buffer; whether it brought bytes or the end."""
        try:
            data = self._sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            self._stop(exc)
            return True
        if not data:
            self._stop(None)
            return True
        self._buf += data
        return True

    def _readable(self) -> None:
        """The loop's callback: read what arrived; wake the frame loop if it waits.

        While the frame loop is busy (frames already read wait their turn) it reads
        no further than :data:`FREE_PARTIAL`, then stops watching: requests that are
        merely pipelined never draw on the budget meant for unfinished frames.
        """
        waiter = self._waiter
        if waiter is None:
            self._skip = self._backoff = 0  # bytes came while the loop was busy: it pipelines
            room = FREE_PARTIAL - len(self._buf)
            if room > 0:
                self._recv(room)
            if len(self._buf) >= FREE_PARTIAL:
                self._unwatch()
            return
        if not self._recv() or self._eof:
            return
        self._waiter = None
        if not waiter.done():
            waiter.set_result(None)

    def _stop(self, error: OSError | None) -> None:
        """The peer closed (``error`` None) or the socket failed: read no more."""
        self._eof = True
        self._error = error
        self._unwatch()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._waiter = None
            waiter.set_result(None)

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self._loop.remove_reader(self._fd)

    def _account(self) -> None:
        held = max(0, len(self._buf) - FREE_PARTIAL)
        budget = self._budget
        grow = held - self._held
        if grow > 0 and budget.used + grow > budget.limit:
            raise OverBudget
        budget.used += grow
        self._held = held

    def release(self) -> None:
        """Stop watching the socket; give back this connection's share of the budget."""
        self._unwatch()
        self._budget.used -= self._held
        self._held = 0
        self._buf = bytearray()
        self._error = None
