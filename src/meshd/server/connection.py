"""One client connection: its stream, its request slots, and one write path.

Replies and events share one write path: straight to the non-blocking socket, with
what the kernel does not take kept in a bounded backlog. A reader that leaves more
than :data:`BACKLOG_LIMIT` bytes of earlier replies (or :data:`EVENT_BACKLOG_LIMIT`
of events) unread, or takes nothing for :data:`SEND_TIMEOUT`, is dropped, never
waited on; the reply being written never counts against either. At most
:data:`MAX_INFLIGHT` ``concurrent`` requests run at once per connection
(:meth:`Connection.slot`); past that the connection is not read until one finishes.

The frame loop that reads the connection and runs its requests is the server's
(:mod:`meshd.server.serve`); the service sees only the connection's ``Conn``.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskGroup

from meshd.protocol.framing import DELIMITER
from meshd.protocol.jsonrpc import Later
from meshd.server.frames import FrameReader
from meshd.service import Conn

log = logging.getLogger("meshd.server")  # the server's log, one name for operators

BACKLOG_LIMIT = 16 * 1024 * 1024
"""Bytes of earlier replies one connection may leave unread before it is dropped. The
reply being written never counts against it: a client gets its answer however big
(a reader that stops reading is dropped after :data:`SEND_TIMEOUT`)."""
EVENT_BACKLOG_LIMIT = 256 * 1024
"""A subscriber this far behind on events (about 700 message events) is dropped:
events wait in the inbox anyway, and a stalled reader must not cost memory. Only
event bytes count: a big reply in the backlog does not make a subscriber "behind"."""
MAX_INFLIGHT = 128
"""Concurrent requests (waits, asks) one connection may have running at once. At the
bound the connection's frames are not read until one finishes: the client's writes
back up in its own socket buffer instead of the daemon queueing without limit."""
HANGUP_POLL = 0.1
"""How often a connection that is not being read is checked for a hang-up."""
SEND_TIMEOUT = 10.0
"""A reader that takes nothing of its backlog for this long is dropped."""

_HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


def peer_gone(sock: socket.socket) -> bool:
    """Whether the peer hung up, without reading (POLLRDHUP where the OS has it)."""
    poller = select.poll()
    poller.register(sock.fileno(), _HANGUP)
    return bool(poller.poll(0))


def _unanswered(later: Later) -> None:
    """:attr:`Connection.answer` until the server sets it."""
    raise RuntimeError("a connection's answer sink is not set")


def readable(sock: socket.socket | None) -> bool:
    """Whether bytes (or a hang-up) wait to be read on ``sock``, without reading them."""
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class Connection:
    """One client: its stream, and one write path for replies and events alike.

    Writes go straight to the non-blocking socket when nothing is waiting to be
    written, which is nearly always: no lock, no task switch, no timer per reply.
    What the kernel does not take waits in :attr:`backlog` (bounded by
    :data:`BACKLOG_LIMIT` bytes) and one flusher task writes it out as the socket
    drains. A reader that falls that far behind, or makes no progress for
    :data:`SEND_TIMEOUT`, is dropped, never waited on.
    """

    def __init__(self, stream: ByteStream, conn: Conn, tg: TaskGroup) -> None:
        self.stream = stream
        self.conn = conn
        self.tg = tg
        self.closed = False
        self.inflight = anyio.Semaphore(MAX_INFLIGHT)
        self.sock: socket.socket | None = None
        self.backlog = bytearray()
        self._parts: deque[list[Any]] = deque()  # [is_event, bytes left(, on_sent)] per frame
        self._queued = [0, 0]  # bytes of [replies, events] in the backlog
        self._flushing = False
        self.last_frame = time.monotonic()
        """When the last whole frame arrived (the idle timeout counts from here)."""
        self.reader: FrameReader | None = None
        self.later: set[Later] = set()
        """Requests waiting as records (a queued claim), no task: withdrawn at close."""
        self.answer: Callable[[Later], None] = _unanswered
        """Where those records' replies go once settled (the server's ``Answer``, one
        per connection; a batch element's goes into its batch instead)."""

    async def send(self, frame: bytes) -> None:
        """Write one reply frame (never blocks; see :meth:`write`)."""
        self.write(frame + DELIMITER, 0)

    def push(self, frame: bytes, on_sent: Callable[[], None] | None = None) -> None:
        """Write one event frame without waiting; drop the connection if it fell behind.
        ``on_sent`` is called once the whole frame is written out (never if the
        connection closes first: a dropped reader did not get it)."""
        self.write(frame + DELIMITER, 1, on_sent)

    def _sent(self, n: int) -> None:
        """``n`` bytes from the front of the backlog went out: count them off."""
        del self.backlog[:n]
        while n and self._parts:
            part = self._parts[0]
            took = min(n, part[1])
            part[1] -= took
            self._queued[part[0]] -= took
            n -= took
            if not part[1]:
                self._parts.popleft()
                if len(part) > 2:
                    part[2]()

    def write(self, data: bytes, event: int, on_sent: Callable[[], None] | None = None) -> None:
        if self.closed:
            return
        if not self.backlog and self.sock is not None:
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:  # the client went away: the end, not a failure
                log.debug("connection %d went away before its reply: %r", self.conn.id, exc)
                self.close()
                return
            if sent == len(data):
                if on_sent is not None:
                    on_sent()
                return
            data = data[sent:]
        ahead = self._queued[event]  # this kind's bytes already waiting, before this frame
        self.backlog += data
        self._parts.append([event, len(data)] if on_sent is None else [event, len(data), on_sent])
        self._queued[event] += len(data)
        over = self._queued[1] > EVENT_BACKLOG_LIMIT if event else ahead > BACKLOG_LIMIT
        if over:
            what = "events behind" if event else "replies unread"
            log.info(
                "connection %d has %d bytes of %s (stopped reading); dropped",
                self.conn.id, self._queued[event], what,
            )  # fmt: skip
            self.close()
            return
        if not self._flushing:
            self._flushing = True
            self.tg.start_soon(self._flush)

    async def _flush(self) -> None:
        try:
            while self.backlog and not self.closed:
                with anyio.move_on_after(SEND_TIMEOUT) as scope:
                    await anyio.wait_writable(self.sock)  # type: ignore[arg-type]
                if scope.cancelled_caught:
                    log.info("connection %d stopped reading; dropped", self.conn.id)
                    self.close()
                    return
                assert self.sock is not None
                try:
                    sent = self.sock.send(self.backlog)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    log.debug("connection %d went away: %r", self.conn.id, exc)
                    self.close()
                    return
                self._sent(sent)
        finally:
            self._flushing = False

    def close(self) -> None:
        self.closed = True
        self.tg.cancel_scope.cancel()

    def withdraw(self, most: int | None = None) -> None:
        """Withdraw requests still waiting as records (no reply): ``most`` of them, else
        all (it closed). Each on its own: one whose withdrawal raises is logged, and the
        rest still leave the queues (raised on, they stayed queued for good, ahead of
        everyone after them)."""
        later = self.later
        for _ in range(len(later) if most is None else min(most, len(later))):
            try:
                later.pop().cancel()
            except Exception:
                log.exception("connection %d: withdrawing a waiting request failed", self.conn.id)

    def busy(self) -> bool:
        """Whether the daemon owes this connection something: a running wait or ask,
        or replies and events it has not taken yet."""
        return self.inflight.value < MAX_INFLIGHT or bool(self.backlog)

    async def slot(self) -> bool:
        """Take one of the connection's MAX_INFLIGHT slots; False if the peer left.

        A free one is taken at once. Else the connection is not read until one is
        free (that is the backpressure), so a hang-up would go unseen and the
        connection's waits would linger: the socket is polled for it every 100 ms
        meanwhile.
        """
        try:
            self.inflight.acquire_nowait()
            return True
        except anyio.WouldBlock:
            pass
        while True:
            with anyio.move_on_after(HANGUP_POLL):
                await self.inflight.acquire()
                return True
            if self.sock is not None and peer_gone(self.sock):
                return False
